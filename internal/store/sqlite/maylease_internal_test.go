package sqlite

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestIdlePollsClearStaleGroups: a burst over many groups, each group's
// one job leased, leaves every group's ready_at in place (a lower bound).
// An idle engine's polls ask MayLease and lease only on a true; they must
// still clear those groups within a bounded number of polls, as the
// polls' leases did before MayLease, and then MayLease must say false
// reading at most mayLeaseGroups groups. A MayLease that probed every
// stale group answered false at once, so no lease ever cleared them and
// every poll of the idle engine read them all again (1.6 ms a poll at
// 9,728 groups).
func TestIdlePollsClearStaleGroups(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	ctx := context.Background()
	const groups, max = 2000, 64
	var js []*job.Job
	for i := range groups {
		js = append(js, storetest.NewJob("acme", job.LaneBatch, "k"+strconv.Itoa(i)))
	}
	if _, err := s.Insert(ctx, js, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	now := storetest.T0
	lease := func() int {
		t.Helper()
		got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: max, LeaseFor: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	leased := 0
	for n := lease(); n > 0; n = lease() {
		leased += n
	}
	if leased != groups {
		t.Fatalf("leased %d, want %d", leased, groups)
	}
	stale := func() int {
		t.Helper()
		var n int
		if err := s.readRow(ctx, `SELECT count(*) FROM job_groups WHERE ready_at IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := stale()
	if before <= mayLeaseGroups {
		t.Fatalf("%d groups left with a ready_at after the burst: the case this test is for did not arise", before)
	}
	// Each lease reads 2*max+16 groups: the polls clear them in about
	// before/144 leases. Allow twice that.
	bound := 2 * (before/(2*max+16) + 1)
	polls := 0
	for ; polls < bound; polls++ {
		may, err := s.MayLease(ctx, store.LeaseParams{Now: now, Max: max})
		if err != nil {
			t.Fatal(err)
		}
		if !may {
			break
		}
		if n := lease(); n != 0 {
			t.Fatalf("a poll's lease took %d jobs; every job is leased", n)
		}
	}
	if after := stale(); polls == bound || after > mayLeaseGroups {
		t.Fatalf("after %d polls (bound %d) %d of %d groups still have a ready_at; want at most %d and MayLease false",
			polls, bound, after, before, mayLeaseGroups)
	}
	t.Logf("%d stale groups cleared by %d polls' leases", before, polls)
}

// TestFinishLeaseReadsBeforeLeasing: a finish that released a paced key's
// start beside a sweep whose ready jobs are all of a kind the lease may
// not take (no CPU turn free) runs no lease in the writer's transaction:
// its read in the same transaction finds nothing it could take. A
// finish whose lease may take a job (one of a kind that takes no turn, an
// interactive one, a retry its own transition readied) runs it. Before
// the read, every such finish ran the lease: 509 of 512 interactive
// finishes' leases took nothing in a 10,000-file batch-isolation sweep.
func TestFinishLeaseReadsBeforeLeasing(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	ctx := context.Background()
	if _, err := s.UpsertLimit(ctx, admission.Config{Name: "paced", Rate: 1000, Burst: 1000}, storetest.T0); err != nil {
		t.Fatal(err)
	}
	at := func(ms int) time.Time { return storetest.T0.Add(time.Duration(ms) * time.Millisecond) }
	insert := func(js ...*job.Job) {
		t.Helper()
		if _, err := s.Insert(ctx, js, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
	}
	crunch := storetest.NewJob("acme", job.LaneBatch, "sweep")
	crunch.Kind = "crunch"
	insert(crunch)
	// finish leases a paced interactive job, inserts ready, then finishes
	// the first with the no-turn lease: how many leases the writer ran
	// for the finish, and what it took.
	finish := func(ms int, to job.State, ready ...*job.Job) (runs int64, took []*job.Job) {
		t.Helper()
		insert(storetest.NewJob("acme", job.LaneInteractive, "paced"))
		got, err := s.Lease(ctx, store.LeaseParams{Now: at(ms), Max: 1, LeaseFor: time.Minute, Lane: job.LaneInteractive})
		if err != nil || len(got) != 1 {
			t.Fatalf("lease the paced job: %d, %v", len(got), err)
		}
		insert(ready...)
		j := got[0]
		tr := store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: to, Attempts: j.Attempts, EligibleAt: at(ms + 1),
			Record: job.AttemptRecord{At: at(ms + 1), Attempt: j.Attempt, Outcome: job.ClassSuccess},
			Keys:   store.KeyEffect{Now: at(ms + 1), Success: to == job.StatePublished}}
		if to != job.StatePublished {
			tr.Record.Outcome = job.ClassInvalidOutput
		}
		before := s.leaseRuns.Load()
		_, took, err = s.FinishLease(ctx, []store.Transition{tr}, storetest.FinishLeaseNoTurn(at(ms+1)))
		if err != nil {
			t.Fatal(err)
		}
		return s.leaseRuns.Load() - before, took
	}
	if runs, took := finish(10, job.StatePublished); runs != 0 || len(took) != 0 {
		t.Errorf("a finish beside a sweep with no turn free ran %d leases and took %d jobs, want none", runs, len(took))
	}
	hook := storetest.NewJob("acme", job.LaneBatch, "subscriber")
	hook.Kind = "hook"
	if runs, took := finish(20, job.StatePublished, hook); runs != 1 || len(took) != 1 {
		t.Errorf("a finish with a turnless batch job ready ran %d leases and took %d jobs, want one and one", runs, len(took))
	}
	if runs, took := finish(30, job.StatePublished, storetest.NewJob("acme", job.LaneInteractive, "free")); runs != 1 || len(took) != 1 {
		t.Errorf("a finish with an interactive job ready ran %d leases and took %d jobs, want one and one", runs, len(took))
	}
	if runs, took := finish(40, job.StateRetryScheduled); runs != 1 || len(took) != 1 {
		t.Errorf("a finish that readied its own retry ran %d leases and took %d jobs, want one and one (the retry)", runs, len(took))
	}
}
