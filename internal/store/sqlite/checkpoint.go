package sqlite

import (
	"context"
	"encoding/binary"
	"os"
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
// (docs/benchmarks.md, "Session 33 (s33h2)"). Run by the writer itself,
// with nothing written during it, the checkpoint copies every frame, so
// the next write can restart the WAL from its beginning; a checkpoint on
// another connection could not (a busy writer appends meanwhile:
// "Session 23 (s23h5)"). Only the writer goroutine calls it.
func (s *Store) gapCheckpoint() {
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
	if s.shm == nil {
		f, err := os.Open(s.cfg.Path + "-shm")
		if err != nil {
			return 0, false
		}
		s.shm = f
	}
	mx, backfilled, ok := readWALIndex(s.shm)
	return max(mx-backfilled, 0), ok
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
