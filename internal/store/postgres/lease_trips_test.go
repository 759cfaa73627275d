package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// A lease of interactive jobs with room left for the batch lane reads the
// batch lane's groups with the interactive lane's, and the interactive
// groups' keys and heads, in one statement: with no batch work it is two
// round trips (BEGIN with the settings, the promotion, both lanes' groups
// and the keys and heads; the lease with its COMMIT), not three. A batch job is still leased beside interactive
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
	if trips, stmts := rt.trips.Load()-tr0, rt.statements.Load()-st0; trips != 2 {
		t.Errorf("an interactive lease: %d round trips (%d statements), want 2", trips, stmts)
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

// A lease the engine makes (a batch share and an interactive budget: the
// interactive lane's oldest job is read first) of interactive work is two
// round trips: BEGIN, the settings, the promotion with the oldest job, and
// both lanes' groups with their keys and the first groups' heads; then the
// keys' save, the groups' touch and the jobs' lease with the COMMIT. So it
// is whether the jobs are in many groups or one, on unpaced keys or paced
// ones, and when the lease finds nothing (the read, then the COMMIT with
// the touch of the groups it found empty). A group whose fair share of
// heads (want/groups+1) runs out while the others are done costs a Heads
// round trip more, as it did before.
func TestLeaseIsTwoTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rt := tracedStore(t)
	paced := admission.Config{Rate: 1000, Burst: 1000}
	insertPaced := func(n int, tenant string, keys ...string) {
		t.Helper()
		for range n {
			if _, err := s.Insert(ctx, []*job.Job{storetest.NewJob(tenant, job.LaneInteractive, keys...)}, paced); err != nil {
				t.Fatal(err)
			}
		}
	}
	params := store.LeaseParams{Now: t0, Max: 16, LeaseFor: time.Minute, BatchMin: 2, InteractiveBudget: 30 * time.Second}
	lease := func(what string, want int, wantTrips int64) {
		t.Helper()
		tr0, st0 := rt.trips.Load(), rt.statements.Load()
		got, err := s.Lease(ctx, params)
		if err != nil || len(got) != want {
			t.Fatalf("%s: %d jobs, %v; want %d", what, len(got), err, want)
		}
		if trips, stmts := rt.trips.Load()-tr0, rt.statements.Load()-st0; trips != wantTrips {
			t.Errorf("%s: %d round trips (%d statements), want %d", what, trips, stmts, wantTrips)
		}
	}
	insertN(t, s, 12, 4, "a", "b")
	lease("12 jobs in 4 groups, unpaced", 12, 2)
	lease("nothing (4 groups found empty)", 0, 2)
	insertPaced(6, "t", "p")
	lease("6 jobs in 1 group, paced", 6, 2)
	lease("nothing (1 group found empty)", 0, 2)
	insertPaced(40, "u", "p", "q")
	insertN(t, s, 3, 3, "a")
	// 16 slots over 4 groups: 5 heads of each fetched; the large group
	// takes its sixth after the three others are done.
	lease("16 of 43 jobs in 4 groups, paced and not", 16, 3)
}

// A finish that may lease only if it released something
// (store.LeaseParams.Released), of successes on unpaced keys, releases
// nothing: it goes out with its COMMIT, one round trip and no lease read,
// though a job is waiting (a finish that leases reads the ready groups,
// keys and heads too). One that released something (a job back to
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
