package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// testFinishMixedPacing checks a finish batch whose jobs' keys are unpaced
// and paced, and one whose key became paced after its job was leased. A
// driver may finish jobs whose keys are all unpaced without writing the
// keys, but a paced
// key in the batch, even one paced only since the lease, still has its
// in-flight lease ended by the finish, so its cap frees.
func testFinishMixedPacing(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	setLimit(t, s, admission.Config{Name: "p", Concurrency: 1})
	insert(t, s, NewJob("acme", job.LaneBatch, "u"), NewJob("acme", job.LaneBatch, "u", "p"), NewJob("acme", job.LaneBatch, "u", "p"))
	first := lease(t, s, T0, 10)
	if len(first) != 2 {
		t.Fatalf("leased %d, want 2 (one on u, one of the two on p's cap of 1)", len(first))
	}
	ts := []store.Transition{success(first[0], T0), success(first[1], T0)}
	mustOK(t, finish(t, s, ts...))
	if k, _ := s.GetLimit(ctx, "p"); k.InFlight != 0 {
		t.Fatalf("paced key after a finish with an unpaced one: in flight = %d, want 0", k.InFlight)
	}
	second := lease(t, s, T0.Add(time.Second), 10)
	if len(second) != 1 {
		t.Fatalf("after the finish freed p's cap, leased %d, want 1", len(second))
	}
	mustOK(t, finish(t, s, success(second[0], T0.Add(time.Second))))

	// r is unpaced when its job is leased and capped before it finishes:
	// the cap counts the running job, and the finish must release it.
	insert(t, s, NewJob("acme", job.LaneBatch, "r"), NewJob("acme", job.LaneBatch, "r"))
	third := lease(t, s, T0.Add(2*time.Second), 1)
	if len(third) != 1 {
		t.Fatalf("leased %d on r, want 1", len(third))
	}
	if st, err := s.UpsertLimit(ctx, admission.Config{Name: "r", Concurrency: 1}, T0.Add(2*time.Second)); err != nil || st.InFlight != 1 {
		t.Fatalf("capping r with a running job: in flight %d, %v; want 1", st.InFlight, err)
	}
	mustOK(t, finish(t, s, success(third[0], T0.Add(3*time.Second))))
	if k, _ := s.GetLimit(ctx, "r"); k.InFlight != 0 {
		t.Fatalf("a key paced since the lease, after the finish: in flight = %d, want 0", k.InFlight)
	}
	if more := lease(t, s, T0.Add(4*time.Second), 10); len(more) != 1 {
		t.Fatalf("after the finish freed r's cap, leased %d, want 1", len(more))
	}
	// Unpaced again, a batch of unpaced jobs finishes as before.
	insert(t, s, NewJob("acme", job.LaneBatch, "u"), NewJob("acme", job.LaneBatch, "u"))
	last := lease(t, s, T0.Add(5*time.Second), 10)
	if len(last) != 2 {
		t.Fatalf("leased %d on u, want 2", len(last))
	}
	mustOK(t, finish(t, s, success(last[0], T0.Add(5*time.Second)), success(last[1], T0.Add(5*time.Second))))
	for _, j := range last {
		if got := get(t, s, j.ID); got.State != job.StatePublished {
			t.Fatalf("job on u is %s after its finish, want published", got.State)
		}
	}
}

// testEngineLeaseAdmits leases as an engine does (a batch share and an
// interactive budget: the lease first asks for the interactive lane's
// oldest job, and a driver may fetch the lanes' keys and heads with it)
// across both lanes and several groups of each, on a capped key that
// groups of both lanes share: every key still admits exactly what it
// allows, and a finish frees the cap for the next such lease.
func testEngineLeaseAdmits(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "cap", Concurrency: 2})
	for _, keys := range [][]string{{"cap"}, {"cap"}, {"cap", "x"}, {"cap", "x"}, {"cap", "y"}, {"z"}, {"z"}, {"z", "x"}} {
		insert(t, s, NewJob("acme", job.LaneInteractive, keys...))
	}
	for _, keys := range [][]string{{"cap"}, {"cap"}, {"w"}, {"w"}} {
		insert(t, s, NewJob("acme", job.LaneBatch, keys...))
	}
	engineLease := func(now time.Time) []*job.Job {
		t.Helper()
		got, err := s.Lease(context.Background(), store.LeaseParams{Now: now, Max: 64, LeaseFor: time.Minute, BatchMin: 8,
			InteractiveBudget: 30 * time.Second})
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		return got
	}
	onCap := func(jobs []*job.Job) (n int, one *job.Job) {
		for _, j := range jobs {
			for _, k := range j.LimitKeys {
				if k == "cap" {
					n, one = n+1, j
				}
			}
		}
		return n, one
	}
	first := engineLease(T0)
	if n, _ := onCap(first); n != 2 || len(first) != 7 {
		t.Fatalf("leased %d jobs, %d on the key capped at 2; want 7 (3 on z, 2 on w, 2 on cap), 2", len(first), n)
	}
	if more := engineLease(T0.Add(time.Millisecond)); len(more) != 0 {
		t.Fatalf("leased %d more beyond the cap", len(more))
	}
	_, done := onCap(first)
	mustOK(t, finish(t, s, success(done, T0.Add(2*time.Millisecond))))
	// After CapRetry: the groups the cap refused are blocked until then
	// (the finish unblocks only its own job's group).
	if more := engineLease(T0.Add(admission.CapRetry + time.Second)); len(more) != 1 {
		t.Fatalf("after a finish freed one of the cap's slots, leased %d, want 1", len(more))
	}
}
