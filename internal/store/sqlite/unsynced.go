package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
)

// Batch-lane commits without their own fsync (Config.BatchSyncDefer).
//
// In WAL mode a commit appends the transaction's pages to the -wal file;
// synchronous=FULL then fsyncs that file, NORMAL does not (the frames are
// in the OS's page cache: they survive kill -9, not a power loss). A later
// fsync of the -wal file makes every frame before it durable, and so does
// a checkpoint (SQLite fsyncs the WAL before it copies frames into the
// database, at NORMAL too). Frames are recovered after a power loss only
// as a prefix (each frame's checksum chains on the one before): what
// survives is a prefix of the commits, never a commit without the ones
// before it.
//
// So the writer may commit a transaction of deferrable batch-lane writes
// at NORMAL and answer its writes only after the next fsync of the WAL:
// the next commit at FULL (every other transaction's, the interactive
// lane's included, unchanged) or an fsync of the -wal file of its own
// (fsyncWAL, run by the syncer goroutine, off the writer's path), when
// no interactive commit is to be expected (no watcher reports
// interactive work) or the oldest answer has waited BatchSyncDefer. An
// answered write is durable, as without the deferral.
//
// What the deferral changes is visibility: other connections (the read
// pool, another process) read a NORMAL commit before it is durable. A
// reader that acts outside the store on such a row (an API answer, a
// publication) may act on state a power loss then takes away. Only
// writes whose loss is harmless to such a reader are marked deferrable
// (mayDefer): their effect is redone after a loss by ratelane itself, to
// the same visible state, and nothing outside acts on them before the
// write is answered. Everything a reader learns through a write of its
// own (a claim, a lease) is safe anyway: that write's answer comes after
// an fsync, which covers every frame before it.

// committed is how runBatch's transaction ended.
type committed int

const (
	notCommitted    committed = iota // rolled back, failed, or not begun
	committedSynced                  // committed with its fsync (FULL)
	committedNoSync                  // committed at NORMAL: durable at the next sync
)

// deferKey marks a context whose batch-lane writes may be deferred.
type deferKey struct{}

// mayDefer marks ctx's writes as deferrable: committed, when the store
// defers (Config.BatchSyncDefer), without an fsync and answered at the
// next sync of the WAL. A driver method marks its write so only when a
// power loss that takes the write away, after other connections read it,
// is harmless: ratelane redoes it to the same visible state and nothing
// outside acts on it before its answer. Only the batch lane's writes are
// ever deferred.
func mayDefer(ctx context.Context) context.Context {
	return context.WithValue(ctx, deferKey{}, true)
}

// deferrable reports whether ctx was marked by mayDefer.
func deferrable(ctx context.Context) bool {
	v, _ := ctx.Value(deferKey{}).(bool)
	return v
}

// deferTx reports whether a transaction begun with first is committed
// without an fsync: the store defers, first may be deferred, and the oldest answer already waiting has not reached the bound
// (then this transaction's own fsync, at FULL, answers it).
func (s *Store) deferTx(first *writeReq) bool {
	return s.cfg.BatchSyncDefer > 0 && s.cfg.Synchronous == SyncFull && first.mayDefer &&
		(len(s.unsynced) == 0 || time.Since(s.unsyncedSince) < s.cfg.BatchSyncDefer)
}

// restoreSync sets the writer connection back to FULL after a deferred
// transaction, so that every other transaction (and Migrate, between
// them) commits with its fsync. A connection that cannot be set back
// would commit the next transactions without one: the store then refuses
// every write (syncErr).
func (s *Store) restoreSync(tx *writeTx) {
	if _, err := s.exec(tx, `PRAGMA synchronous = FULL`); err != nil {
		err = fmt.Errorf("sqlite: synchronous back to FULL: %w", err)
		s.syncErr.CompareAndSwap(nil, &err)
	}
}

// allDeferrable reports whether every write of batch may wait for a
// later sync.
func allDeferrable(batch []ran) bool {
	for _, w := range batch {
		if !w.r.mayDefer {
			return false
		}
	}
	return true
}

