package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
)

// TestSweepAggregatesDroppedWakeups: a wake-up dropped from a full queue
// is aggregated by the next sweep pass, within one SweepEvery, although
// the pass between two full walks reads only the parents of parts
// finished since the last one (these parents have no parts: only the
// engine's record of what it dropped names them). The interactive loop
// is held by a first parent whose aggregator blocks, its queue (one
// place) holds a second, and the third and fourth are dropped.
func TestSweepAggregatesDroppedWakeups(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		const every = time.Second
		var calls atomic.Int64
		entered, release := make(chan struct{}), make(chan struct{})
		var first string
		sum := sumParts(&calls)
		agg := engine.AggregatorFunc(func(ctx context.Context, p *job.Job, parts []*job.Job) job.Outcome {
			if p.ID == first {
				close(entered)
				<-release
			}
			return sum(ctx, p, parts)
		})
		e, err := engine.New(engine.Config{Store: s, Region: "us", PollInterval: 5 * time.Millisecond,
			BatchYieldMax: -1, // the sweep alone: the held interactive aggregation is in flight throughout, and the gate would hold each stretch its bound
			Kinds:         map[string]engine.Kind{"report": {Aggregate: agg, SweepEvery: every}}})
		if err != nil {
			t.Fatal(err)
		}
		engine.SetParentQueues(e, 1)
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			e.Stop(ctx)
		})
		synctest.Wait() // the start-up walk is done
		insert := func() *job.Job {
			t.Helper()
			p, _ := newParent(time.Now(), 0)
			p.Lane = job.LaneInteractive
			if _, err := e.Jobs().InsertParts(ctx, p, nil, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			return p
		}
		p0, _ := newParent(time.Now(), 0)
		p0.Lane, first = job.LaneInteractive, p0.ID
		if _, err := e.Jobs().InsertParts(ctx, p0, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		<-entered // the interactive loop is held
		queued := insert()
		t0 := time.Now()
		dropped := []*job.Job{insert(), insert()}
		for _, p := range dropped {
			waitState(t, s, p.ID, job.StatePublished)
		}
		if waited := time.Since(t0); waited > every+100*time.Millisecond {
			t.Fatalf("dropped wake-ups aggregated %v after, want within one SweepEvery (%v)", waited, every)
		}
		if j, err := s.Get(ctx, queued.ID); err != nil || j.State != job.StateAccepted {
			t.Fatalf("the queued parent is %v (%v), want accepted while the loop is held", j.State, err)
		}
		close(release)
		waitState(t, s, queued.ID, job.StatePublished)
	})
}

// TestSweepFullWalkFindsUnannouncedParents: a parent that becomes ready
// with no wake-up and no part finished (its aggregator waited on
// something else, and nothing called PartsChanged) is found by the next
// full walk, fullSweepPasses (15) × SweepEvery after the previous one,
// and not by the passes between, which read only what changed.
func TestSweepFullWalkFindsUnannouncedParents(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		const every = time.Second
		var ready atomic.Bool
		var calls atomic.Int64
		sum := sumParts(&calls)
		agg := engine.AggregatorFunc(func(ctx context.Context, p *job.Job, parts []*job.Job) job.Outcome {
			if !ready.Load() {
				return job.Outcome{Class: job.ClassPending, Err: "waits on something else"}
			}
			return sum(ctx, p, parts)
		})
		p, _ := newParent(time.Now(), 0)
		if _, err := writerOn(t, s).InsertParts(ctx, p, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"report": {Aggregate: agg, SweepEvery: every}}})
		synctest.Wait() // the start-up walk asked it once
		if n := calls.Load(); n != 0 {
			t.Fatalf("%d aggregations before it was ready", n)
		}
		ready.Store(true) // nobody tells the engine
		waitState(t, s, p.ID, job.StatePublished)
		if waited := time.Since(t0); waited < 15*every || waited > 15*every+100*time.Millisecond {
			t.Fatalf("aggregated %v after the start-up walk, want at the next full walk (%v)", waited, 15*every)
		}
		if n := e.Sweeps(); n < 15 {
			t.Fatalf("%d sweep passes, want 15 or more", n)
		}
	})
}
