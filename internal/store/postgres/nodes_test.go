package postgres

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// The tests here run two Stores (two pools, as two ratelane nodes would) on
// one schema and check the guarantees that only hold if the row locking is
// right: together they never exceed a key's rate or concurrency cap, never
// lease one job twice at once, and end every job exactly once.

var t0 = storetest.T0

func insertN(t *testing.T, s *Store, n, tenants int, keys ...string) []*job.Job {
	t.Helper()
	jobs := make([]*job.Job, n)
	for i := range jobs {
		jobs[i] = storetest.NewJob(fmt.Sprintf("tenant-%d", i%tenants), job.LaneInteractive, keys...)
	}
	for start := 0; start < n; start += 100 {
		if _, err := s.Insert(context.Background(), jobs[start:min(start+100, n)], storetest.Unpaced); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	return jobs
}

// leaseN leases n jobs of s at now for a minute and fails the test unless
// exactly n came back.
func leaseN(t *testing.T, s *Store, now time.Time, n int) []*job.Job {
	t.Helper()
	got, err := s.Lease(context.Background(), store.LeaseParams{Now: now, Max: n, LeaseFor: time.Minute})
	if err != nil || len(got) != n {
		t.Fatalf("lease at %v: %d jobs, %v; want %d", now, len(got), err, n)
	}
	return got
}

// keyedJobs returns n interactive jobs of one tenant over the 16 keys k0
// to k15: the backlog of the plan, WAL and work-per-job measurements.
func keyedJobs(n int) []*job.Job {
	jobs := make([]*job.Job, n)
	for i := range jobs {
		jobs[i] = storetest.NewJob("t", job.LaneInteractive, "k"+strconv.Itoa(i%16))
	}
	return jobs
}

// insertAll inserts jobs in Inserts of at most 1,000 jobs each.
func insertAll(tb testing.TB, s *Store, jobs []*job.Job) {
	tb.Helper()
	for i := 0; i < len(jobs); i += 1000 {
		if _, err := s.Insert(context.Background(), jobs[i:min(len(jobs), i+1000)], storetest.Unpaced); err != nil {
			tb.Fatal(err)
		}
	}
}

func upsert(t *testing.T, s *Store, c admission.Config) {
	t.Helper()
	if _, err := s.UpsertLimit(context.Background(), c, storetest.T0); err != nil {
		t.Fatal(err)
	}
}

func finishAll(ctx context.Context, s *Store, jobs []*job.Job, now time.Time) error {
	if len(jobs) == 0 {
		return nil
	}
	ts := make([]store.Transition, len(jobs))
	for i, j := range jobs {
		ts[i] = successOf(j, now)
	}
	errs, err := s.Finish(ctx, ts)
	if err != nil {
		return err
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("finish %s: %w", jobs[i].ID, e)
		}
	}
	return nil
}

// Invariant 6 across nodes: with a fake clock stepping 5 ms at a time and
// four lessees on two nodes contending at every step, the starts admitted by
// a key never exceed its declared shapes over any window (a 50/s bucket
// with burst 5: 5 + 50*t; a sliding window of 10 per 200 ms; both a bucket
// and a window at once), and the key still runs at its rate. The window's
// start log lives in the key row, locked by the lease, so two nodes share
// it as they share the bucket.
func TestTwoNodesShareTokenBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    admission.Config
		min  int // starts expected at least, in the 1 s
	}{
		{"bucket", admission.Config{Name: "paced", Rate: 50, Burst: 5}, 50},
		{"window", admission.Config{Name: "paced", Windows: []admission.Window{{Limit: 10, Period: 200 * time.Millisecond}}}, 40},
		{"multi", admission.Config{Name: "paced", Rate: 50, Burst: 5,
			Windows: []admission.Window{{Limit: 12, Period: 300 * time.Millisecond}}}, 36},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testTwoNodesShape(t, tc.c, tc.min)
		})
	}
}

