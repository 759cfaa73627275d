package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
)

// gapSafety is how many times Config.GapCheckpoint the writer connection's
// wal_autocheckpoint is raised to with gap checkpoints on: the safety net
// that bounds the WAL when interactive work never leaves a gap.
const gapSafety = 4

// walIndexVersion is the wal-index header's iVersion (SQLite's
// WALINDEX_MAX_VERSION), checked before its fields are trusted.
const walIndexVersion = 3007000

// gapCheckpoint runs a PASSIVE checkpoint on the writer's connection
// between transactions when Config.GapCheckpoint is on, no interactive
// write is queued, no watcher (WatchInteractive) reports interactive work
// in flight, and the WAL holds at least GapCheckpoint frames not yet
// copied to the database file. SQLite otherwise runs the checkpoint
// inside the COMMIT that takes the WAL past wal_autocheckpoint, whichever
// write that is: under a 10,000-file sweep a checkpointing COMMIT took
// ~10 ms at the median and up to 48 ms against ~1 ms for a plain one, and
// 3 of the 9 slowest interactive writes were answered by one
// (docs/benchmarks.md, "Session 33 (s33h2)"). Only the writer goroutine
// calls it.
//
// Beside the writer (the default; not Config.GapCheckpointOnWriter) it
// runs nothing itself: it wakes the checkpointer (checkpointBeside), which
// checks the same conditions and
// runs the checkpoint on its own connection, so that an interactive write
// arriving during it is not held up behind its copy and fsync.
//
// Either way the checkpoint restarts the WAL only once it has copied
// every frame: the next write then starts the WAL again from its
// beginning. Run by the writer, nothing is written during it, so it
// always does. Run beside, the frames the writer appends during it are
// left for the next one: under a steady writer none ever catches up and
// the WAL grows to the safety net ("Session 23 (s23h5)"), but in the gaps
// of interactive work the writer is idle most of the time, and a
// checkpoint with nothing appended during it restarts the WAL too.
func (s *Store) gapCheckpoint() {
	if s.beside != nil {
		select {
		case s.beside.kick <- struct{}{}:
		default: // already woken
		}
		return
	}
	if s.cfg.GapCheckpoint <= 0 || s.interactiveAbout() {
		return
	}
	if n, ok := s.walBacklog(); !ok || n < int64(s.cfg.GapCheckpoint) {
		return
	}
	t0 := time.Now()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// A checkpoint that fails (SQLITE_BUSY from another process's
	// checkpoint) leaves the WAL to the safety net: nothing is lost.
	var busy, log, done int64
	var cm commitMark
	if cpulabel.On {
		cm = anatomyBegin(s)
	}
	if err := s.wconn.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err == nil {
		s.gapCkpts.Add(1)
	}
	if cpulabel.On {
		noteAnatomy(s, cm, "gap-checkpoint", nil)
		noteGapCheckpoint(s, t0)
	}
}

// walBacklog returns how many frames of the WAL a checkpoint has not yet
// copied to the database file (mxFrame - nBackfill), read from the
// wal-index header in the -shm file (SQLite's file format, "The WAL-Index
// Format": mxFrame at byte 16, nBackfill at byte 96, both in the host's
// byte order). ok is false when the file cannot be read or does not look
// like a wal-index: gap checkpoints then wait for the safety net. The
// writer connection keeps the header current between transactions, and
// only the writer (or another process's checkpoint) changes it.
func (s *Store) walBacklog() (n int64, ok bool) {
	return walBacklogOf(s.cfg.Path, &s.shm)
}

// walBacklogOf is walBacklog on the -shm file of the database at path,
// opened into *shm the first time.
func walBacklogOf(path string, shm **os.File) (n int64, ok bool) {
	if !openShm(path, shm) {
		return 0, false
	}
	mx, backfilled, ok := readWALIndex(*shm)
	return max(mx-backfilled, 0), ok
}

