package sqlite

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestWriterTextsIndependentOfCounts checks that the writer's hot path
// (insert, lease, finish of unpaced jobs over several groups) compiles no
// new statement text when only its row counts change: a lease of a new
// size, a finish of a batch of a new size, an insert of a new size. Every
// compile is ~10^5 instructions (docs/benchmarks.md, "Session 15
// (s15h5)"), and a text per count would also fill the writer's bounded
// cache (maxStmts), past which texts are parsed once per batch. The first
// phase meets every insert chunk size (511 = 256+128+...+1, each a power
// of two, insertJobsSQL), both ways a group row is written (the upsert of
// a group the writer has not met, the update by id of one it has:
// upsertGroup) and a few lease and finish sizes; the second, only sizes
// not seen before, must add no text.
func TestWriterTextsIndependentOfCounts(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	now := storetest.T0
	cycle := func(inserted int, leases []int) {
		t.Helper()
		insertBatchJobs(t, s, inserted)
		for _, max := range leases {
			now = now.Add(time.Millisecond)
			jobs, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: max, LeaseFor: time.Hour, Kinds: []string{"noop"}})
			if err != nil || len(jobs) != max {
				t.Fatalf("lease of %d: %d jobs, %v", max, len(jobs), err)
			}
			finishSucceeded(t, s, jobs, job.StatePublished, now)
		}
	}
	// texts reads the writer's prepared texts on the writer goroutine,
	// which owns them.
	texts := func() []string {
		t.Helper()
		var out []string
		if err := s.write(ctx, func(*writeTx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.write(ctx, func(*writeTx) error {
			for q := range s.writerStmts {
				out = append(out, q)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	// One job first, so that the 511 meet one group the writer has met
	// (upsertGroup's update by id) and four it has not (its upsert).
	insertBatchJobs(t, s, 1)
	cycle(511, []int{1, 2, 48, 64, 100, 296})
	before := texts()
	cycle(300, []int{3, 7, 13, 29, 47, 63, 138})
	after := texts()
	for _, q := range after {
		if !slices.Contains(before, q) {
			t.Errorf("a new row count compiled a new text: %.200q", q)
		}
	}
	// A full cache takes no new text, which would hide one above.
	if len(before) == 0 || len(after) >= maxStmts {
		t.Fatalf("%d writer texts cached, %d after; want some, fewer than maxStmts (%d)", len(before), len(after), maxStmts)
	}
}