// syncIdle hands the deferred answers to the syncer when no commit with
// an fsync is to be expected soon: the writer has nothing queued, no
// watcher reports interactive work, and none was seen for BatchSyncDefer
// (quiet). While interactive work is about, the answers ride its commits'
// fsyncs (commit, answerUnsynced) or wait for the bound (syncDue), so
// that the syncer's fsync does not meet an interactive commit's on the
// disk, which serializes them. Handing them over whenever nothing was in
// flight at that instant, as at first, gave 90 % of the deferred commits
// a syncer fsync of their own under a sweep and cut no fsync
// (docs/benchmarks.md, "Session 33 (s33h1)"): interactive work is in
// flight only a small part of the time, but seen within tens of
// milliseconds most of it.
func (s *Store) syncIdle() {
	if len(s.unsynced) == 0 {
		return
	}
	if s.interactiveBusy() {
		s.interSeen = time.Now()
		return
	}
	if len(s.batchReqs) == 0 && len(s.reqs) == 0 && s.quiet() {
		s.syncPending(syncQuiet)
	}
}

// quiet reports whether no interactive work was seen (committed by the
// writer, or reported by a watcher while answers waited) for
// BatchSyncDefer.
func (s *Store) quiet() bool {
	return time.Since(s.interSeen) >= s.quietWindow()
}

// quietWindow is how long after interactive work was last seen the
// deferred answers still wait for an interactive commit: BatchSyncDefer,
// at most Store.quietMax (syncQuietMax).
func (s *Store) quietWindow() time.Duration {
	return min(s.cfg.BatchSyncDefer, s.quietMax)
}

// syncQuietMax bounds the quiet window (quietWindow). It need only span
// the gaps between one interactive job's commits (its insert, its lease,
// its finish: a review's handler runs ~5 ms at the median), inside which
// the next interactive commit is near and an fsync beside it likely;
// past them the next job's arrival is not foretold by the last one's, and
// a longer window only delays the batch lane's answers.
const syncQuietMax = 20 * time.Millisecond

// syncDue returns a channel that fires when the deferred answers are
// due another look: when the oldest reaches BatchSyncDefer (the bound)
// or when the quiet window since the last interactive work seen ends,
// whichever comes first; nil (never) with none waiting.
func (s *Store) syncDue() <-chan time.Time {
	if len(s.unsynced) == 0 {
		return nil
	}
	now := time.Now()
	due := s.unsyncedSince.Add(s.cfg.BatchSyncDefer)
	if end := s.interSeen.Add(s.quietWindow()); end.Before(due) && end.After(now) {
		// A window already ended was judged by syncIdle: only queued
		// writes kept it from syncing, and they wake the writer.
		due = end
	}
	wait := max(0, due.Sub(now))
	if s.syncTimer == nil {
		s.syncTimer = time.NewTimer(wait)
	} else {
		s.syncTimer.Reset(wait)
	}
	return s.syncTimer.C
}

// syncLate hands the deferred answers to the syncer once the oldest has
// waited BatchSyncDefer, whatever interactive work is about: the batch
// lane is never starved. Before that, syncDue's wake-up was the quiet
// window's end, which syncIdle judges on the writer's next look.
func (s *Store) syncLate() {
	if len(s.unsynced) > 0 && time.Since(s.unsyncedSince) >= s.cfg.BatchSyncDefer {
		s.syncPending(syncBound)
	}
}

// Why the writer hands deferred answers to the syncer (syncPending), as
// a cpulabels build counts them.
const (
	syncQuiet  = "quiet"          // no interactive work seen for BatchSyncDefer
	syncBound  = "bound"          // the oldest answer waited BatchSyncDefer
	syncJoined = "non-deferrable" // a write that may not wait joined a deferred transaction
	syncClose  = "close"          // Close
)

