package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// groupReads is a store (a SQLite one, with its ManyAdvancer and
// ParentsReader) that counts, for a set of parents fixed before the
// engine starts, the statements reading their rows or children: a Get of
// one, a List of one's children, a ParentsWithChildren naming any; and
// their advances that read the row back (not AdvanceParams.Brief).
type groupReads struct {
	store.Store
	watch                      map[string]bool
	gets, lists, groups, whole atomic.Int64
}

func (r *groupReads) Get(ctx context.Context, id string) (*job.Job, error) {
	if r.watch[id] {
		r.gets.Add(1)
	}
	return r.Store.Get(ctx, id)
}

func (r *groupReads) List(ctx context.Context, p store.ListParams) ([]*job.Job, error) {
	if r.watch[p.Parent] {
		r.lists.Add(1)
	}
	return r.Store.List(ctx, p)
}

func (r *groupReads) ParentsWithChildren(ctx context.Context, ids []string) ([]*job.Job, []*job.Job, error) {
	for _, id := range ids {
		if r.watch[id] {
			r.groups.Add(1)
			break
		}
	}
	return r.Store.(store.ParentsReader).ParentsWithChildren(ctx, ids)
}

func (r *groupReads) advancing(p store.AdvanceParams) {
	if r.watch[p.ID] && !p.Brief {
		r.whole.Add(1)
	}
}

func (r *groupReads) Advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	r.advancing(p)
	return r.Store.Advance(ctx, p)
}

func (r *groupReads) AdvanceMany(ctx context.Context, ps []store.AdvanceParams) ([]*job.Job, []error) {
	for _, p := range ps {
		r.advancing(p)
	}
	return r.Store.(store.ManyAdvancer).AdvanceMany(ctx, ps)
}

// TestBatchGroupReadsOncePerGroup: a woken batch group's parents and
// their children are read in one statement per group
// (store.ParentsReader), not a List and a Get per parent, and their
// advances do not read the row back (AdvanceParams.Brief). One parent of
// the group has a part still open and is left accepted, unaggregated:
// its children came with the group's read. The parents are then published
// as before, each woken parent of a lane that is not its own part's. Each
// woken aggregation's GroupMemo names its parent among the group's
// (GroupMemo.Parents: the review aggregator reads their items at once).
func TestBatchGroupReadsOncePerGroup(t *testing.T) {
	t.Parallel()
	const n = 64
	r, agg, before := wakeParents(t, job.LaneBatch, n)
	gets, lists, groups := r.gets.Load(), r.lists.Load(), r.groups.Load()
	t.Logf("%d woken batch parents: %d Gets, %d Lists, %d group reads (%d before the wake-ups), %d advances read back",
		n+1, gets, lists, groups, before, r.whole.Load())
	if gets+lists != 0 || groups-before > n+1 {
		t.Fatalf("%d Gets and %d Lists of the woken parents, %d group reads; want one group read per group, none per parent", gets, lists, groups-before)
	}
	if w := r.whole.Load(); w != 0 {
		t.Fatalf("%d advances of the woken parents read their rows back; want none (AdvanceParams.Brief)", w)
	}
	agg.mu.Lock()
	grouped, unnamed := agg.grouped, agg.unnamed
	agg.mu.Unlock()
	if grouped < n || len(unnamed) != 0 {
		t.Fatalf("%d aggregations in a woken group, of which %d of parents their group's memo does not name (%v); want %d or more, none",
			grouped, len(unnamed), unnamed, n)
	}
}

// TestWokenInteractiveParentReadOnce: a woken interactive parent is read
// with its children in one statement (store.ParentsReader), not a List of
// its children and then a Get of its row. One parent has a part still
// open and is left accepted, unaggregated: its children came with the
// read.
func TestWokenInteractiveParentReadOnce(t *testing.T) {
	t.Parallel()
	const n = 5
	r, _, before := wakeParents(t, job.LaneInteractive, n)
	gets, lists, groups := r.gets.Load(), r.lists.Load(), r.groups.Load()
	t.Logf("%d woken interactive parents: %d Gets, %d Lists, %d one-snapshot reads (%d before the wake-ups)", n+1, gets, lists, groups, before)
	if gets+lists != 0 || groups-before != n+1 {
		t.Fatalf("%d Gets and %d Lists of the woken parents, %d one-snapshot reads; want one one-snapshot read per woken parent (%d), nothing else",
			gets, lists, groups-before, n+1)
	}
}

// wakeParents runs an engine on a groupReads store over n parents of lane
// with no parts and one with a part left open (no handler runs it), all
// left waiting by the start sweep; it then wakes every one, waits for the
// n to be published, and fails t unless the open one is still accepted and
// was not aggregated. It returns the store, the aggregator and the reads
// of the parents counted before the wake-ups.
func wakeParents(t *testing.T, lane job.Lane, n int) (*groupReads, *laneAggregator, int64) {
	t.Helper()
	s := newStore(t)
	ids := insertParentsIn(t, s, lane, n)
	open := parentIn(lane)
	part := &job.Job{Kind: "part", Region: "us", Tenant: "acme", Lane: lane, LimitKeys: []string{"parts:report"}, ParentID: open.ID}
	part.Prepare(open.ID+"-part", time.Now(), 0, false)
	if _, err := writerOn(t, s).InsertParts(context.Background(), open, []*job.Job{part}, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	r := &groupReads{Store: s, watch: map[string]bool{open.ID: true}}
	agg := &laneAggregator{entered: make(chan struct{}), release: make(chan struct{}), pending: map[string]bool{}}
	for _, id := range ids {
		r.watch[id], agg.pending[id] = true, true // the start sweep leaves them waiting
	}
	e := start(t, engine.Config{Store: r, Kinds: map[string]engine.Kind{"report": {Aggregate: agg, PartKinds: []string{"part"}, SweepEvery: time.Hour}}})
	agg.pendingSwept(t, n)
	before := r.gets.Load() + r.lists.Load() + r.groups.Load()
	e.Jobs().PartsChangedIn(open.ID, lane)
	for _, id := range ids {
		e.Jobs().PartsChangedIn(id, lane)
	}
	for _, id := range ids {
		waitState(t, s, id, job.StatePublished)
	}
	for _, id := range agg.log() {
		if id == open.ID {
			t.Fatalf("parent %s, with a part still open, was aggregated", open.ID)
		}
	}
	if j, err := s.Get(context.Background(), open.ID); err != nil || j.State != job.StateAccepted {
		t.Fatalf("parent with an open part: %+v, %v; want it accepted", j, err)
	}
	return r, agg, before
}
