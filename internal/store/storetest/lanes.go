package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// laneCases are the conformance cases of lane-dedicated nodes
// (engine.Config.Lanes): a lease and a parts sweep of one lane.
var laneCases = map[string]func(*testing.T, Opener){
	"LeaseLane":        testLeaseLane,
	"ReadyParentsLane": testReadyParentsLane,
}

// testLeaseLane: a lease of one lane (LeaseParams.Lane) takes only that
// lane's jobs whatever the batch share and bound say: an interactive-only
// lease no batch job even with batch's minimum share owed, a batch-only
// lease no interactive job even with slots to spare, its bound still
// holding; with no lane both are taken as before.
func testLeaseLane(t *testing.T, open Opener) {
	s := open(t)
	for range 10 {
		insert(t, s, NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneInteractive, "k"))
	}
	ctx := context.Background()
	p := store.LeaseParams{Now: T0, Max: 4, LeaseFor: time.Minute, BatchMin: 3, InteractiveBudget: time.Minute, Lane: job.LaneInteractive}
	leaseLanes := func(what string, p store.LeaseParams, wantBatch, wantInteractive int) {
		t.Helper()
		got, err := s.Lease(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if b, i := countLane(got, job.LaneBatch), countLane(got, job.LaneInteractive); b != wantBatch || i != wantInteractive {
			t.Fatalf("%s: leased %d batch and %d interactive, want %d and %d", what, b, i, wantBatch, wantInteractive)
		}
	}
	leaseLanes("interactive lane, batch share owed", p, 0, 4)
	p.Lane, p.BatchMin, p.BatchMax = job.LaneBatch, 0, 2
	leaseLanes("batch lane, bound 2 of 4 slots", p, 2, 0)
	p.BatchMax = 0
	leaseLanes("batch lane, no bound", p, 4, 0)
	// The interactive lane's oldest job is past its budget: a batch-only
	// lease still takes batch work only.
	p.Now, p.InteractiveBudget, p.BatchMin = T0.Add(time.Hour), time.Second, 2
	leaseLanes("batch lane, interactive over budget", p, 4, 0)
	p.Lane = ""
	leaseLanes("both lanes", p, 0, 4) // interactive over budget goes first; batch's share is skipped
	p.Lane = job.LaneInteractive
	leaseLanes("interactive lane, the last two", p, 0, 2)
	p.Lane = job.LaneBatch
	p.Max = 10
	leaseLanes("batch lane, the rest", p, 0, 0)
}

// testReadyParentsLane: a parts sweep of one lane
// (ReadyParentsParams.Lane) lists only that lane's ready parents; with no
// lane it lists both.
func testReadyParentsLane(t *testing.T, open Opener) {
	s := open(t)
	const kind = "agg"
	batch := newParent(kind, "agg.part", 0)
	inter := newParent(kind, "agg.part", 0)
	inter[0].Lane = job.LaneInteractive
	insert(t, s, batch...)
	insert(t, s, inter...)
	for _, c := range []struct {
		lane job.Lane
		want []string
	}{{"", []string{inter[0].ID, batch[0].ID}}, {job.LaneBatch, []string{batch[0].ID}}, {job.LaneInteractive, []string{inter[0].ID}}} {
		page, err := s.ReadyParents(context.Background(), store.ReadyParentsParams{Kind: kind, Lane: c.lane, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, j := range page {
			got = append(got, j.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Fatalf("ReadyParents(lane %q) = %v, want %v", c.lane, got, c.want)
		}
	}
}
