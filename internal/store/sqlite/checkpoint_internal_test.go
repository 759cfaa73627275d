package sqlite

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// bigObject is a write of a few WAL frames: one objects row whose body
// takes an overflow page.
func bigObject(tx *writeTx) error {
	_, err := tx.Exec(`INSERT INTO objects (kind, id, body, updated_at) VALUES ('test', ?, randomblob(6000), 0)`, time.Now().String())
	return err
}

// walFrames returns the WAL's frame count and how many of them are
// checkpointed, read on a file handle of the test's own.
func walFrames(t *testing.T, s *Store) (mx, backfilled int64) {
	t.Helper()
	f, err := os.Open(s.cfg.Path + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mx, backfilled, ok := readWALIndex(f)
	if !ok {
		t.Fatal("the -shm file does not hold a wal-index header")
	}
	return mx, backfilled
}

// steadyWrites runs n bigObject writes one after another (one transaction
// each) and returns the most frames the WAL held after any of them.
func steadyWrites(t *testing.T, s *Store, n int) (most int64) {
	t.Helper()
	for range n {
		if err := s.write(context.Background(), bigObject); err != nil {
			t.Fatal(err)
		}
		mx, _ := walFrames(t, s)
		most = max(most, mx)
	}
	return most
}

// TestGapCheckpointBoundsWAL checks that with Config.GapCheckpoint the
// writer keeps the WAL near GapCheckpoint frames under a steady writer by
// checkpointing between transactions while no interactive work is
// reported, that it runs no checkpoint of its own while interactive work
// is reported, and that the raised wal_autocheckpoint (4× GapCheckpoint)
// then bounds the WAL instead. Without gap checkpoints SQLite's default
// autocheckpoint lets the WAL reach 1,000 frames.
func TestGapCheckpointBoundsWAL(t *testing.T) {
	t.Parallel()
	const gap, writes = 50, 600 // ≥ 2 frames a write: > 1,000 frames in all
	for _, busy := range []bool{false, true} {
		s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: gap})
		s.WatchInteractive(func() bool { return busy })
		// The writer may have checkpointed Open's migrations before the
		// watcher was added; by the end of a first write it has.
		steadyWrites(t, s, 1)
		ran0 := s.gapCkpts.Load()
		most := steadyWrites(t, s, writes)
		ran := s.gapCkpts.Load() - ran0
		switch {
		case !busy && (most > 3*gap || ran == 0):
			t.Errorf("nothing reported in flight: the WAL reached %d frames (want ≤ %d) with %d gap checkpoints (want > 0)", most, 3*gap, ran)
		case busy && ran != 0:
			t.Errorf("interactive work reported in flight throughout: %d gap checkpoints ran, want 0", ran)
		case busy && (most > gapSafety*gap+2*gap || most <= 2*gap):
			t.Errorf("interactive work reported in flight throughout: the WAL reached %d frames, want past %d (no gap checkpoint) and ≤ %d (the safety net)", most, 2*gap, gapSafety*gap+2*gap)
		}
	}
}

// TestGapCheckpointWaitsForGap checks that a WAL past GapCheckpoint is
// not checkpointed while interactive work is reported in flight, and is
// once it is not, after the writer's next transaction.
func TestGapCheckpointWaitsForGap(t *testing.T) {
	t.Parallel()
	const gap = 40
	s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: gap})
	var busy atomic.Bool
	busy.Store(true)
	s.WatchInteractive(busy.Load)
	steadyWrites(t, s, 1) // past a checkpoint of Open's migrations (above)
	ran0 := s.gapCkpts.Load()
	for {
		steadyWrites(t, s, 1)
		if mx, done := walFrames(t, s); mx-done >= gap+10 {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := s.gapCkpts.Load() - ran0; n != 0 {
		t.Fatalf("%d gap checkpoints ran while interactive work was reported in flight", n)
	}
	busy.Store(false)
	steadyWrites(t, s, 1)
	deadline := time.Now().Add(5 * time.Second)
	for s.gapCkpts.Load() == ran0 {
		if time.Now().After(deadline) {
			t.Fatal("no gap checkpoint 5 s after interactive work ended and a write committed")
		}
		time.Sleep(time.Millisecond)
	}
	if mx, done := walFrames(t, s); mx != done {
		t.Errorf("after the gap checkpoint %d of %d frames are checkpointed, want all", done, mx)
	}
}