func testTwoNodesShape(t *testing.T, c admission.Config, minStarts int) {
	ctx := context.Background()
	a, b := twoNodes(t)
	upsert(t, a, c)
	// 60 groups: more than one lease call takes (2*Max+16), so lessees on
	// both nodes hold different groups and really race for the one key.
	insertN(t, a, 300, 60, "paced")

	const steps, step = 200, 5 * time.Millisecond // 1 s of fake time
	starts := make([]int, steps)
	for i := range steps {
		now := t0.Add(time.Duration(i) * step)
		var wg sync.WaitGroup
		var n atomic.Int64
		for _, s := range []*Store{a, b, a, b} {
			wg.Go(func() {
				got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 3, LeaseFor: time.Minute})
				if err == nil {
					err = finishAll(ctx, s, got, now)
				}
				if err != nil {
					t.Error(err)
				}
				n.Add(int64(len(got)))
			})
		}
		wg.Wait()
		starts[i] = int(n.Load())
	}
	total := 0
	for i := range steps {
		inWindow := 0
		for j := i; j < steps; j++ {
			inWindow += starts[j]
			window := time.Duration(j-i) * step
			if limit := c.Burst + c.Rate*window.Seconds(); c.Rate > 0 && float64(inWindow) > limit+1e-9 {
				t.Fatalf("%d starts in the %v from step %d; the bucket allows %.2f", inWindow, window, i, limit)
			}
			for _, w := range c.Windows {
				if window < w.Period && float64(inWindow) > w.Limit {
					t.Fatalf("%d starts within %v from step %d; the window allows %v per %v", inWindow, window, i, w.Limit, w.Period)
				}
			}
		}
		total += starts[i]
	}
	// SKIP LOCKED may cost a step now and then, but the shapes catch up.
	if total < minStarts {
		t.Fatalf("only %d starts in 1 s, want at least %d: contention is starving the key", total, minStarts)
	}
	t.Logf("%d starts in 1 s of fake time", total)
}

