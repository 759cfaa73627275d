package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestBatchHandlerYieldsToInteractive: while an interactive handler runs,
// a batch-lane job leased meanwhile does not start its handler until the
// interactive one returns, or until the starvation bound
// (DefaultBatchYieldMax) has passed with it still running. In simulated
// time, so the durations are exact.
func TestBatchHandlerYieldsToInteractive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
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
		e := start(t, engine.Config{Store: s, BatchYieldMax: engine.DefaultBatchYieldMax, Kinds: map[string]engine.Kind{"noop": {Handler: h}}})
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
