package engine_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// Crashes inside the writes that fold several state changes into one
// (sessions 29-31), as TestFoldedPublicationCrash and TestFusedFinishCrash
// do for the aggregation's: the process dies at the write, before it
// reaches the store or after it committed, and a restarted process on
// the same SQLite file finishes the work, nothing lost, nothing twice.

// dyingInsertLease is a store on which the process dies at an insert
// that leases in its own write (store.InsertLeaser): before the write
// (afterCommit false) or after it committed, inserting the jobs and
// leasing them, before the engine heard back and so before any handler
// started.
type dyingInsertLease struct {
	store.Store
	afterCommit bool
	died        chan struct{}
	once        sync.Once
	leases      atomic.Int64 // Lease calls returned
}

func (d *dyingInsertLease) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	defer d.leases.Add(1)
	return d.Store.Lease(ctx, p)
}

func (d *dyingInsertLease) InsertLease(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config, p store.LeaseParams) ([]store.InsertResult, []*job.Job, error) {
	defer d.once.Do(func() { close(d.died) })
	if d.afterCommit {
		if _, _, err := d.Store.(store.InsertLeaser).InsertLease(ctx, os, jobs, def, p); err != nil {
			return nil, nil, err
		}
	}
	return nil, nil, errDied
}

// TestInsertLeaseCrash: a process dies at the write of an interactive
// review's insert that also leases its part (insertlease.go). Died before
// the write: nothing of the review is stored, and the producer's retry
// in the restarted process inserts it; it runs once. Died after the
// commit: the part is running under a lease no handler will ever work
// (the fault: a lease taken by a write whose process never started the
// handler), and the restarted process recovers it when it expires, runs
// it and publishes the parent once (I1, I3).
func TestInsertLeaseCrash(t *testing.T) {
	t.Parallel()
	eachCrashSide(t, func(t *testing.T, afterCommit bool) {
		ctx := context.Background()
		open := reopenable(t)
		s1 := open()
		dying := &dyingInsertLease{Store: s1, afterCommit: afterCommit, died: make(chan struct{})}
		var calls atomic.Int64
		const workers = 4
		e1, err := engine.New(engine.Config{Store: dying, Region: "us", Kinds: nowhereReportKinds(&calls),
			Workers: workers, PollInterval: time.Hour, LeaseFor: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := e1.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// An insert leases in its write only when the engine has a free
		// slot: not while its first lease, at start, holds them all.
		// After that empty lease the fetch loop idles (PollInterval).
		testkit.Eventually(t, time.Minute, "the first process's first lease", func() error {
			if dying.leases.Load() < 1 || engine.FreeSlots(e1) != workers {
				return errors.New("not yet")
			}
			return nil
		})
		parent, parts := interactiveParent(1)
		if _, err := e1.Jobs().InsertParts(ctx, parent, parts, admission.Config{}); !errors.Is(err, errDied) {
			t.Fatalf("the insert answered %v, want the death: it did not lease in its own write, no fault injected", err)
		}
		stop, cancel := context.WithTimeout(ctx, 5*time.Second)
		e1.Stop(stop)
		cancel()
		part, err := s1.Get(ctx, parts[0].ID)
		if !afterCommit {
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("after a death before the write the part reads %+v, %v; want it not stored", part, err)
			}
		} else if err != nil || part.State != job.StateRunning || part.LeaseExpiresAt.IsZero() {
			t.Fatalf("after a death after the commit the part reads %+v, %v; want it running under the insert's lease", part, err)
		}
		s1.Close()

		s2 := open()
		t.Cleanup(func() { s2.Close() })
		var calls2 atomic.Int64
		e2 := start(t, engine.Config{Store: s2, Kinds: nowhereReportKinds(&calls2), LeaseFor: time.Second})
		if !afterCommit {
			// The producer saw the insert fail and retries it.
			if _, err := e2.Jobs().InsertParts(ctx, parent, parts, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			e2.Notify()
		}
		waitState(t, s2, parent.ID, job.StatePublished)
		afterStartSweep(t, e2, s2, parent.ID) // one aggregation record
		if calls2.Load() != 1 {
			t.Fatalf("the restarted engine aggregated %d times, want the parent once", calls2.Load())
		}
		// After the commit the first attempt was the dead process's lease.
		publishedAfter(t, s2, parts[0].ID, map[bool]int{false: 1, true: 2}[afterCommit])
	})
}

// dyingMany is a store whose first AdvanceMany (store.ManyAdvancer)
// fails midway: the first keep advances committed, the others never
// reached the store, as when the process dies inside it (the writer
// commits an AdvanceMany's advances in as many transactions as its
// batches take, so a death leaves any prefix) or its connection breaks.
// The caller hears of none of them. Every later advance fails until
// revived, after which the store is itself again.
type dyingMany struct {
	store.Store
	keep          int
	dead, revived atomic.Bool
}

func (d *dyingMany) AdvanceMany(ctx context.Context, ps []store.AdvanceParams) ([]*job.Job, []error) {
	if d.revived.Load() {
		return d.Store.(store.ManyAdvancer).AdvanceMany(ctx, ps)
	}
	js, errs := make([]*job.Job, len(ps)), make([]error, len(ps))
	for i := range errs {
		errs[i] = errDied
	}
	if d.dead.Swap(true) {
		return js, errs
	}
	n := min(d.keep, len(ps))
	_, done := d.Store.(store.ManyAdvancer).AdvanceMany(ctx, ps[:n])
	if err := errors.Join(done...); err != nil {
		errs[0] = err // the test's fault was not the one meant
	}
	return js, errs
}

func (d *dyingMany) Advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	if d.dead.Load() && !d.revived.Load() {
		return nil, errDied
	}
	return d.Store.Advance(ctx, p)
}

// TestAdvanceManyCrash: a sweep pass's stretch of ready batch-lane
// parents advances from one goroutine (store.ManyAdvancer), not
// atomically; the pass fails inside it with 10 of the stretch's parents
// published and the rest still accepted. The process dies there, and
// the restarted process's start sweep aggregates and publishes exactly
// the others; or the store comes back (a dropped connection), and the
// same engine's next pass does. Every parent published, with one
// aggregation record each (I1, I2).
func TestAdvanceManyCrash(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{true, false} {
		t.Run(map[bool]string{true: "restart", false: "same process"}[restart], func(t *testing.T) {
			t.Parallel()
			advanceManyFails(t, restart)
		})
	}
}

func advanceManyFails(t *testing.T, restart bool) {
	const parents, keep = 40, 10
	ctx := context.Background()
	open := reopenable(t)
	s1 := open()
	ids := insertBatchParents(t, s1, parents)
	dying := &dyingMany{Store: s1, keep: keep}
	var calls atomic.Int64
	kinds := func(calls *atomic.Int64) map[string]engine.Kind {
		return map[string]engine.Kind{"report": {Aggregate: sumParts(calls)}}
	}
	// Not started: only the pass aggregates, as the start sweep would.
	e1, err := engine.New(engine.Config{Store: dying, Region: "us", Kinds: kinds(&calls)})
	if err != nil {
		t.Fatal(err)
	}
	e1.SweepParents(ctx) // its error is the fault's
	if !dying.dead.Load() {
		t.Fatal("the pass never called AdvanceMany: no fault injected")
	}
	published := 0
	for _, id := range ids {
		j, err := s1.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == job.StatePublished {
			published++
		} else if j.State != job.StateAccepted {
			t.Fatalf("after the fault parent %s is %s, want published or accepted", id, j.State)
		}
	}
	if published != keep {
		t.Fatalf("after the fault %d parents are published, want the %d it let through", published, keep)
	}

	s2, again := store.Store(s1), &calls
	if restart {
		s1.Close()
		s2 = open()
		t.Cleanup(func() { s2.Close() })
		again = new(atomic.Int64)
		e2 := start(t, engine.Config{Store: s2, Kinds: kinds(again)})
		for _, id := range ids {
			waitState(t, s2, id, job.StatePublished)
		}
		afterStartSweep(t, e2, s2, ids[0])
	} else {
		t.Cleanup(func() { s1.Close() })
		dying.revived.Store(true)
		calls.Store(0)
		if err := e1.SweepParents(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if j, err := s2.Get(ctx, id); err != nil || j.State != job.StatePublished {
			t.Fatalf("parent %s: %+v, %v; want it published", id, j, err)
		}
		if recs := aggregations(t, s2, id); len(recs) != 1 {
			t.Errorf("parent %s has %d aggregation records, want 1", id, len(recs))
		}
	}
	if got := again.Load(); got != parents-keep {
		t.Errorf("the pass after the fault aggregated %d parents, want the %d left accepted", got, parents-keep)
	}
}

// lostFinishLease is a store whose first FinishLease that leases a job
// commits and then loses its answer, as a PostgreSQL node whose
// connection drops between the COMMIT and its reply (RELIABILITY.md T7):
// the engine learns only that the write failed.
type lostFinishLease struct {
	store.Store
	lost   atomic.Pointer[job.Job] // the job the lost write leased
	leased atomic.Int64            // jobs leased, by any write
}

func (l *lostFinishLease) FinishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	errs, jobs, err := l.Store.(store.FinishLeaser).FinishLease(ctx, ts, p)
	l.leased.Add(int64(len(jobs)))
	if err == nil && len(jobs) > 0 && l.lost.CompareAndSwap(nil, jobs[0]) {
		return nil, nil, errDied
	}
	return errs, jobs, err
}

func (l *lostFinishLease) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	jobs, err := l.Store.Lease(ctx, p)
	l.leased.Add(int64(len(jobs)))
	return jobs, err
}

