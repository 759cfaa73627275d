package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// A lease of interactive jobs with room left for the batch lane reads the
// batch lane's groups with the interactive lane's, in one statement: with
// no batch work it is three round trips (BEGIN with the settings, the
// promotion and both lanes' groups; the keys and heads; the lease with
// its COMMIT), not four. A batch job is still leased beside interactive
// ones, and alone (the first read found a batch group, so the batch
// lane's own read runs as before).
func TestLeaseReadsBothLanesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rt := tracedStore(t)
	insertN(t, s, 4, 1, "a", "b")
	insertN(t, s, 4, 1, "c")
	params := store.LeaseParams{Now: t0, Max: 64, LeaseFor: time.Minute}
	tr0, st0 := rt.trips.Load(), rt.statements.Load()
	got, err := s.Lease(ctx, params)
	if err != nil || len(got) != 8 {
		t.Fatalf("lease: %d jobs, %v; want 8", len(got), err)
	}
	if trips, stmts := rt.trips.Load()-tr0, rt.statements.Load()-st0; trips != 3 {
		t.Errorf("an interactive lease: %d round trips (%d statements), want 3", trips, stmts)
	}

	// Interactive and batch work: the interactive lane takes its jobs,
	// and the batch lane's are leased after them.
	b := storetest.NewJob("t", job.LaneBatch, "a")
	if _, err := s.Insert(ctx, []*job.Job{b}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	insertN(t, s, 2, 1, "c")
	got, err = s.Lease(ctx, params)
	if err != nil || len(got) != 3 || got[2].ID != b.ID {
		t.Fatalf("lease of 2 interactive and 1 batch job: %d jobs, %v; want 3, the batch job last", len(got), err)
	}
	// Batch work alone.
	b = storetest.NewJob("t", job.LaneBatch, "a")
	if _, err := s.Insert(ctx, []*job.Job{b}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	got, err = s.Lease(ctx, params)
	if err != nil || len(got) != 1 || got[0].ID != b.ID {
		t.Fatalf("lease of 1 batch job: %d jobs, %v; want it", len(got), err)
	}
}

// A finish that may lease only if it released something
// (store.LeaseParams.Released), of successes on unpaced keys, releases
// nothing: it goes out with its COMMIT, one round trip and no lease read,
// though a job is waiting (a finish that leases read the ready groups and
// heads: three round trips). One that released something (a job back to
// waiting) leases as before.
func TestFinishLeaseReleasedNothingIsOneTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rt := tracedStore(t)
	insertN(t, s, 4, 1, "a")
	params := store.LeaseParams{Now: t0, Max: 2, LeaseFor: time.Minute}
	got, err := s.Lease(ctx, params)
	if err != nil || len(got) != 2 {
		t.Fatalf("lease: %d jobs, %v; want 2", len(got), err)
	}
	var released []bool
	params.Released = func(r bool) { released = append(released, r) }
	tr0, st0 := rt.trips.Load(), rt.statements.Load()
	errs, more, err := s.FinishLease(ctx, []store.Transition{successOf(got[0], t0)}, params)
	if err != nil || errs[0] != nil || len(more) != 0 {
		t.Fatalf("finish and lease if released: %d jobs, %v %v; want none", len(more), errs, err)
	}
	if trips, stmts := rt.trips.Load()-tr0, rt.statements.Load()-st0; trips != 1 || len(released) != 1 || released[0] {
		t.Errorf("a finish that released nothing: %d round trips (%d statements), released %v; want 1 and false", trips, stmts, released)
	}
	retry := successOf(got[1], t0)
	retry.To, retry.EligibleAt, retry.Record.Outcome = job.StateRetryScheduled, t0, job.ClassInvalidOutput
	retry.Keys = store.KeyEffect{Now: t0}
	errs, more, err = s.FinishLease(ctx, []store.Transition{retry}, params)
	if err != nil || errs[0] != nil || len(more) != 2 || len(released) != 2 || !released[1] {
		t.Fatalf("a finish that readied its job: %d jobs, released %v, %v %v; want 2 and true", len(more), released, errs, err)
	}
}
