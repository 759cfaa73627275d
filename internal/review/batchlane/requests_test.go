package batchlane

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

// objectReads counts the part objects read through its store (n), and
// the store calls that read them (calls: one per GetObject, one per
// GetObjects).
type objectReads struct {
	store.Store
	n, calls  atomic.Int64
	submitted atomic.Int64 // BatchItems reads of submitted items
}

func (s *objectReads) BatchItems(ctx context.Context, p store.BatchItemParams) ([]store.BatchItem, error) {
	if p.State == store.ItemSubmitted {
		s.submitted.Add(1)
	}
	return s.Store.BatchItems(ctx, p)
}

func (s *objectReads) GetObject(ctx context.Context, kind, id string) (store.Object, error) {
	s.n.Add(1)
	s.calls.Add(1)
	return s.Store.GetObject(ctx, kind, id)
}

func (s *objectReads) GetObjects(ctx context.Context, kind string, ids []string) (map[string]store.Object, error) {
	s.n.Add(int64(len(ids)))
	s.calls.Add(1)
	return s.Store.GetObjects(ctx, kind, ids)
}

// countedBatch stores a batch of n one-file reviews for the OpenAI batch
// simulator sim (made with cfg) and returns its plan and a handler whose
// store counts the part objects read (reads), on clock now.
func countedBatch(t *testing.T, cfg batchsim.Config, id string, n int, now func() time.Time) (Plan, *Handler, *objectReads) {
	t.Helper()
	var rs []Review
	for i := range n {
		rs = append(rs, Review{Repo: "acme/app", Change: "c", Diff: fmt.Appendf(nil,
			"diff --git a/f%[1]d.go b/f%[1]d.go\nnew file mode 100644\n--- /dev/null\n+++ b/f%[1]d.go\n@@ -0,0 +1,1 @@\n+package f%[1]d\n", i),
			Publish: pipeline.Publish{Kind: "none"}})
	}
	return reviewsBatch(t, cfg, Manifest{ID: id, Reviews: rs}, now)
}

// reviewsBatch is countedBatch for the reviews (and part budget) of m,
// whose id, region, tenant, profile and time it sets.
func reviewsBatch(t *testing.T, cfg batchsim.Config, m Manifest, now func() time.Time) (Plan, *Handler, *objectReads) {
	t.Helper()
	ctx := context.Background()
	sim, err := batchsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	prof := provider.Profile{Name: "openai-batch", Kind: "openai", Region: "us", Model: "m-1", APIKey: "sk-test",
		MaxOutputTokens: 512, BaseURL: sim.URL() + "/v1/"}
	bp, err := NewProvider(prof)
	if err != nil {
		t.Fatal(err)
	}
	st, _, _ := storeWithBatch(t, 1)
	seq := 0
	m.Region, m.Tenant, m.Profile, m.Now = "us", "acme", prof, now()
	plan, err := NewPlan(m, func() string { seq++; return fmt.Sprintf("id-%d", seq) })
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutObjects(ctx, plan.Objects); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBatch(ctx, plan.Batch, plan.Items); err != nil {
		t.Fatal(err)
	}
	reads := &objectReads{Store: st}
	h := NewHandler(Config{Region: "us", Store: reads, Providers: map[string]Entry{prof.Name: {Profile: prof, Batch: bp}},
		Wake: func(string) {}, Now: now})
	return plan, h, reads
}

// TestSubmitReadsEachPartOnce runs the first submit pass of a batch on
// the OpenAI batch simulator: it plans the pending items into a chunk and
// uploads it in the same pass. Each item's part object is read (and its
// prompt built) once: the upload reuses the request plan built to size
// the chunk. Before, the pass read every part object twice. And the
// pass reads them in one store call (Store.GetObjects), not one each.
// One-file reviews' parts are their whole diffs: the items name the
// diff objects, and no part object is stored (pipeline.PartArgs.WholeDiff).
func TestSubmitReadsEachPartOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	plan, h, reads := countedBatch(t, batchsim.Config{ValidateFor: time.Hour, ProcessFor: time.Hour}, "b-submit", 5,
		func() time.Time { return now })
	st := reads.Store
	submit := plan.Jobs[0]
	if submit.Kind != KindSubmit {
		t.Fatalf("plan's first job is %s, want the submit driver", submit.Kind)
	}
	// One-file reviews store each diff once (pipeline.PartArgs.WholeDiff):
	// their items name the review's diff object, which the pass reads.
	if len(plan.Objects) != len(plan.Items) {
		t.Fatalf("%d objects for %d one-part reviews; want the diffs alone", len(plan.Objects), len(plan.Items))
	}
	for _, it := range plan.Items {
		if it.ObjectID != it.JobID || itemObject(it) != pipeline.ObjectDiff {
			t.Fatalf("item %s names object %s (review %s); want its review's diff", it.CustomID, it.ObjectID, it.JobID)
		}
	}
	h.HandleSubmit(ctx, submit)
	chunks, err := st.BatchChunks(ctx, plan.Batch.ID)
	if err != nil || len(chunks) != 1 {
		t.Fatalf("%d chunks, %v; want 1", len(chunks), err)
	}
	var c llmbatch.Chunk
	if err := json.Unmarshal(chunks[0].Record, &c); err != nil {
		t.Fatal(err)
	}
	if c.State == llmbatch.StatePlanned || len(c.CustomIDs) != len(plan.Items) {
		t.Fatalf("chunk %s with %d items; want it uploaded, with %d", c.State, len(c.CustomIDs), len(plan.Items))
	}
	if got := reads.n.Load(); got != int64(len(plan.Items)) {
		t.Fatalf("the pass read %d part objects for %d items; want each once", got, len(plan.Items))
	}
	if got := reads.calls.Load(); got != 1 {
		t.Fatalf("the pass read its %d part objects in %d store calls; want 1", len(plan.Items), got)
	}
}

