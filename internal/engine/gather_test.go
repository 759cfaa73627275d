package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestGatherYieldsOnlyForAnOutcomeThatMayCome: the finish loop yields the
// processor for more outcomes only while another handler of the first
// outcome's lane is still running. A lone interactive job's finish (an
// interactive review's one part) yields never: the yield waited for
// nobody and put the finish loop behind every runnable goroutine, on the
// review's critical path (docs/benchmarks.md, "Session 39 (s39h2)"). Two
// interactive jobs leased together, one returning at once and the other
// held until the finish loop yields, still make it yield, and the held
// one's outcome is gathered then.
func TestGatherYieldsOnlyForAnOutcomeThatMayCome(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	var (
		yields  atomic.Int64
		calls   atomic.Int64
		release = make(chan struct{})
		once    sync.Once
	)
	held := false // phase two: the second handler of two waits for a yield
	var heldMu sync.Mutex
	kind := engine.Kind{Handler: engine.HandlerFunc(func(ctx context.Context, _ *job.Job) job.Outcome {
		n := calls.Add(1)
		heldMu.Lock()
		h := held
		heldMu.Unlock()
		if h && n%2 == 0 {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			case <-ctx.Done():
			}
		}
		return job.Outcome{Class: job.ClassSuccess}
	})}
	startWith(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": kind}, Workers: 4}, func(e *engine.Engine) {
		engine.SetGatherYield(e, func() {
			yields.Add(1)
			once.Do(func() { close(release) })
		})
	})

	for range 5 { // one at a time: each finish is a lone outcome
		insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
		waitFinal(t, s, 30*time.Second)
	}
	if n := yields.Load(); n != 0 {
		t.Fatalf("5 lone interactive finishes yielded %d times; want none (no outcome of their lane could come)", n)
	}

	heldMu.Lock()
	held = true
	heldMu.Unlock()
	calls.Store(0)
	insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"), storetest.NewJob("acme", job.LaneInteractive, "k"))
	waitFinal(t, s, 30*time.Second)
	if calls.Load() != 2 {
		t.Fatalf("%d handler calls; want 2", calls.Load())
	}
	if n := yields.Load(); n == 0 {
		t.Fatal("a finish with another interactive handler running never yielded; want a yield for its outcome")
	}
}
