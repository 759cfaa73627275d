package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// steadyLoad runs the throughput workload's steady load in a synctest
// bubble: batches of 10 jobs with no key, inserted through the engine's
// writer and its Notify (as Client.Insert does) every 10 ms, handlers that
// return at once, every lease and finish taking 1 ms (one at a time when
// serial: SQLite's writer). It returns the store's call counts and the
// longest wait from a batch's insert to the start of one of its jobs.
func steadyLoad(t *testing.T, serial bool) (s *slowStore, longest time.Duration) {
	const batches, size, period, commit = 30, 10, 10 * time.Millisecond, time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t)
		s = &slowStore{Store: base, commit: commit}
		if serial {
			s.writer = make(chan struct{}, 1)
		}
		var mu sync.Mutex
		inserted := map[string]time.Time{}
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			mu.Lock()
			longest = max(longest, time.Since(inserted[j.ID]))
			mu.Unlock()
			return job.Outcome{Class: job.ClassSuccess}
		})
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 64, PollInterval: 50 * time.Millisecond})
		synctest.Wait() // the first lease, before any job
		before := s.emptyLeases.Load()
		for range batches {
			jobs := make([]*job.Job, size)
			now := time.Now()
			mu.Lock()
			for i := range jobs {
				jobs[i] = storetest.NewJob("acme", job.LaneInteractive, fmt.Sprintf("k%d", i%4))
				jobs[i].CreatedAt, jobs[i].EligibleAt = now, now
				inserted[jobs[i].ID] = now
			}
			mu.Unlock()
			if _, err := e.Jobs().Insert(context.Background(), jobs, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			e.Notify()
			time.Sleep(period)
		}
		waitFinal(t, base, time.Minute)
		s.emptyLeases.Add(-before)
		t.Logf("serial %v: %d batches of %d: %d leases (%d empty, not counting the first), %d finishes, %d finishes with a lease (%d of them empty, %d that read nothing); longest insert to start %v",
			serial, batches, size, s.leases.Load(), s.emptyLeases.Load(), s.finishes.Load(), s.finishLease.Load(), s.emptyFinishLeases.Load(), s.skippedFinishLeases.Load(), longest)
	})
	return s, longest
}

// TestSteadyLoadLeasesNoEmpty: under a steady load of short jobs, each
// batch an insert wakes the engine for is leased by one transaction and
// finished by another; a lease that takes nothing is a transaction (on
// SQLite the writer's) spent on nothing. The fetch loop used to lease again
// at once after any lease that took a job, and again on the Notify of a
// finish that wrote alone while it did: 42-44 % of all leases took nothing
// in bench/peers' throughput workload on PostgreSQL (docs/benchmarks.md,
// "Session 27 (s27h3)"). No job may start later for it: the longest wait
// from an insert to a start stays within a few commits.
func TestSteadyLoadLeasesNoEmpty(t *testing.T) {
	t.Parallel()
	for _, serial := range []bool{false, true} {
		s, longest := steadyLoad(t, serial)
		// A finish that writes alone (its fetch loop in a lease) still
		// wakes the loop, which may then find nothing: now and then.
		if n := s.emptyLeases.Load(); n > 3 {
			t.Errorf("serial %v: %d leases took nothing under a steady load of 30 batches, want at most 3 (one in ten batches)", serial, n)
		}
		// Its jobs' keys are unpaced and they succeed: their finishes
		// release nothing, so a finish that would lease (its fetch loop
		// idle) reads nothing either (s27h4: 43-57 such reads, all empty).
		if n := s.emptyFinishLeases.Load(); n > 0 {
			t.Errorf("serial %v: %d finishes read the ready groups in their lease and took nothing, want none: they released nothing", serial, n)
		}
		if longest > 5*time.Millisecond {
			t.Errorf("serial %v: a job started %v after its insert, want within 5 commits of 1 ms", serial, longest)
		}
	}
}
