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

// TestGapCheckpointBoundsWAL checks that with Config.GapCheckpoint on the
// writer (GapCheckpointOnWriter) it keeps the WAL near GapCheckpoint frames under a steady writer by
// checkpointing between transactions while no interactive work is
// reported, that it runs no checkpoint of its own while interactive work
// is reported, and that the raised wal_autocheckpoint (4× GapCheckpoint)
// then bounds the WAL instead. Without gap checkpoints SQLite's default
// autocheckpoint lets the WAL reach 1,000 frames.
func TestGapCheckpointBoundsWAL(t *testing.T) {
	t.Parallel()
	const gap, writes = 50, 600 // ≥ 2 frames a write: > 1,000 frames in all
	for _, busy := range []bool{false, true} {
		s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: gap, GapCheckpointOnWriter: true})
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
	s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: gap, GapCheckpointOnWriter: true})
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

// waitGapCheckpoints waits until more than n gap checkpoints have run, or
// fails t after 10 s (the failure's bound, not a timing assertion).
func waitGapCheckpoints(t *testing.T, s *Store, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.gapCkpts.Load() <= n {
		if time.Now().After(deadline) {
			t.Fatalf("no gap checkpoint past the %dth 10 s after the writes", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGapCheckpointBesideRestartsWAL checks that with
// gap checkpoints beside the writer (the default), under writes in bursts with gaps between
// them, the checkpointer (on its own connection) checkpoints the WAL
// after each burst, so that it stays bounded and the first write of the
// next burst restarts it from its beginning; and that no checkpoint runs
// while interactive work is reported.
func TestGapCheckpointBesideRestartsWAL(t *testing.T) {
	t.Parallel()
	const gap, bursts = 40, 12
	s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: gap})
	var busy atomic.Bool
	s.WatchInteractive(busy.Load)
	// Past a checkpoint of Open's migrations: the checkpointer may run
	// one once woken (by the writer's first look, or this write).
	waitGapCheckpoints(t, s, 0)
	steadyWrites(t, s, 1)
	var most int64
	for b := range bursts {
		ran0 := s.gapCkpts.Load()
		// In the first burst interactive work is reported: no
		// checkpoint runs until it ends.
		busy.Store(b == 0)
		for mx, done := walFrames(t, s); mx-done < gap; mx, done = walFrames(t, s) {
			most = max(most, steadyWrites(t, s, 1))
		}
		if b == 0 {
			time.Sleep(20 * time.Millisecond)
			if n := s.gapCkpts.Load() - ran0; n != 0 {
				t.Fatalf("%d gap checkpoints ran beside the writer while interactive work was reported", n)
			}
			busy.Store(false)
		}
		waitGapCheckpoints(t, s, ran0)
		deadline := time.Now().Add(10 * time.Second)
		for mx, done := walFrames(t, s); mx != done; mx, done = walFrames(t, s) {
			if time.Now().After(deadline) {
				t.Fatalf("burst %d: 10 s after the writes %d of %d frames are checkpointed, want all", b, done, mx)
			}
			time.Sleep(time.Millisecond)
		}
		before, _ := walFrames(t, s)
		steadyWrites(t, s, 1)
		if after, _ := walFrames(t, s); after >= before || after > 10 {
			t.Fatalf("burst %d: the WAL held %d frames after the next write, %d before it: it did not restart", b, after, before)
		}
	}
	if most > 3*gap {
		t.Errorf("the WAL reached %d frames, want ≤ %d", most, 3*gap)
	}
}

// TestGapCheckpointBesideSteadyWriter checks that under a writer that
// never pauses, with no interactive work reported, the checkpointer beside
// it runs about one checkpoint per GapCheckpoint frames (with at most
// besideFinishes finishing ones after each), not one after every write:
// chasing the frames appended during each checkpoint ran 413-595
// checkpoints in a throughput run against 31-39 without gap checkpoints,
// and the run's throughput fell (docs/benchmarks.md, "Session 38
// (s38h1)").
func TestGapCheckpointBesideSteadyWriter(t *testing.T) {
	t.Parallel()
	const gap, writes = 100, 400
	s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: gap})
	s.WatchInteractive(func() bool { return false })
	steadyWrites(t, s, 1)
	mx0, _ := walFrames(t, s)
	ran0 := s.gapCkpts.Load()
	var frames int64
	for range writes {
		before, _ := walFrames(t, s)
		steadyWrites(t, s, 1)
		after, _ := walFrames(t, s)
		if after > before {
			frames += after - before
		} else {
			frames += after // the WAL restarted
		}
	}
	ran := s.gapCkpts.Load() - ran0
	if most := (frames/gap + 2) * (1 + besideFinishes); ran > most {
		t.Errorf("%d checkpoints beside a steady writer over %d frames (from %d), want ≤ %d", ran, frames, mx0, most)
	}
}

// TestGapCheckpointBesideDoesNotBlockWriter checks that a write commits
// while a checkpoint beside the writer is held in progress (by the test
// hook), and that the held checkpoint then runs.
func TestGapCheckpointBesideDoesNotBlockWriter(t *testing.T) {
	t.Parallel()
	const gap = 40
	s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: gap})
	// Past the checkpoint of Open's migrations (which may run before the
	// hook is set) and a write.
	waitGapCheckpoints(t, s, 0)
	steadyWrites(t, s, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	hook := func() {
		if once.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
	}
	s.beside.hook.Store(&hook)
	ran0 := s.gapCkpts.Load()
	fed := make(chan struct{})
	go func() { // the writes that wake the checkpointer
		defer close(fed)
		for mx, done := walFrames(t, s); mx-done < gap; mx, done = walFrames(t, s) {
			if err := s.write(context.Background(), bigObject); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint began beside the writer 10 s after the WAL passed GapCheckpoint")
	}
	wrote := make(chan error, 1)
	go func() { wrote <- s.write(context.Background(), bigObject) }()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a write did not commit in 10 s while a checkpoint beside the writer was held")
	}
	// The feeder ends while the checkpoint is held (the backlog cannot
	// fall): joined before the release, it cannot still be writing when
	// the test's cleanup closes the store (it was, and failed with
	// errClosed, when a released checkpoint let the backlog fall first).
	<-fed
	close(release)
	waitGapCheckpoints(t, s, ran0)
}