// TestFinishLeaseAnswerLost: the write that finishes a job and leases the
// next one on its key (held at a concurrency of 1) commits, and its
// answer is lost. The engine finishes alone again (refused: the finish is
// in), and the job the lost write leased, running under a lease no
// handler works, is recovered when the lease expires, within one lease
// period plus a reap, and runs: both jobs published, each handled once,
// the second on its second attempt (I1, I3).
func TestFinishLeaseAnswerLost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t)
		s := &lostFinishLease{Store: base}
		var handled sync.Map // job id -> *atomic.Int64
		ping := engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
			n, _ := handled.LoadOrStore(j.ID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return job.Outcome{Class: job.ClassSuccess}
		})
		const leaseFor = 10 * time.Second
		start(t, engine.Config{Store: s, Workers: 2, LeaseFor: leaseFor, PollInterval: time.Hour,
			Kinds: map[string]engine.Kind{"ping": {Handler: ping}}})
		synctest.Wait() // past the start sweep and the first, empty, lease
		var js []*job.Job
		for range 2 {
			j := storetest.NewJob("acme", job.LaneInteractive, "cap")
			j.Kind = "ping"
			js = append(js, j)
		}
		now := time.Now()
		for _, j := range js {
			j.EligibleAt, j.CreatedAt = now, now
		}
		if _, err := base.Insert(context.Background(), js, admission.Config{Concurrency: 1}); err != nil {
			t.Fatal(err)
		}
		if k, err := base.GetLimit(context.Background(), "cap"); err != nil || k.Concurrency != 1 {
			t.Fatalf("key cap: %+v, %v; want a concurrency of 1", k, err)
		}
		inserted := time.Now()
		time.Sleep(time.Hour + time.Second) // the poll leases the first job
		lost := s.lost.Load()
		if lost == nil {
			t.Fatal("no finish leased a job: no fault injected")
		}
		for _, j := range js {
			got := waitState(t, base, j.ID, job.StatePublished)
			n, _ := handled.Load(j.ID)
			if n == nil || n.(*atomic.Int64).Load() != 1 {
				t.Fatalf("job %s handled %v times, want once", j.ID, n)
			}
			if want := map[bool]int{false: 1, true: 2}[j.ID == lost.ID]; got.Attempt != want {
				t.Errorf("job %s published after %d attempts, want %d", j.ID, got.Attempt, want)
			}
			if j.ID == lost.ID {
				if d := got.FinishedAt.Sub(inserted) - time.Hour; d > leaseFor+leaseFor/10+time.Second {
					t.Errorf("the job of the lost lease finished %v after the poll, want within a lease period and a reap", d)
				}
			}
		}
	})
}