// syncPending hands the deferred writes to the syncer, which syncs the
// WAL and answers them. It syncs off the writer goroutine: the writer
// goes on with the next transaction (an interactive one first) while the
// fsync runs, which covers every frame written before it began. why
// (syncQuiet, ...) is counted by a cpulabels build.
func (s *Store) syncPending(why string) {
	if len(s.unsynced) == 0 {
		return
	}
	if cpulabel.On {
		noteSyncHandoff(why, len(s.unsynced))
	}
	s.syncq <- s.unsynced
	s.unsynced = nil
}

// syncer syncs the WAL for each hand-off of deferred writes (and every
// other one queued meanwhile: one fsync answers them all) and answers
// them. A failed sync answers them with its error, and every later write
// fails with it (syncErr): after a failed fsync the OS may have dropped
// the frames it could not write (Linux marks them clean), and later
// commits would follow a hole in the WAL that recovery stops at. The
// store must be reopened.
func (s *Store) syncer() {
	defer close(s.syncDone)
	for batch := range s.syncq {
	more:
		for {
			select {
			case b, ok := <-s.syncq:
				if !ok {
					break more
				}
				batch = append(batch, b...)
			default:
				break more
			}
		}
		if e := s.syncErr.Load(); e != nil {
			// A sync failed before: a later one may succeed without
			// having written what the failed one lost.
			answer(batch, *e)
			continue
		}
		t0 := time.Now()
		var mark interMark
		if cpulabel.On {
			mark = s.markInteractive()
		}
		err := s.syncWAL()
		s.walSyncs.Add(1)
		if cpulabel.On {
			noteSync(len(batch), time.Since(t0))
			noteSyncMet(s, mark)
		}
		if err != nil {
			err = fmt.Errorf("sqlite: sync the WAL: %w", err)
			s.syncErr.CompareAndSwap(nil, &err)
		}
		answer(batch, err)
	}
}

// answerUnsynced answers the deferred writes not yet handed to the
// syncer: a commit with its fsync (an interactive one's when
// hasInteractive) made them durable, unless a sync of the syncer's failed
// meanwhile.
func (s *Store) answerUnsynced(hasInteractive bool) {
	if cpulabel.On {
		noteRide(hasInteractive, len(s.unsynced))
	}
	var err error
	if e := s.syncErr.Load(); e != nil {
		err = *e
	}
	answer(s.unsynced, err)
	clear(s.unsynced)
	s.unsynced = s.unsynced[:0]
}

// answer answers batch's writes, committed and durable, each with its
// own result; with err set (the transaction or its sync failed) a write
// that succeeded is answered err, and one that failed still its own
// error, which says more. Their lane statistics were taken at their
// commit (Store.commit).
func answer(batch []ran, err error) {
	for _, w := range batch {
		werr := w.err
		if err != nil && werr == nil {
			werr = err // a write that failed keeps its own error
		}
		w.r.done <- werr
	}
}

// fsyncWAL fsyncs the database's -wal file through a handle of its own,
// opened once. fsync makes a file's written pages durable whichever
// descriptor wrote them (it works on the file, not the descriptor), so
// it covers the frames SQLite wrote through its own. SQLite names the
// WAL after the database's real path (it follows symbolic links). The
// file keeps its identity while the store is open: SQLite restarts a WAL
// by writing it again from the start, truncates it at most, and deletes
// it only as the last connection closes (the writer's stays open until
// Close, which closes this handle first). Should it be another file all
// the same, it is opened again.
func (s *Store) fsyncWAL() error {
	if s.walPath == "" {
		// Resolved once: the database's path does not change while it
		// is open, and a sync should not walk the directories each time.
		path, err := filepath.EvalSymlinks(s.cfg.Path)
		if err != nil {
			return err
		}
		s.walPath = path + "-wal"
	}
	path := s.walPath
	if s.walFile != nil {
		held, err1 := s.walFile.Stat()
		now, err2 := os.Stat(path)
		if err1 != nil || err2 != nil || !os.SameFile(held, now) {
			s.walFile.Close()
			s.walFile = nil
		}
	}
	if s.walFile == nil {
		// Read-write: Windows flushes only a handle open for writing.
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		s.walFile = f
	}
	return s.walFile.Sync()
}
