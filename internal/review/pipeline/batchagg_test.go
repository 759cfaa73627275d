package pipeline

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/store"
)

// countingPublisher counts the reviews it delivers.
type countingPublisher struct{ n atomic.Int32 }

func (p *countingPublisher) Publish(context.Context, *job.Job) error {
	p.n.Add(1)
	return nil
}

// batchReview inserts an accepted review sent through the batch lane
// (Args.Batch, no part jobs) with parts items, created at now.
func batchReview(t *testing.T, st store.Store, batchID string, parts int, now time.Time) *job.Job {
	t.Helper()
	payload, _ := json.Marshal(Args{Repo: "acme/app", DepthRequested: DepthFull, Depth: DepthFull, Parts: parts,
		Publish: Publish{Kind: PublishNone}, Batch: batchID})
	rv := &job.Job{Kind: KindReview, Region: "eu", Tenant: "acme", Lane: job.LaneBatch, LimitKeys: []string{"review:eu"}, Payload: payload}
	rv.Prepare(uuid.NewString(), now, 0, true)
	if _, err := st.Insert(context.Background(), []*job.Job{rv}, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	return rv
}

// TestAggregateBatchReview: a batch-lane review has no part jobs, so the
// engine's parts capability asks the review kind's aggregate at once; the
// aggregate is pending (the review stays accepted, nothing is published)
// until every batch item of the review is final, and then the engine
// advances and publishes it exactly once, however often it is asked
// again, from however many goroutines.
func TestAggregateBatchReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openEU(t)
	now := time.Now()
	batchID := uuid.NewString()
	rv := batchReview(t, st, batchID, 2, now)
	items := []store.BatchItem{
		{BatchID: batchID, CustomID: "c0", JobID: rv.ID, ObjectID: "o0", Index: 0, State: store.ItemPending},
		{BatchID: batchID, CustomID: "c1", JobID: rv.ID, ObjectID: "o1", Index: 1, State: store.ItemPending},
	}
	b := &store.Batch{ID: batchID, Tenant: "acme", Region: "eu", Provider: "oa", State: store.BatchRunning,
		Deadline: now.Add(time.Hour), MaxAttempts: 3, Summary: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}
	if err := st.CreateBatch(ctx, b, items); err != nil {
		t.Fatal(err)
	}
	pub := &countingPublisher{}
	e, err := engine.New(engine.Config{Store: st, Region: "eu", Kinds: map[string]engine.Kind{
		KindReview: {Aggregate: Aggregate(AggregateConfig{Batches: st}), PartKinds: []string{KindPart}, Publisher: pub},
	}})
	if err != nil {
		t.Fatal(err)
	}
	state := func() *job.Job {
		t.Helper()
		j, err := st.Get(ctx, rv.ID)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	settle := func(custom, to, reason string, result json.RawMessage) {
		t.Helper()
		ok, err := st.SettleBatchItem(ctx, store.SettleBatchItemParams{BatchID: batchID, CustomID: custom, From: store.ItemPending,
			To: to, Reason: reason, Result: result, Now: time.Now()})
		if err != nil || !ok {
			t.Fatalf("settle %s: %v %v", custom, ok, err)
		}
	}

	if err := e.AggregateParent(ctx, rv.ID); err != nil {
		t.Fatal(err)
	}
	if j := state(); j.State != job.StateAccepted || pub.n.Load() != 0 {
		t.Fatalf("with every item pending the review is %s (%d publications); want accepted, none", j.State, pub.n.Load())
	}
	res, _ := json.Marshal(PartResult{Findings: []finding.Finding{fnd("app.go", 4, finding.SeverityInfo, finding.CategoryMaintainability, "kept")}})
	settle("c0", store.ItemSucceeded, "", res)
	if err := e.AggregateParent(ctx, rv.ID); err != nil {
		t.Fatal(err)
	}
	if j := state(); j.State != job.StateAccepted || pub.n.Load() != 0 {
		t.Fatalf("with one item pending the review is %s (%d publications); want accepted, none", j.State, pub.n.Load())
	}
	settle("c1", store.ItemFailed, "deadline_exceeded", nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.AggregateParent(ctx, rv.ID); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := e.SweepParents(ctx); err != nil {
		t.Fatal(err)
	}
	j := state()
	if j.State != job.StatePublished || pub.n.Load() != 1 {
		t.Fatalf("with every item final the review is %s with %d publications; want published once", j.State, pub.n.Load())
	}
	var got Result
	if err := json.Unmarshal(j.Result, &got); err != nil {
		t.Fatal(err)
	}
	if got.Parts.Total != 2 || got.Parts.Succeeded != 1 || got.Parts.Failed != 1 || !got.Partial ||
		len(got.Findings) != 1 || len(got.FailedParts) != 1 || got.FailedParts[0].Reason != "deadline_exceeded" {
		t.Fatalf("result %+v: want 2 parts, 1 succeeded with its finding, 1 failed deadline_exceeded, partial", got)
	}
	aggregated := 0
	for _, rec := range j.History {
		if strings.Contains(rec.Why, "aggregated") {
			aggregated++
		}
	}
	if aggregated != 1 {
		t.Fatalf("history holds %d aggregations, want 1: %+v", aggregated, j.History)
	}
}

// TestAggregateBatchReviewOrphaned: a batch-lane review whose batch is not
// recorded waits BatchGrace for it (the batch is written right after its
// reviews) and then ends terminal with permanent_error, unpublished; one
// naming a batch of another tenant ends so at once.
func TestAggregateBatchReviewOrphaned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openEU(t)
	created := time.Now()
	var clock atomic.Int64
	clock.Store(created.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	pub := &countingPublisher{}
	e, err := engine.New(engine.Config{Store: st, Region: "eu", Now: now, Kinds: map[string]engine.Kind{
		KindReview: {Aggregate: Aggregate(AggregateConfig{Batches: st, Now: now}), PartKinds: []string{KindPart}, Publisher: pub},
	}})
	if err != nil {
		t.Fatal(err)
	}
	missing := batchReview(t, st, uuid.NewString(), 1, created)
	foreignID := uuid.NewString()
	foreign := batchReview(t, st, foreignID, 1, created)
	fb := &store.Batch{ID: foreignID, Tenant: "globex", Region: "eu", Provider: "oa", State: store.BatchRunning,
		Deadline: created.Add(time.Hour), MaxAttempts: 1, Summary: json.RawMessage(`{}`), CreatedAt: created, UpdatedAt: created}
	if err := st.CreateBatch(ctx, fb, []store.BatchItem{{BatchID: foreignID, CustomID: "c0", JobID: foreign.ID, ObjectID: "o0",
		State: store.ItemSucceeded, Result: json.RawMessage(`{"findings":[]}`)}}); err != nil {
		t.Fatal(err)
	}
	check := func(id string, want job.State) {
		t.Helper()
		if err := e.AggregateParent(ctx, id); err != nil {
			t.Fatal(err)
		}
		j, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != want || want == job.StateTerminal && (j.Reason != job.ReasonPermanentError || len(j.Result) > 0) {
			t.Fatalf("review %s is %s/%s with result %s; want %s", id, j.State, j.Reason, j.Result, want)
		}
	}
	check(missing.ID, job.StateAccepted)
	check(foreign.ID, job.StateTerminal)
	clock.Store(created.Add(BatchGrace + time.Second).UnixNano())
	check(missing.ID, job.StateTerminal)
	if pub.n.Load() != 0 {
		t.Fatalf("%d publications of reviews that were never aggregated", pub.n.Load())
	}
}
