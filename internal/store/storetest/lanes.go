package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// laneCases are the conformance cases of lane-dedicated nodes
// (engine.Config.Lanes): a lease and a parts sweep of one lane.
var laneCases = map[string]func(*testing.T, Opener){
	"LeaseLane":          testLeaseLane,
	"ReadyParentsLane":   testReadyParentsLane,
	"LeaseLanesShareKey": testLeaseLanesShareKey,
}

// testLeaseLanesShareKey: a paced key named by batch and interactive jobs
// admits, over both lanes of one lease, no more starts than it holds: the
// batch lane's share (visited first) spends the key's burst, and the
// interactive lane's visit after it sees what is left, not the state the
// lease read before the batch lane's starts (a driver that read the
// interactive lane's groups and keys before serving the batch lane, as
// session 30's reverted two-trip PostgreSQL lease did, must not admit
// from that older read). Its other groups are served as usual.
func testLeaseLanesShareKey(t *testing.T, open Opener) {
	ctx := context.Background()
	for _, c := range []struct {
		batchMin, wantBatch, wantShared int
	}{
		{batchMin: 2, wantBatch: 2, wantShared: 0}, // the batch lane spends the burst of 2
		{batchMin: 1, wantBatch: 1, wantShared: 1}, // one start left for the interactive lane
	} {
		s := open(t)
		setLimit(t, s, admission.Config{Name: "shared", Rate: 1, Burst: 2})
		insert(t, s, NewJob("a", job.LaneBatch, "shared"), NewJob("a", job.LaneBatch, "shared"))
		insert(t, s, NewJob("b", job.LaneInteractive, "shared"), NewJob("b", job.LaneInteractive, "shared"),
			NewJob("b", job.LaneInteractive, "shared"), NewJob("c", job.LaneInteractive, "other"))
		got, err := s.Lease(ctx, store.LeaseParams{Now: T0, Max: 8, LeaseFor: time.Minute, BatchMin: c.batchMin, InteractiveBudget: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		shared := 0
		for _, j := range got {
			if j.Lane == job.LaneInteractive && j.LimitKeys[0] == "shared" {
				shared++
			}
		}
		if b := countLane(got, job.LaneBatch); b != c.wantBatch || shared != c.wantShared || len(got) != c.wantBatch+c.wantShared+1 {
			t.Fatalf("BatchMin %d, a burst of 2: leased %d batch and %d interactive jobs on the key (%d in all); want %d and %d, and the other key's",
				c.batchMin, b, shared, len(got), c.wantBatch, c.wantShared)
		}
	}
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
