package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// An engine's lease (a batch share and an interactive budget, so that it
// first asks for the interactive lane's oldest job) of interactive jobs in
// several groups is two round trips: the keys and heads store.Lease asks
// for after the ready groups go out with them (readyGroups.lead), and the
// writes go with the COMMIT. It was three. The lease still skips a key
// another transaction holds, and leases every job of the keys it can take.
func TestLeaseTwoRoundTrips(t *testing.T) {
	t.Parallel()
	s, rt := tracedStore(t)
	ctx := context.Background()
	if _, err := s.UpsertLimit(ctx, admission.Config{Name: "held", Rate: 100, Burst: 100}, storetest.T0); err != nil {
		t.Fatal(err)
	}
	for _, keys := range [][]string{{"a"}, {"a"}, {"b"}, {"c", "a"}, {"held"}, {"c"}} {
		if _, err := s.Insert(ctx, []*job.Job{storetest.NewJob("acme", job.LaneInteractive, keys...)}, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
	}
	// Another transaction holds the paced key "held", as another node's
	// lease would (on a connection of its own: the store has one).
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	other, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, `SELECT 1 FROM `+s.schema+`.limit_keys WHERE name = 'held' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	p := store.LeaseParams{Now: storetest.T0, Max: 64, LeaseFor: time.Minute, BatchMin: 8, InteractiveBudget: 30 * time.Second}
	trips0, begins0 := rt.trips.Load(), rt.begins.Load()
	got, err := s.Lease(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if trips, begins := rt.trips.Load()-trips0, rt.begins.Load()-begins0; trips != 2 || begins != 1 {
		t.Fatalf("a lease of several groups took %d round trips, %d transactions; want 2, 1", trips, begins)
	}
	if len(got) != 5 {
		t.Fatalf("leased %d jobs, want 5 (all but the one on the key held elsewhere)", len(got))
	}
	for _, j := range got {
		if len(j.LimitKeys) == 1 && j.LimitKeys[0] == "held" {
			t.Fatalf("leased %s on a key another transaction holds", j.ID)
		}
	}
}
