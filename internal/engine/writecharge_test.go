package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// chargedFinish is a store whose writer, as SQLite's does
// (store.WithWriteCharge), reports 20 ms of its time for each batch-lane
// Finish whose context asks for it, and counts the finishes of each lane
// that asked.
type chargedFinish struct {
	store.Store

	mu      sync.Mutex
	charged map[job.Lane]int
}

func (s *chargedFinish) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	if f := store.WriteChargeOf(ctx); f != nil {
		s.mu.Lock()
		s.charged[store.LaneOf(ctx)]++
		s.mu.Unlock()
		if store.LaneOf(ctx) == job.LaneBatch {
			f(20 * time.Millisecond)
		}
	}
	return s.Store.Finish(ctx, ts)
}

// TestBatchFinishWritesArePaced: a batch job's finish is a batch-lane
// write made after its handler gave its governor turn back, outside any
// piece the pacer rests after. Its writer time is charged to the pacer
// (store.WithWriteCharge): at share 0.5, with interactive work about, the
// 20 ms the store's writer reports are followed by a rest of 20 ms; with
// none about, by no rest. An interactive job's finish asks for no charge.
// The handlers take no (simulated) time, so every rest is the finish's.
// In simulated time.
func TestBatchFinishWritesArePaced(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		interactive bool
		rests       int64
		rested      float64
	}{
		{"interactive about", true, 1, 0.020},
		{"alone", false, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &chargedFinish{Store: newStore(t), charged: map[job.Lane]int{}}
				done := func(context.Context, *job.Job) job.Outcome { return job.Outcome{Class: job.ClassSuccess} }
				e := start(t, engine.Config{Store: s, Workers: 2, BatchCPUs: 1, BatchCPUShare: 0.5,
					Kinds: map[string]engine.Kind{"noop": {Handler: engine.HandlerFunc(done), Computes: true}}})
				if c.interactive {
					defer engine.EnterInteractive(e)()
				}
				// One after the other: a finish of both lanes at once is
				// an interactive write.
				insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
				waitFinal(t, s, time.Minute)
				insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
				waitFinal(t, s, time.Minute)
				s.mu.Lock()
				charged := s.charged
				s.mu.Unlock()
				if charged[job.LaneBatch] != 1 || charged[job.LaneInteractive] != 0 {
					t.Errorf("finishes that asked for a charge: %v, want the batch job's only", charged)
				}
				if bc := e.BudgetCounts(); bc.Rests != c.rests || bc.RestSeconds != c.rested {
					t.Errorf("the pacer rested %d times, %.3f s; want %d, %.3f s", bc.Rests, bc.RestSeconds, c.rests, c.rested)
				}
			})
		})
	}
}
