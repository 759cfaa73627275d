package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// testCapFreedByFinish checks the hand-off from one job to the next on a
// key at its concurrency cap. A lease that meets the full key blocks the
// group for admission.CapRetry; the finish that frees the slot unblocks
// it, so a lease right after the finish takes the next job rather than
// waiting out CapRetry (on the unforeseen mix's concurrent-1, a cap of one
// learned, that wait was paid once per request). And a driver that is a
// store.FinishLeaser finishes and leases in one call: the lease sees the
// slot the finish freed, and the cap still holds after it.
func testCapFreedByFinish(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "k", Concurrency: 1})
	for range 3 {
		insert(t, s, NewJob("acme", job.LaneInteractive, "k"))
	}
	ms := func(n int) time.Time { return T0.Add(time.Duration(n) * time.Millisecond) }
	first := lease(t, s, ms(0), 5)
	if len(first) != 1 {
		t.Fatalf("leased %d with a cap of 1, want 1", len(first))
	}
	if more := lease(t, s, ms(10), 5); len(more) != 0 {
		t.Fatalf("leased %d beyond the cap", len(more))
	}
	// The group is blocked until 10 ms + CapRetry; the finish frees the
	// slot at 11 ms and the next lease, at 12 ms, must see it.
	mustOK(t, finish(t, s, success(first[0], ms(11))))
	second := lease(t, s, ms(12), 5)
	if len(second) != 1 {
		t.Fatalf("a lease 1 ms after the finish that freed the cap leased %d, want 1 (the group stayed blocked for %v)", len(second), admission.CapRetry)
	}
	fl, ok := s.(store.FinishLeaser)
	if !ok {
		return
	}
	if more := lease(t, s, ms(13), 5); len(more) != 0 {
		t.Fatalf("leased %d beyond the cap", len(more))
	}
	errs, third, err := fl.FinishLease(context.Background(), []store.Transition{success(second[0], ms(14))},
		store.LeaseParams{Now: ms(14), Max: 5, LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatalf("finish and lease: %v", err)
	}
	mustOK(t, errs)
	if len(third) != 1 || third[0].State != job.StateRunning {
		t.Fatalf("finish and lease leased %d jobs, want the third (the slot the finish freed)", len(third))
	}
	if got := get(t, s, second[0].ID); got.State != job.StatePublished {
		t.Fatalf("the finished job is %s, want published", got.State)
	}
	if more := lease(t, s, ms(15), 5); len(more) != 0 {
		t.Fatalf("leased %d beyond the cap after finish and lease", len(more))
	}
	if k, err := s.GetLimit(context.Background(), "k"); err != nil || k.InFlight != 1 {
		t.Fatalf("key in flight = %d (%v), want 1", k.InFlight, err)
	}
	// A finish and lease that leases several jobs at once (the SQLite
	// driver once refused it: one lease token per call).
	for range 2 {
		insert(t, s, NewJob("acme", job.LaneInteractive, "free"))
	}
	errs, many, err := fl.FinishLease(context.Background(), []store.Transition{success(third[0], ms(16))},
		store.LeaseParams{Now: ms(16), Max: 5, LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatalf("finish and lease of several jobs: %v", err)
	}
	mustOK(t, errs)
	if len(many) != 2 {
		t.Fatalf("finish and lease leased %d jobs, want the 2 on the free key", len(many))
	}
}