// openShm opens the -shm file of the database at path into *shm unless it
// is open already, and reports whether it is.
func openShm(path string, shm **os.File) bool {
	if *shm == nil {
		f, err := os.Open(path + "-shm")
		if err != nil {
			return false
		}
		*shm = f
	}
	return true
}

// besidePoll is how often the checkpointer asks the watchers again while
// the WAL's backlog waits for a gap in interactive work.
const besidePoll = time.Millisecond

// checkpointer runs gap checkpoints beside the writer
// (Config.GapCheckpoint, unless GapCheckpointOnWriter) on a connection of
// its own, in the
// goroutine checkpointBeside; Open starts it and Close stops it (s.stop)
// and closes its connection.
type checkpointer struct {
	db   *sql.DB // exactly one connection, conn
	conn *sql.Conn
	// shm is the checkpointer's own handle on the -shm file
	// (walBacklogOf), closed as checkpointBeside returns.
	shm *os.File
	// kick wakes the checkpointer: the writer sends on it, never
	// blocking, after each transaction (gapCheckpoint).
	kick chan struct{}
	done chan struct{} // closed as checkpointBeside returns
	// finishes counts the finishing checkpoints run since the last one
	// the backlog called for (besideDue; checkpointBeside's goroutine
	// only).
	finishes int
	// hook, set by tests, is called by the checkpointer just before
	// each checkpoint it runs.
	hook atomic.Pointer[func()]
}

