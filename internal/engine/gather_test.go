package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// heldFinishes is a store whose first two Finish calls, once written,
// wait until open is closed to return (so that both return at once), and
// which records every call's batch size.
type heldFinishes struct {
	store.Store
	entered chan struct{} // one send per held call, as it starts waiting
	open    chan struct{}
	mu      sync.Mutex
	sizes   []int
}

func (s *heldFinishes) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(ts))
	held := len(s.sizes) <= 2
	s.mu.Unlock()
	errs, err := s.Store.Finish(ctx, ts)
	if held {
		s.entered <- struct{}{}
		<-s.open
	}
	return errs, err
}

// TestOutcomesQueuedTogetherFinishTogether: with InFlight 2, outcomes that
// queued while both finish calls were in flight are written by one finish
// call when those return, not split between the two finish loops (two
// transactions and commits where one does; docs/benchmarks.md, "Session 21
// (s21h3)"). Both loops are held in the store while six outcomes queue;
// then both return at once, and the next call must carry all six.
func TestOutcomesQueuedTogetherFinishTogether(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &heldFinishes{Store: newStore(t), entered: make(chan struct{}), open: make(chan struct{})}
		second, rest := make(chan struct{}), make(chan struct{})
		var started atomic.Int64
		h := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			switch started.Add(1) {
			case 1:
			case 2:
				<-second
			default:
				<-rest
			}
			return job.Outcome{Class: job.ClassSuccess}
		})
		var jobs []*job.Job
		for range 8 {
			jobs = append(jobs, storetest.NewJob("acme", job.LaneInteractive, "k"))
		}
		insertNow(t, s, jobs...)
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 8, InFlight: 2})
		<-s.entered // the first outcome's finish, held
		close(second)
		<-s.entered // the second's, on the other loop, held
		close(rest)
		synctest.Wait() // the six outcomes are queued; both loops are in Finish
		close(s.open)
		if st := waitFinal(t, s, time.Minute); st.Counts[job.LaneInteractive][job.StatePublished] != 8 {
			t.Fatalf("published %d of 8", st.Counts[job.LaneInteractive][job.StatePublished])
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.sizes) != 3 || s.sizes[0] != 1 || s.sizes[1] != 1 || s.sizes[2] != 6 {
			t.Fatalf("finish calls of %v jobs, want [1 1 6]", s.sizes)
		}
	})
}
