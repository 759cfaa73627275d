package sqlite

import (
	"context"
	"strconv"
	"testing"
	"time"

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