// A concurrency cap of 3 holds across two nodes: the jobs running at any
// moment, as the database sees them, never exceed 3, and every job ends.
func TestTwoNodesShareConcurrencyCap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := twoNodes(t)
	upsert(t, a, admission.Config{Name: "capped", Concurrency: 3})
	const n = 90
	insertN(t, a, n, 45, "capped") // more groups than one lease call takes

	var done, maxRunning atomic.Int64
	var clock atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		s := []*Store{a, b}[w%2]
		wg.Go(func() {
			for done.Load() < n && ctx.Err() == nil {
				now := t0.Add(time.Duration(clock.Add(1)) * time.Millisecond)
				got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 2, LeaseFor: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					continue
				}
				// Hold the leases while asking the database how many
				// jobs are running: an exact snapshot across both nodes.
				var running int64
				if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state = 'running'`).Scan(&running); err != nil {
					t.Error(err)
					return
				}
				for m := maxRunning.Load(); running > m && !maxRunning.CompareAndSwap(m, running); m = maxRunning.Load() {
				}
				if err := finishAll(ctx, s, got, now); err != nil {
					t.Error(err)
					return
				}
				done.Add(int64(len(got)))
			}
		})
	}
	wg.Wait()
	if got := done.Load(); got != n {
		t.Fatalf("%d of %d jobs ended", got, n)
	}
	if m := maxRunning.Load(); m > 3 || m < 2 {
		t.Fatalf("at most %d jobs ran at once; want 3 (never more)", m)
	}
	k, err := a.GetLimit(ctx, "capped")
	if err != nil || k.InFlight != 0 {
		t.Fatalf("after the run in_flight = %d, %v; want 0", k.InFlight, err)
	}
	t.Logf("max running at once: %d", maxRunning.Load())
}

// Under contention (eight lessees on two nodes, many groups, keys shared
// between groups) no job is leased twice at once and every job ends exactly
// once: SKIP LOCKED hands each node different rows, and the guarded finish
// accepts each lease's outcome once.
func TestSkipLockedContention(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := twoNodes(t)
	const n = 600
	var jobs []*job.Job
	for i, keys := range [][]string{{"shared"}, {"shared", "x"}, {"x", "shared"}, {"y"}} {
		jobs = append(jobs, insertN(t, a, n/4, 3+i, keys...)...)
	}

	var held sync.Map
	var mu sync.Mutex
	ended := map[string]int{}
	var clock atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		s := []*Store{a, b}[w%2]
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				all := len(ended) == n
				mu.Unlock()
				if all {
					return
				}
				now := t0.Add(time.Duration(clock.Add(1)) * time.Microsecond)
				got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 5, LeaseFor: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				for _, j := range got {
					if _, dup := held.LoadOrStore(j.ID, true); dup {
						t.Errorf("job %s leased twice at once", j.ID)
					}
				}
				for _, j := range got {
					held.Delete(j.ID)
				}
				if err := finishAll(ctx, s, got, now); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, j := range got {
					ended[j.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, j := range jobs {
		if ended[j.ID] != 1 {
			t.Fatalf("job %s ended %d times", j.ID, ended[j.ID])
		}
	}
	st, err := a.Stats(ctx, t0)
	if err != nil || st.Counts[job.LaneInteractive][job.StatePublished] != n || st.Running != 0 {
		t.Fatalf("stats = %+v, %v; want %d published, none running", st, err, n)
	}
}

// A lease transaction never waits: a key (or group) locked by another
// transaction is skipped at once, and other work is still leased.
func TestLeaseNeverWaitsOnLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	locked := insertN(t, s, 1, 1, "busy")[0]
	free := insertN(t, s, 1, 1, "idle")[0]

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM limit_keys WHERE name = 'busy' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := s.Lease(lctx, store.LeaseParams{Now: t0, Max: 10, LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("lease while a key is locked: %v", err)
	}
	if len(got) != 1 || got[0].ID != free.ID {
		t.Fatalf("leased %d jobs; want only the job on the free key", len(got))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = s.Lease(ctx, store.LeaseParams{Now: t0, Max: 10, LeaseFor: time.Minute})
	if err != nil || len(got) != 1 || got[0].ID != locked.ID {
		t.Fatalf("after the lock is released: %d jobs, %v; want the job on the busy key", len(got), err)
	}
}

// Concurrent inserts of one idempotency key, from two nodes and in
// batches, create exactly one job, and every caller gets that job back.
func TestConcurrentIdempotentInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := twoNodes(t)
	const callers = 16
	results := make([][]store.InsertResult, callers)
	var wg sync.WaitGroup
	for i := range callers {
		s := []*Store{a, b}[i%2]
		wg.Go(func() {
			one := storetest.NewJob("acme", job.LaneInteractive, "k")
			one.IdempotencyKey = "order-42"
			other := storetest.NewJob("acme", job.LaneBatch, "k2", "k")
			other.IdempotencyKey = fmt.Sprintf("other-%d", i%3)
			res, err := s.Insert(ctx, []*job.Job{other, one}, storetest.Unpaced)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	created := map[string]int{}
	owner := map[string]string{}
	for _, res := range results {
		for _, r := range res {
			if !r.Existing {
				created[r.Job.IdempotencyKey]++
			}
			if prev, ok := owner[r.Job.IdempotencyKey]; ok && prev != r.Job.ID {
				t.Fatalf("key %s answered with jobs %s and %s", r.Job.IdempotencyKey, prev, r.Job.ID)
			}
			owner[r.Job.IdempotencyKey] = r.Job.ID
		}
	}
	for _, k := range []string{"order-42", "other-0", "other-1", "other-2"} {
		if created[k] != 1 {
			t.Errorf("key %s created %d jobs, want 1", k, created[k])
		}
	}
	var rows int
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&rows); err != nil || rows != 4 {
		t.Fatalf("%d jobs stored, %v; want 4", rows, err)
	}
}