// TestCollectReadsPartsInOneCall runs a batch through the OpenAI batch
// simulator (on a manual clock) to its results: the collect pass that
// checks every answer against its part reads the chunk's part objects in
// one store call, not one GetObject per item (each a statement with its
// own cancellation watchers: docs/benchmarks.md, "Session 21 (s21h4)").
// And only that pass reads the chunk's items: the passes that only poll
// read none (each read all of them until session 23).
func TestCollectReadsPartsInOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := batchsim.NewClock(time.Now())
	const reviews = 40
	plan, h, reads := countedBatch(t, batchsim.Config{ValidateFor: time.Second, ProcessFor: time.Second, FinalizeFor: time.Second,
		Now: clock.Now}, "b-collect", reviews, clock.Now)
	st := reads.Store
	h.HandleSubmit(ctx, plan.Jobs[0])
	reads.n.Store(0)
	reads.calls.Store(0)
	reads.submitted.Store(0)
	collect := plan.Jobs[1]
	if collect.Kind != KindCollect {
		t.Fatalf("plan's second job is %s, want the collect driver", collect.Kind)
	}
	passes := 0
	for ; ; passes++ {
		if passes == 20 {
			t.Fatal("the batch did not finish in 20 collect passes")
		}
		o := h.HandleCollect(ctx, collect)
		if o.Class == job.ClassSuccess {
			break
		}
		clock.Advance(max(o.RetryAfter, time.Second)) // when the pass asked to run again
	}
	if got := reads.submitted.Load(); passes < 1 || got != 1 {
		t.Fatalf("%d collect passes read the chunk's items %d times; want a pass that only polled and one read (by the pass that collected)", passes+1, got)
	}
	b, err := st.GetBatch(ctx, plan.Batch.ID)
	if err != nil || b.Counts.Succeeded != reviews {
		t.Fatalf("batch counts %+v, %v; want %d succeeded", b.Counts, err, reviews)
	}
	if got := reads.n.Load(); got != reviews {
		t.Fatalf("the collect passes read %d part objects for %d answers; want each once", got, reviews)
	}
	if got := reads.calls.Load(); got != 1 {
		t.Fatalf("the collect passes read the %d part objects in %d store calls; want 1", reviews, got)
	}
}

// TestCollectDeliversInPieces runs a batch of 100 items to its results
// (OpenAI batch simulator, manual clock) with a counting Config.Yield in
// the collect passes: the pass that collects decodes the results file and
// checks the answers against their parts buildPiece at a time, with a
// Yield between the pieces, so a batch pacer can rest it (each was one
// stretch of the whole chunk before session 27).
func TestCollectDeliversInPieces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := batchsim.NewClock(time.Now())
	plan, h, _ := countedBatch(t, batchsim.Config{ValidateFor: time.Second, ProcessFor: time.Second, FinalizeFor: time.Second,
		Now: clock.Now}, "b-collect-pieces", 100, clock.Now)
	h.HandleSubmit(ctx, plan.Jobs[0])
	yields := 0
	h.cfg.Yield = func(context.Context) { yields++ }
	for passes := 0; ; passes++ {
		if passes == 20 {
			t.Fatal("the batch did not finish in 20 collect passes")
		}
		yields = 0
		o := h.HandleCollect(ctx, plan.Jobs[1])
		if o.Class == job.ClassSuccess {
			break
		}
		clock.Advance(max(o.RetryAfter, time.Second))
	}
	// The chunk's step, three in the results' decoding (before lines 32,
	// 64 and 96), three in the answers' check (the same), and one for
	// the one group of settles (DefaultSettleGroup is 128).
	if want := 1 + 3 + 3 + 1; yields != want {
		t.Fatalf("the collecting pass yielded %d times; want %d", yields, want)
	}
}

// TestSubmitBuildsInPieces runs a submit pass of 100 items with a
// counting Config.Yield: the pass yields before its objects' read, before
// every buildPiece requests it builds and before sizing the chunks, so a
// batch pacer can rest it between pieces (one stretch of a thousand was
// where the slowest interactive reviews under a sweep waited:
// docs/benchmarks.md, "Session 26 (s26h2)"), and once more at the chunk's
// step (upload and create).
func TestSubmitBuildsInPieces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	const items = 100
	plan, h, reads := countedBatch(t, batchsim.Config{ValidateFor: time.Hour, ProcessFor: time.Hour}, "b-pieces", items,
		func() time.Time { return now })
	var order []string // "yield", or "read" once the objects were read
	read := int64(0)
	h.cfg.Yield = func(context.Context) {
		if n := reads.calls.Load(); n != read {
			read = n
			order = append(order, "read")
		}
		order = append(order, "yield")
	}
	h.HandleSubmit(ctx, plan.Jobs[0])
	// One before the objects' read, one per 32 items built (0, 32, 64,
	// 96), one per 32 items sized (the same), one before the chunks are
	// recorded, one at the chunk's step, and three in its upload's
	// encoding (before lines 32, 64 and 96: llmbatch.WithYield).
	want := "[yield read" + strings.Repeat(" yield", 4+4+1+1+3) + "]"
	if got := fmt.Sprint(order); got != want {
		t.Fatalf("the pass's pieces %s; want %s", got, want)
	}
}