// openCheckpointer opens the checkpointer's connection to cfg's database.
func openCheckpointer(ctx context.Context, cfg Config) (*checkpointer, error) {
	db, err := sql.Open(driverName, dsn(cfg.Path, cfg.Synchronous, false))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &checkpointer{db: db, conn: conn, kick: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// close closes the checkpointer's connection, once checkpointBeside has
// returned.
func (c *checkpointer) close() error {
	return errors.Join(c.conn.Close(), c.db.Close())
}

// checkpointBeside is the checkpointer's goroutine: woken by the writer
// (gapCheckpoint), it runs PASSIVE checkpoints on its own connection
// while one is due (besideDue) and no interactive work is about, or the
// backlog is overdue (besideOverdue) whatever is about
// (interactiveAbout, which
// reads only the interactive queue's length and the watchers, so it is
// safe beside the writer). While the backlog waits for a gap it asks
// again every besidePoll, so a gap that opens while the writer is idle is
// taken too; after a checkpoint that copied frames it looks again at
// once, so that frames appended during one are copied by the next (at
// most besideFinishes times, so as not to chase a writer that never
// pauses). The
// writer never waits for it: a write arriving meanwhile
// appends to the WAL beside the checkpoint (and its COMMIT's own
// autocheckpoint, the safety net, finds the checkpoint lock held and
// skips).
func (s *Store) checkpointBeside() {
	c := s.beside
	defer close(c.done)
	defer func() {
		if c.shm != nil {
			c.shm.Close()
		}
	}()
	poll := time.NewTimer(besidePoll)
	poll.Stop()
	for {
		select {
		case <-c.kick:
		case <-s.stop:
			return
		}
		for {
			due, finish, overdue := s.besideDue()
			if !due {
				break
			}
			if overdue || !s.interactiveAbout() {
				if finish {
					c.finishes++
				} else {
					c.finishes = 0
				}
				if !s.checkpointOnce() {
					break // no progress (a reader's snapshot, the lock held): wait for the next write
				}
				continue
			}
			poll.Reset(besidePoll)
			select {
			case <-poll.C:
			case <-s.stop:
				poll.Stop()
				return
			}
		}
	}
}

// besideFinishes is how many finishing checkpoints (besideDue's second
// rule) the checkpointer runs after each one the backlog called for: one
// usually copies what the writer appended during the first, so that the
// WAL restarts; more only chase a writer that never pauses, one
// checkpoint (and one sync of the database file) after every write
// (docs/benchmarks.md, "Session 38 (s38h1)").
const besideFinishes = 2

// besideOverdue is the backlog, in multiples of Config.GapCheckpoint, at
// which the checkpointer stops waiting for a gap in interactive work. Under
// a load that never leaves one (a steady stream of interactive jobs) the
// WAL would otherwise grow to the writer's safety net (gapSafety× the
// value) and be checkpointed whole inside the COMMIT that crosses it: a
// stall gapSafety× as long, holding every interactive write queued behind
// it. Beside the writer a checkpoint does not hold a write up (a COMMIT
// overlapping one took 0.3–1.8 ms more at the mean, against 7.5–21 ms more
// for a checkpointing COMMIT: docs/benchmarks.md, "Session 38 (s38h1)"),
// so an overdue one runs whatever interactive work is about.
const besideOverdue = 2

// besideDue reports whether the checkpointer has a checkpoint to run: the
// WAL holds at least Config.GapCheckpoint frames not yet checkpointed, or
// it holds at least that many frames and an earlier checkpoint copied some
// of them but not all (the writer appended during it), and fewer than
// besideFinishes such finishing checkpoints ran since the last of the
// first kind. The second finishes the WAL, so that the next write can
// restart it: without it the frames appended during a checkpoint waited
// for GapCheckpoint more, and the WAL restarted at ~2,000 frames instead
// of ~1,000 (docs/benchmarks.md, "Session 37 (s37h4)"). finish reports
// that it is of the second kind; overdue that the backlog reached
// besideOverdue× GapCheckpoint, and the checkpoint should not wait for a
// gap.
func (s *Store) besideDue() (due, finish, overdue bool) {
	c := s.beside
	if !openShm(s.cfg.Path, &c.shm) {
		return false, false, false
	}
	mx, bf, ok := readWALIndex(c.shm) // one read of the header, not two
	n := int64(s.cfg.GapCheckpoint)
	switch {
	case !ok:
		return false, false, false
	case mx-bf >= n:
		return true, false, mx-bf >= besideOverdue*n
	case mx >= n && bf > 0 && mx > bf && c.finishes < besideFinishes:
		return true, true, false
	}
	return false, false, false
}

// checkpointOnce runs one PASSIVE checkpoint on the checkpointer's
// connection and reports whether it copied any frame. One that finds the
// checkpoint lock held (the writer's autocheckpoint, another process) does
// nothing and is not counted, nor is one that copied nothing.
func (s *Store) checkpointOnce() (progress bool) {
	c := s.beside
	_, bf0, _ := readWALIndex(c.shm)
	if h := c.hook.Load(); h != nil {
		(*h)()
	}
	t0 := time.Now()
	if cpulabel.On {
		noteBesideBegin(s)
	}
	var busy, log, done int64
	if err := c.conn.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err == nil && busy == 0 && done > bf0 {
		s.gapCkpts.Add(1)
		progress = true
	}
	if cpulabel.On {
		noteBesideEnd(s, t0)
	}
	return progress
}

// walFrameSize is a WAL frame's size: its 24-byte header and a page of
// the store's 4 KiB.
const walFrameSize = 24 + 4096

// readWALPages returns the page numbers of frames [from, to) of the WAL
// file wal, as many as it could read: each frame's header begins with its
// page number, big-endian, after the WAL's own 32-byte header.
func readWALPages(wal *os.File, from, to int64) []uint32 {
	var out []uint32
	var b [4]byte
	for i := from; i < to; i++ {
		if _, err := wal.ReadAt(b[:], 32+i*walFrameSize); err != nil {
			return out
		}
		out = append(out, binary.BigEndian.Uint32(b[:]))
	}
	return out
}

// readWALIndex reads the WAL's frame count (mxFrame) and how many of them
// a checkpoint has copied (nBackfill) from the wal-index header in shm.
func readWALIndex(shm *os.File) (mx, backfilled int64, ok bool) {
	var b [100]byte
	if _, err := shm.ReadAt(b[:], 0); err != nil {
		return 0, 0, false
	}
	e := binary.NativeEndian
	if e.Uint32(b[0:]) != walIndexVersion || b[12] != 1 {
		return 0, 0, false
	}
	return int64(e.Uint32(b[16:])), int64(e.Uint32(b[96:])), true
}
