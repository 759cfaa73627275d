package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// An insert whose costs are checked (store.WithCostCheck, as the library's
// InsertMany and InsertParts make it) is one round trip, the check in the
// insert's own pipelined transaction: checking first with store.CheckCosts
// (a LimitConfigs read) was a round trip more before every insert. A
// refused insert still inserts nothing; it pays its ROLLBACK (the
// pipeline skips the COMMIT after the error) and a read to word the refusal.
func TestCostCheckedInsertIsOneTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rt := tracedStore(t)
	for _, c := range []admission.Config{
		{Name: "tpm", Rate: 100, Burst: 1000},
		{Name: "window", Windows: []admission.Window{{Limit: 50, Period: time.Minute}}},
	} {
		if _, err := s.UpsertLimit(ctx, c, t0); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		jobs := make([]*job.Job, 10)
		for i := range jobs {
			jobs[i] = storetest.NewJob("t", job.LaneInteractive, []string{"tpm", "window", "a", "b"}[i%4])
			jobs[i].Cost = 40
		}
		tr0, st0 := rt.trips.Load(), rt.statements.Load()
		if _, err := s.Insert(store.WithCostCheck(ctx), jobs, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
		trips, stmts := rt.trips.Load()-tr0, rt.statements.Load()-st0
		t.Logf("round %d: %d round trips, %d statements", round, trips, stmts)
		if trips != 1 {
			t.Errorf("round %d: a cost-checked insert of 10 jobs took %d round trips (%d statements), want 1", round, trips, stmts)
		}
	}

	over := storetest.NewJob("t", job.LaneInteractive, "window", "c")
	over.Cost = 51
	tr0 := rt.trips.Load()
	_, err := s.Insert(store.WithCostCheck(ctx), []*job.Job{over}, storetest.Unpaced)
	var ve *job.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("cost 51 on a window of 50: %v, want a validation error", err)
	}
	if trips := rt.trips.Load() - tr0; trips != 3 {
		t.Errorf("a refused cost-checked insert took %d round trips, want 3 (the insert, its ROLLBACK, the read that words the refusal)", trips)
	}
	if _, err := s.Get(ctx, over.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused job was stored: %v", err)
	}
	if _, err := s.GetLimit(ctx, "c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused insert created its new key: %v", err)
	}
}
