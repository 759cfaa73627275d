package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestTwoSweepersRecoverOnce is RELIABILITY.md T3's multi-node case: two
// nodes' reapers select the same expired leases and recover them at the
// same moment, over separate pools. Every lease is recovered exactly once
// (one of the two transitions wins, the other matches no row), each job's
// transient counter moves by one, and each key's in-flight count is
// released once per job.
func TestTwoSweepersRecoverOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := twoNodes(t)
	const n, rounds = 40, 5
	for round := range rounds {
		now := t0.Add(time.Duration(round) * time.Hour)
		insertN(t, a, n, 4, "k")
		leased, err := a.Lease(ctx, store.LeaseParams{Now: now, Max: n, LeaseFor: time.Minute})
		if err != nil || len(leased) != n {
			t.Fatalf("round %d: leased %d of %d: %v", round, len(leased), n, err)
		}
		at := now.Add(2 * time.Minute)
		selA, errA := a.Expired(ctx, at, n)
		selB, errB := b.Expired(ctx, at, n)
		if errA != nil || errB != nil || len(selA) != n || len(selB) != n {
			t.Fatalf("round %d: selected %d and %d of %d: %v %v", round, len(selA), len(selB), n, errA, errB)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([][]error, 2)
		for i, node := range []struct {
			s   *Store
			sel []*job.Job
		}{{a, selA}, {b, selB}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ts := make([]store.Transition, len(node.sel))
				for k, j := range node.sel {
					ts[k] = storetest.Recovery(j, at)
				}
				<-start
				errs, err := node.s.Finish(ctx, ts)
				if err != nil {
					t.Errorf("node %d finish: %v", i, err)
					return
				}
				results[i] = errs // in the node's selection order
			}()
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}
		won := map[string]int{}
		for i, sel := range [][]*job.Job{selA, selB} {
			for k, j := range sel {
				switch err := results[i][k]; {
				case err == nil:
					won[j.ID]++
				case !errors.Is(err, store.ErrConflict):
					t.Fatalf("node %d job %s: %v", i, j.ID, err)
				}
			}
		}
		for _, j := range leased {
			if won[j.ID] != 1 {
				t.Fatalf("round %d: job %s recovered %d times, want exactly once", round, j.ID, won[j.ID])
			}
			got, err := a.Get(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			recoveries := storetest.CountOutcome(got, job.ClassLeaseExpired)
			if got.State != job.StateWaiting || got.Attempts.Transient != 1 || recoveries != 1 {
				t.Fatalf("round %d: job %s = %s transient %d with %d recoveries", round, j.ID, got.State, got.Attempts.Transient, recoveries)
			}
		}
		k, err := a.GetLimit(ctx, "k")
		if err != nil || k.InFlight != 0 {
			t.Fatalf("round %d: in flight = %d, %v; want 0", round, k.InFlight, err)
		}
		// Finish the round's jobs so the next round leases only its own.
		again, err := a.Lease(ctx, store.LeaseParams{Now: at, Max: n, LeaseFor: time.Minute})
		if err != nil || len(again) != n {
			t.Fatalf("round %d: re-lease %d: %v", round, len(again), err)
		}
		if err := finishAll(ctx, a, again, at); err != nil {
			t.Fatal(err)
		}
	}
}
