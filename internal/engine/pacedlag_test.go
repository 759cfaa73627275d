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
)

// TestPacedStartsOnTheKeysClock splits a paced start's lag (issue 12,
// docs/benchmarks.md "Session 14 (s14h6)") in the bubble's clock, where
// running code takes no time and only a sleep does: a lease call here
// takes 2 ms (leaseLatency), as a durable write would. Each start of a
// key at 20/s, burst 1, must be leased at the key's admissible instant
// (the fetch loop's wake-up adds nothing: it sleeps until the time the
// store reported), and its handler must begin when that lease call
// returns (the handoff adds nothing). What remains on the real clock,
// scheduler delays and the lease's own duration, is execution, not the
// engine's waiting: the bucket paces from the lease's now, so only the
// wake-up shifts later starts, and it is nil here.
func TestPacedStartsOnTheKeysClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const leaseLatency = 2 * time.Millisecond
		s := &slowLease{Store: newStore(t), latency: leaseLatency}
		pacedBacklog(t, s, 20, 10)
		var mu sync.Mutex
		var began []time.Time
		h := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			mu.Lock()
			began = append(began, time.Now())
			mu.Unlock()
			return job.Outcome{Class: job.ClassSuccess}
		})
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 4, PollInterval: 10 * time.Second})
		waitFinal(t, s, 5*time.Second)
		s.mu.Lock()
		leases := append([]time.Time(nil), s.leasedAt...)
		s.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		if len(began) != 10 || len(leases) != 10 {
			t.Fatalf("%d handlers began, %d leases returned a job; want 10 each", len(began), len(leases))
		}
		unit := 50 * time.Millisecond
		for i := range began {
			if want := leases[0].Add(time.Duration(i) * unit); !leases[i].Equal(want) {
				t.Errorf("start %d leased at +%v, want +%v: the fetch loop woke after the key admitted", i, leases[i].Sub(leases[0]), want.Sub(leases[0]))
			}
			if d := began[i].Sub(leases[i]); d != leaseLatency {
				t.Errorf("start %d began %v after its lease's now, want the lease's %v", i, d, leaseLatency)
			}
		}
	})
}

// slowLease is a store whose Lease takes latency of the bubble's clock,
// and that records the lease time (p.Now) of each call that returned a
// job.
type slowLease struct {
	store.Store
	latency  time.Duration
	mu       sync.Mutex
	leasedAt []time.Time
}

func (s *slowLease) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	time.Sleep(s.latency)
	jobs, err := s.Store.Lease(ctx, p)
	s.mu.Lock()
	for range jobs {
		s.leasedAt = append(s.leasedAt, p.Now)
	}
	s.mu.Unlock()
	return jobs, err
}
