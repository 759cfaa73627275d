package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// readCounter is a store that counts the job reads a sweep pass makes:
// List calls (a parent's parts, or a listing of parents), ReadyParents
// and PartsOf calls.
type readCounter struct {
	store.Store
	lists, ready, partsOf atomic.Int64
}

func (s *readCounter) PartsOf(ctx context.Context, ids []string) ([]*job.Job, error) {
	s.partsOf.Add(1)
	return s.Store.PartsOf(ctx, ids)
}

func (s *readCounter) List(ctx context.Context, p store.ListParams) ([]*job.Job, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, p)
}

func (s *readCounter) ReadyParents(ctx context.Context, p store.ReadyParentsParams) ([]*job.Job, error) {
	s.ready.Add(1)
	return s.Store.ReadyParents(ctx, p)
}

// TestSweepPassReadsOnlyReadyParents: a sweep pass over many waiting
// parents (open parts, or an open batch item as a batch-lane review's)
// and a few ready ones makes one read of the ready parents and one read
// of their parts (two statements a page), and asks no aggregator about a
// waiting one. Before, a pass listed every accepted parent and read each
// one's parts: 1 + 304 reads here for 3 parents that were ready (docs/benchmarks.md,
// "Session 15 (s15h1)"). Once the last open part or item ends, the next
// pass aggregates its parent, as the backstop for a lost wake-up must.
func TestSweepPassReadsOnlyReadyParents(t *testing.T) {
	t.Parallel()
	const waitingParents, readyParents = 300, 3
	base := newStore(t)
	s := &readCounter{Store: base}
	ctx := context.Background()
	jobs, err := engine.NewJobs(engine.JobsConfig{Store: base})
	if err != nil {
		t.Fatal(err)
	}
	insert := func(parts int) (*job.Job, []*job.Job) {
		t.Helper()
		parent, ps := newParent(time.Now(), parts)
		if _, err := jobs.InsertParts(ctx, parent, ps, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		return parent, ps
	}
	var lastParts []*job.Job
	for range waitingParents {
		_, lastParts = insert(2)
	}
	var ready []string
	for range readyParents {
		p, ps := insert(2)
		for _, c := range ps {
			if _, err := base.Cancel(ctx, c.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		ready = append(ready, p.ID)
	}
	// A parent with no part jobs waiting on an open batch item.
	itemParent, _ := insert(0)
	b := &store.Batch{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Region: "us", Provider: "openai", State: store.BatchRunning,
		Deadline: time.Now().Add(time.Hour), MaxAttempts: 1, Summary: json.RawMessage(`{}`), CreatedAt: time.Now(), UpdatedAt: time.Now()}
	item := store.BatchItem{CustomID: "r-0", JobID: itemParent.ID, ObjectID: "o-0"}
	if err := base.CreateBatch(ctx, b, []store.BatchItem{item}); err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		asked = map[string]int{}
	)
	var calls atomic.Int64
	sum := sumParts(&calls)
	agg := engine.AggregatorFunc(func(ctx context.Context, parent *job.Job, parts []*job.Job) job.Outcome {
		mu.Lock()
		asked[parent.ID]++
		mu.Unlock()
		return sum(ctx, parent, parts)
	})
	// Not started: only the passes below aggregate.
	e, err := engine.New(engine.Config{Store: s, Region: "us", Kinds: map[string]engine.Kind{"report": {Aggregate: agg}}})
	if err != nil {
		t.Fatal(err)
	}
	pass := func() (reads [3]int64) {
		t.Helper()
		s.lists.Store(0)
		s.ready.Store(0)
		s.partsOf.Store(0)
		if err := e.SweepParents(ctx); err != nil {
			t.Fatal(err)
		}
		return [3]int64{s.ready.Load(), s.partsOf.Load(), s.lists.Load()}
	}
	if reads := pass(); reads != [3]int64{1, 1, 0} {
		t.Fatalf("a pass over %d waiting and %d ready parents made %v ReadyParents, PartsOf and List calls, want [1 1 0]",
			waitingParents+1, readyParents, reads)
	}
	mu.Lock()
	if len(asked) != readyParents {
		t.Fatalf("the pass asked the aggregator about %d parents, want the %d ready ones: %v", len(asked), readyParents, asked)
	}
	mu.Unlock()
	for _, id := range ready {
		if j, _ := base.Get(ctx, id); j.State != job.StatePublished {
			t.Fatalf("ready parent %s is %s, want published", id, j.State)
		}
	}
	if reads := pass(); reads != [3]int64{1, 0, 0} {
		t.Fatalf("a pass with no parent ready made %v ReadyParents, PartsOf and List calls, want [1 0 0]", reads)
	}

	// The last waiting parent's parts and the batch item end with no
	// wake-up (another process wrote them): the next pass aggregates both.
	for _, c := range lastParts {
		if _, err := base.Cancel(ctx, c.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := base.SettleBatchItem(ctx, store.SettleBatchItemParams{BatchID: b.ID, CustomID: item.CustomID, From: store.ItemPending,
		To: store.ItemCanceled, Reason: "cancelled", Now: time.Now()}); err != nil || !ok {
		t.Fatalf("settle the item: %v, %v", ok, err)
	}
	if reads := pass(); reads != [3]int64{1, 1, 0} {
		t.Fatalf("a pass with 2 parents newly ready made %v ReadyParents, PartsOf and List calls, want [1 1 0]", reads)
	}
	for _, id := range []string{lastParts[0].ParentID, itemParent.ID} {
		if j, _ := base.Get(ctx, id); j.State != job.StatePublished {
			t.Fatalf("newly ready parent %s is %s, want published", id, j.State)
		}
	}
}
