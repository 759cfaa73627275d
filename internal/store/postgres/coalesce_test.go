package postgres

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// tracedStore is a migrated store of one connection counted by a tracer.
func tracedStore(t *testing.T) (*Store, *roundTrips) {
	t.Helper()
	rt := &roundTrips{}
	return migratedStore(t, Config{Region: "us", MaxConns: 1, tracer: rt}), rt
}

// heldStore is a tracedStore whose connection the test holds: Insert
// calls made meanwhile all wait, as concurrent HTTP enqueues do behind a
// busy pool.
func heldStore(t *testing.T) (*Store, *roundTrips, func()) {
	t.Helper()
	s, rt := tracedStore(t)
	conn, err := s.pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Released by the test, or at its end if it failed first (before the
	// store's Close, which waits for it).
	release := sync.OnceFunc(conn.Release)
	t.Cleanup(release)
	return s, rt, release
}

// insertEach inserts each job by its own concurrent call once all calls
// wait (the connection held), and returns each call's result and error.
func insertEach(t *testing.T, s *Store, release func(), jobs []*job.Job) ([]store.InsertResult, []error) {
	t.Helper()
	res, errs := make([]store.InsertResult, len(jobs)), make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			r, err := s.Insert(context.Background(), []*job.Job{j}, storetest.Unpaced)
			if err == nil {
				res[i] = r[0]
			}
			errs[i] = err
		})
	}
	testkit.WaitFor(t, testkit.Timeout, "every call to wait", func() bool { return s.inserts.pending() == len(jobs) })
	release()
	wg.Wait()
	return res, errs
}

// Single-job inserts that wait at the same moment share transactions:
// 40 calls commit in at most coalesceFlushers+1, each call with its own
// job. Without coalescing each call is its own transaction (40).
func TestInsertsCoalesced(t *testing.T) {
	t.Parallel()
	s, rt, release := heldStore(t)
	jobs := make([]*job.Job, 40)
	for i := range jobs {
		jobs[i] = storetest.NewJob("t"+strconv.Itoa(i%3), job.LaneInteractive, "k"+strconv.Itoa(i%5))
	}
	b0 := rt.begins.Load()
	res, errs := insertEach(t, s, release, jobs)
	if txs := rt.begins.Load() - b0; txs > coalesceFlushers+1 {
		t.Errorf("40 waiting calls took %d transactions, want at most %d", txs, coalesceFlushers+1)
	}
	for i, j := range jobs {
		if errs[i] != nil || res[i].Existing || res[i].Job.ID != j.ID {
			t.Fatalf("call %d: %+v, %v; want its own job %s", i, res[i], errs[i], j.ID)
		}
		if _, err := s.Get(context.Background(), j.ID); err != nil {
			t.Fatalf("job of call %d: %v", i, err)
		}
	}
}

// A call that fails a coalesced transaction (its job id is taken) fails
// alone: the calls it shared the transaction with are inserted.
func TestCoalescedInsertFailsAlone(t *testing.T) {
	t.Parallel()
	s, _, release := heldStore(t)
	taken := storetest.NewJob("acme", job.LaneInteractive, "k")
	jobs := make([]*job.Job, 12)
	for i := range jobs {
		jobs[i] = storetest.NewJob("acme", job.LaneInteractive, "k")
	}
	jobs[5].ID = taken.ID
	// The taken job goes in first, through the held connection's queue
	// like the rest, so it is committed before they run.
	done := make(chan error, 1)
	go func() {
		_, err := s.Insert(context.Background(), []*job.Job{taken}, storetest.Unpaced)
		done <- err
	}()
	testkit.WaitFor(t, testkit.Timeout, "the first call to wait", func() bool { return s.inserts.pending() == 1 })
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	conn, err := s.pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, errs := insertEach(t, s, conn.Release, jobs)
	for i, err := range errs {
		if i == 5 {
			if !errors.Is(err, store.ErrConflict) {
				t.Errorf("call 5 reused a taken id: %v, want ErrConflict", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("call %d failed beside call 5: %v", i, err)
		}
	}
}

// A call whose context ends while it waits is withdrawn: it returns the
// context's error and inserts nothing, and the others are not disturbed.
func TestCoalescedInsertWithdrawn(t *testing.T) {
	t.Parallel()
	s, _, release := heldStore(t)
	// Fill the flushers, so that the next call stays queued.
	var wg sync.WaitGroup
	for i := range coalesceFlushers {
		wg.Go(func() {
			j := storetest.NewJob("acme", job.LaneInteractive, "k"+strconv.Itoa(i))
			if _, err := s.Insert(context.Background(), []*job.Job{j}, storetest.Unpaced); err != nil {
				t.Errorf("insert: %v", err)
			}
		})
		testkit.WaitFor(t, testkit.Timeout, "a flusher to take the call", func() bool {
			s.inserts.mu.Lock()
			defer s.inserts.mu.Unlock()
			return s.inserts.calls == i+1 && len(s.inserts.queue) == 0
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := storetest.NewJob("acme", job.LaneInteractive, "k")
	done := make(chan error, 1)
	go func() {
		_, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced)
		done <- err
	}()
	testkit.WaitFor(t, testkit.Timeout, "the call to queue", func() bool { return s.inserts.pending() == coalesceFlushers+1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn call: %v, want context.Canceled", err)
	}
	release()
	wg.Wait()
	if _, err := s.Get(context.Background(), j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the withdrawn call's job: %v, want ErrNotFound", err)
	}
}

// An insert is one round trip of at most six statements (BEGIN, keys,
// groups, the jobs without and with an idempotency key, COMMIT) whatever
// its size: the jobs go in as arrays, not one INSERT each.
func TestInsertStatementsDoNotGrow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rt := tracedStore(t)
	for n, want := range map[int]int64{1: 5, 500: 6} {
		jobs := make([]*job.Job, n)
		for i := range jobs {
			jobs[i] = storetest.NewJob("t"+strconv.Itoa(i%4), job.LaneBatch, "k"+strconv.Itoa(i%9))
			if i%2 == 1 {
				jobs[i].IdempotencyKey = "key-" + strconv.Itoa(i)
			}
		}
		t0, s0 := rt.trips.Load(), rt.statements.Load()
		if _, err := s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
		if trips, stmts := rt.trips.Load()-t0, rt.statements.Load()-s0; trips != 1 || stmts != want {
			t.Errorf("insert of %d jobs: %d round trips, %d statements; want 1 and %d", n, trips, stmts, want)
		}
	}
}
