package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestHoldKeepsARefusedKeyUntilItsWrite: from a refusal's answer (Hold)
// until its finish is written, the writer's leases start no job on the
// refused key, while other keys' jobs go on; the write ends the hold. A
// refusal without a retry delay holds nothing.
func TestHoldKeepsARefusedKeyUntilItsWrite(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	var now time.Time
	w, err := engine.NewJobs(engine.JobsConfig{Store: s, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease := func() []*job.Job {
		t.Helper()
		got, err := w.Lease(ctx, engine.LeaseParams{Max: 10, LeaseFor: time.Minute, Kinds: []string{"noop"}})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	a := storetest.NewJob("acme", job.LaneBatch, "smtp:acme")
	insertNow(t, s, a)
	now = time.Now()
	first := lease()
	if len(first) != 1 {
		t.Fatalf("leased %d, want a", len(first))
	}
	b, c := storetest.NewJob("acme", job.LaneBatch, "smtp:acme"), storetest.NewJob("acme", job.LaneBatch, "reports")
	insertNow(t, s, b, c)
	now = time.Now() // eligible from insertNow's clock on

	w.Hold(first[0], job.Outcome{Class: job.ClassRateLimited, Status: 429}, now) // no retry delay: no hold
	w.Hold(first[0], job.Outcome{Class: job.ClassRateLimited, Status: 429, RetryAfter: time.Second}, now)
	if got := lease(); len(got) != 1 || got[0].ID != c.ID {
		t.Fatalf("leased %d jobs while smtp:acme is held, want c alone", len(got))
	}
	if _, err := w.Report(ctx, []engine.Report{{Job: first[0], Outcome: job.Outcome{Class: job.ClassSuccess}}}); err != nil {
		t.Fatal(err)
	}
	if got := lease(); len(got) != 1 || got[0].ID != b.ID {
		t.Fatalf("leased %d jobs after the write, want b", len(got))
	}
}
