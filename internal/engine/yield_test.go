package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// pacerOff turns the batch pacer (pacer.go, on by default) off in the
// yield gate's and the CPU governor's tests: the pacer rests a computing
// piece for a while after interactive work, on top of the gate's hold and
// the governor's turns, and these tests time those by themselves (the
// pacer's own are in pacer_test.go).
const pacerOff = -1

// TestBatchHandlerYieldsToInteractive: while an interactive handler runs,
// a batch-lane job leased meanwhile does not start its handler until the
// interactive one returns, or until the starvation bound
// (DefaultBatchYieldMax) has passed with it still running. In simulated
// time, so the durations are exact.
func TestBatchHandlerYieldsToInteractive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Without the SQLite writer's hold (sqlite.Config.BatchHold): with
		// it, the batch job's finish and the lease riding on it, a
		// batch-lane write, may be kept open up to the hold while the
		// interactive handler runs, so the second batch job was leased up
		// to 10 ms into the 30 ms below and held only 20 (3 of 15 runs).
		// This test is about the yield gate's hold alone.
		raw := newSQLite(t, sqlite.Config{BatchHold: -1})
		var s store.Store = raw
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		defer free() // a failed check must not leave the handler blocked
		batchStarted := make(chan time.Time, 2)
		h := engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
			if j.Lane == job.LaneBatch {
				batchStarted <- time.Now()
				return job.Outcome{Class: job.ClassSuccess}
			}
			entered <- struct{}{}
			<-release
			return job.Outcome{Class: job.ClassSuccess}
		})
		insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
		// A computing kind: only those are held (TestWaitingBatchKindIsNotHeld).
		e := start(t, engine.Config{Store: s, BatchYieldMax: engine.DefaultBatchYieldMax, BatchCPUShare: pacerOff, Kinds: map[string]engine.Kind{"noop": {Handler: h, Computes: true}}})
		<-entered

		// The interactive handler never returns in time: the bound
		// releases the batch job.
		t0 := time.Now()
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		e.Notify()
		if waited := (<-batchStarted).Sub(t0); waited < engine.DefaultBatchYieldMax || waited > engine.DefaultBatchYieldMax+50*time.Millisecond {
			t.Fatalf("the batch handler started %v after its insert, want the bound %v (plus a lease poll)", waited, engine.DefaultBatchYieldMax)
		}
		if c := e.YieldCounts(); c.Bounded != 1 || c.Held != 0 {
			t.Fatalf("yield counts %+v, want one piece released by the bound", c)
		}

		// The interactive handler returns 30 ms after the next batch job
		// is leased: the batch handler starts then, not at the bound.
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		e.Notify()
		time.Sleep(30 * time.Millisecond)
		synctest.Wait()
		select {
		case at := <-batchStarted:
			t.Fatalf("the batch handler started at %v while the interactive one ran", at)
		default:
		}
		t1 := time.Now()
		free()
		if at := <-batchStarted; !at.Equal(t1) {
			t.Fatalf("the batch handler started %v after the interactive one returned, want at once", at.Sub(t1))
		}
		c := e.YieldCounts()
		if c.Bounded != 1 || c.Held != 1 {
			t.Fatalf("yield counts %+v, want one piece bounded and one held until the interactive work ended", c)
		}
		if c.HeldSeconds < (engine.DefaultBatchYieldMax + 30*time.Millisecond).Seconds() {
			t.Fatalf("held %v s in all, want at least the bound plus 30 ms", c.HeldSeconds)
		}
	})
}

// TestYieldWithoutAGateReturns: Yield outside a batch-lane handler (no
// gate in its context) does not wait.
func TestYieldWithoutAGateReturns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		engine.Yield(context.Background())
		if !time.Now().Equal(t0) {
			t.Fatal("Yield waited without a gate")
		}
	})
}

// TestWaitingBatchKindIsNotHeld: a batch-lane job of a kind that waits
// rather than computes (no Kind.Computes, as a webhook delivery) starts
// at once while interactive work is in flight, gate on: holding such
// jobs delayed every delivery behind each interactive job and costs the
// CPU nothing.
func TestWaitingBatchKindIsNotHeld(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		entered, release := make(chan struct{}), make(chan struct{})
		defer close(release)
		interactive := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			entered <- struct{}{}
			<-release
			return job.Outcome{Class: job.ClassSuccess}
		})
		delivered := make(chan time.Time, 1)
		deliver := engine.HandlerFunc(func(ctx context.Context, _ *job.Job) job.Outcome {
			engine.Yield(ctx) // returns at once for a waiting kind
			delivered <- time.Now()
			return job.Outcome{Class: job.ClassSuccess}
		})
		insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
		e := start(t, engine.Config{Store: s, BatchYieldMax: engine.DefaultBatchYieldMax,
			Kinds: map[string]engine.Kind{"noop": {Handler: interactive}, "deliver": {Handler: deliver}}})
		<-entered

		d := storetest.NewJob("acme", job.LaneBatch, "k")
		d.Kind = "deliver"
		t0 := time.Now()
		insertNow(t, s, d)
		e.Notify()
		if at := <-delivered; !at.Equal(t0) {
			t.Fatalf("the delivery started %v after its insert with interactive work in flight, want at once", at.Sub(t0))
		}
		if c := e.YieldCounts(); c != (engine.YieldCounts{}) {
			t.Fatalf("yield counts %+v, want none: a waiting kind never comes to the gate", c)
		}
	})
}

// TestQueuedInteractiveInsertClosesTheGate: an interactive job inserted
// through the engine's writer counts as interactive work in flight before
// any lease takes it, so a computing batch handler that yields meanwhile
// is held (here until the bound: the one worker slot is the batch
// handler's, so nothing can lease the interactive job); once a lease has
// taken it and it has run, nothing is left in flight.
func TestQueuedInteractiveInsertClosesTheGate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		started, proceed := make(chan struct{}), make(chan struct{})
		yielded := make(chan time.Duration, 1)
		sweep := engine.HandlerFunc(func(ctx context.Context, _ *job.Job) job.Outcome {
			started <- struct{}{}
			<-proceed
			t0 := time.Now()
			engine.Yield(ctx)
			yielded <- time.Since(t0)
			return job.Outcome{Class: job.ClassSuccess}
		})
		ran := make(chan struct{}, 1)
		interactive := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			ran <- struct{}{}
			return job.Outcome{Class: job.ClassSuccess}
		})
		b := storetest.NewJob("acme", job.LaneBatch, "k")
		b.Kind = "sweep"
		insertNow(t, s, b)
		e := start(t, engine.Config{Store: s, Workers: 1, BatchYieldMax: engine.DefaultBatchYieldMax, BatchCPUShare: pacerOff,
			Kinds: map[string]engine.Kind{"noop": {Handler: interactive}, "sweep": {Handler: sweep, Computes: true}}})
		<-started

		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		j.EligibleAt, j.CreatedAt = time.Now(), time.Now()
		if _, err := e.Jobs().Insert(context.Background(), []*job.Job{j}, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		close(proceed)
		if held := <-yielded; held != engine.DefaultBatchYieldMax {
			t.Fatalf("Yield held the sweep %v with an interactive job queued, want the bound %v", held, engine.DefaultBatchYieldMax)
		}
		<-ran
		synctest.Wait()
		if _, _, n := engine.BudgetState(e); n != 0 {
			t.Fatalf("%d pieces of interactive work in flight after the queued job ran, want 0", n)
		}
		if c := e.YieldCounts(); c.Bounded != 1 {
			t.Fatalf("yield counts %+v, want one piece released by the bound", c)
		}
	})
}
