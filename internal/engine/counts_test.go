package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestJobsCounts: a writer counts its leases by lane and per limit key
// (with their cost), and its written 429s by lane and on the keys the 429
// applies to; a refused write counts nothing.
func TestJobsCounts(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	w := writerOn(t, s)
	ctx := context.Background()
	a := storetest.NewJob("acme", job.LaneInteractive, "smtp:acme", "tenant:acme")
	a.Cost = 3
	b := storetest.NewJob("acme", job.LaneBatch, "smtp:acme")
	c := storetest.NewJob("acme", job.LaneBatch, "reports")
	insertNow(t, s, a, b, c)
	if _, ok := w.KeyCounts("smtp:acme"); ok {
		t.Fatal("a key with no start yet is counted")
	}
	got, err := w.Lease(ctx, engine.LeaseParams{Max: 10, LeaseFor: time.Minute, Kinds: []string{"noop"}})
	if err != nil || len(got) != 3 {
		t.Fatalf("leased %d jobs, err %v", len(got), err)
	}
	n := w.Counts()
	if n.Starts[job.LaneInteractive] != 1 || n.Starts[job.LaneBatch] != 2 || n.RateLimited[job.LaneBatch] != 0 {
		t.Fatalf("counts after the lease: %+v", n)
	}
	smtp, ok := w.KeyCounts("smtp:acme")
	if !ok || smtp.Starts != 2 || smtp.Cost != 4 || smtp.RateLimited != 0 || smtp.Since.IsZero() {
		t.Fatalf("smtp:acme counts %+v (ok %v), want 2 starts of cost 4", smtp, ok)
	}
	// The interactive job meets a 429 scoped to smtp:acme; the batch job on
	// reports one naming no scope; and a late report of the first again is
	// refused by the store and not counted.
	byID := map[string]*job.Job{}
	for _, j := range got {
		byID[j.ID] = j
	}
	limited := job.Outcome{Class: job.ClassRateLimited, Status: 429, RetryAfter: time.Second}
	scoped := limited
	scoped.Scope = "smtp:acme"
	if _, err := w.Report(ctx, []engine.Report{{Job: byID[a.ID], Outcome: scoped}, {Job: byID[c.ID], Outcome: limited}}); err != nil {
		t.Fatal(err)
	}
	if res, err := w.Report(ctx, []engine.Report{{Job: byID[a.ID], Outcome: scoped}}); err != nil || res[0].Err == nil {
		t.Fatalf("late report: %+v, %v; want refused", res, err)
	}
	n = w.Counts()
	if n.RateLimited[job.LaneInteractive] != 1 || n.RateLimited[job.LaneBatch] != 1 {
		t.Fatalf("429 counts %+v, want one per lane", n.RateLimited)
	}
	if k, _ := w.KeyCounts("smtp:acme"); k.RateLimited != 1 {
		t.Fatalf("smtp:acme 429s %d, want 1", k.RateLimited)
	}
	if k, _ := w.KeyCounts("tenant:acme"); k.RateLimited != 0 || k.Starts != 1 {
		t.Fatalf("tenant:acme (outside the 429's scope) counts %+v", k)
	}
	if k, _ := w.KeyCounts("reports"); k.RateLimited != 1 || k.Starts != 1 {
		t.Fatalf("reports counts %+v", k)
	}
}