// TestGapCheckpointBesideClose checks that Close stops the checkpointer's
// goroutine and closes its connection: the writer's connection is then
// the last to close, which checkpoints the WAL and removes it.
func TestGapCheckpointBesideClose(t *testing.T) {
	t.Parallel()
	s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: 40})
	steadyWrites(t, s, 30)
	c := s.beside
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	default:
		t.Fatal("the checkpointer's goroutine is still running after Close")
	}
	if err := c.conn.PingContext(context.Background()); err == nil {
		t.Error("the checkpointer's connection is still open after Close")
	}
	if _, err := os.Stat(s.cfg.Path + "-wal"); !os.IsNotExist(err) {
		t.Errorf("the WAL is still there after Close (%v): a connection stayed open", err)
	}
}

// TestGapCheckpointDefault checks Config.GapCheckpoint's values: zero is
// DefaultGapCheckpoint beside the writer, negative is off (SQLite's own
// autocheckpoint at 1,000 frames, no checkpointer), and a positive value
// is used as given, beside the writer or on it (GapCheckpointOnWriter);
// the writer's wal_autocheckpoint is the safety net, gapSafety× it.
func TestGapCheckpointDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      Config
		gap      int
		beside   bool
		autoCkpt int
	}{
		{"default", Config{}, DefaultGapCheckpoint, true, gapSafety * DefaultGapCheckpoint},
		{"default on the writer", Config{GapCheckpointOnWriter: true}, DefaultGapCheckpoint, false, gapSafety * DefaultGapCheckpoint},
		{"off", Config{GapCheckpoint: -1}, -1, false, 1000},
		{"off, on the writer", Config{GapCheckpoint: -1, GapCheckpointOnWriter: true}, -1, false, 1000},
		{"explicit beside", Config{GapCheckpoint: 50}, 50, true, gapSafety * 50},
		{"explicit on the writer", Config{GapCheckpoint: 50, GapCheckpointOnWriter: true}, 50, false, gapSafety * 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := OpenTest(t, tc.cfg)
			if s.cfg.GapCheckpoint != tc.gap {
				t.Errorf("GapCheckpoint %d, want %d", s.cfg.GapCheckpoint, tc.gap)
			}
			if got := s.beside != nil; got != tc.beside {
				t.Errorf("checkpointer beside the writer: %v, want %v", got, tc.beside)
			}
			s.wmu.Lock()
			var n int
			err := s.wconn.QueryRowContext(context.Background(), `PRAGMA wal_autocheckpoint`).Scan(&n)
			s.wmu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.autoCkpt {
				t.Errorf("the writer's wal_autocheckpoint is %d, want %d", n, tc.autoCkpt)
			}
		})
	}
}

// TestGapCheckpointBesideOverdue checks that beside the writer a backlog
// of besideOverdue× GapCheckpoint frames is checkpointed although
// interactive work is reported in flight throughout (a load that leaves no
// gap), and that no checkpoint runs while interactive work is about before
// the backlog is overdue. Without the overdue rule the WAL grows to the
// writer's safety net (gapSafety× GapCheckpoint) and is checkpointed whole
// inside a COMMIT.
func TestGapCheckpointBesideOverdue(t *testing.T) {
	t.Parallel()
	const gap, writes = 50, 600 // ≥ 2 frames a write: > 1,000 frames in all
	s := OpenTest(t, Config{Synchronous: SyncNormal, GapCheckpoint: gap})
	s.WatchInteractive(func() bool { return true })
	// Past a checkpoint of Open's migrations, which may run before the
	// watcher was added.
	steadyWrites(t, s, 1)
	waitBesideIdle(t, s)
	shm, err := os.Open(s.cfg.Path + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	var early atomic.Int64 // checkpoints begun before the backlog was overdue
	hook := func() {
		if mx, bf, ok := readWALIndex(shm); ok && mx-bf < besideOverdue*gap {
			early.Add(1)
		}
	}
	s.beside.hook.Store(&hook)
	ran0 := s.gapCkpts.Load()
	steadyWrites(t, s, writes)
	waitBesideIdle(t, s)
	ran := s.gapCkpts.Load() - ran0
	if ran == 0 {
		t.Errorf("no checkpoint beside the writer over %d writes with interactive work reported throughout, want the overdue backlogs checkpointed", writes)
	}
	if n := early.Load(); n != 0 {
		t.Errorf("%d of %d checkpoints began with interactive work about and a backlog under %d frames, want 0", n, ran, besideOverdue*gap)
	}
	if mx, bf := walFrames(t, s); mx-bf >= besideOverdue*gap {
		t.Errorf("with the checkpointer idle %d frames are not checkpointed, want fewer than %d", mx-bf, besideOverdue*gap)
	}
}

// waitBesideIdle waits (at most 10 s, the failure's bound) until the
// checkpointer has nothing more to do for the writes so far: two looks a
// besidePoll apart find the same count of checkpoints run.
func waitBesideIdle(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for last := int64(-1); ; {
		n := s.gapCkpts.Load()
		if n == last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the checkpointer beside the writer still ran checkpoints 10 s after the writes")
		}
		last = n
		time.Sleep(20 * besidePoll)
	}
}
