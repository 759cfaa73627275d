package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// batchCases pin the batch lane's contract: the guards on planning a chunk,
// saving its record and settling an item are what make a batch survive a
// kill -9 without losing or duplicating an item's result.
var batchCases = map[string]func(*testing.T, Opener){
	"BatchCreateGetList":  testBatchCreateGetList,
	"BatchState":          testBatchState,
	"BatchPlanChunk":      testBatchPlanChunk,
	"BatchPlanConcurrent": testBatchPlanConcurrent,
	"BatchSaveChunk":      testBatchSaveChunk,
	"BatchSettleOnce":     testBatchSettleOnce,
	"BatchItemsPaged":     testBatchItemsPaged,
	"BatchItemsOfJobs":    testBatchItemsOfJobs,
	"BatchListFilters":    testBatchListFilters,
	"BatchCreateLarge":    testBatchCreateLarge,
}

// NewBatch returns a running batch of tenant in region "us" with n items
// r-0..r-(n-1), all of job "job-<id>".
func NewBatch(tenant string, n int) (*store.Batch, []store.BatchItem) {
	id, _ := uuid.NewV7()
	b := &store.Batch{ID: id.String(), Tenant: tenant, Region: "us", Provider: "openai", State: store.BatchRunning,
		Deadline: T0.Add(24 * time.Hour), MaxAttempts: 3, Summary: json.RawMessage(`{"reviews":1}`), CreatedAt: T0, UpdatedAt: T0}
	items := make([]store.BatchItem, n)
	for i := range items {
		items[i] = store.BatchItem{CustomID: fmt.Sprintf("r-%03d", i), JobID: "job-" + b.ID, ObjectID: fmt.Sprintf("%s/%d", b.ID, i), Index: i}
	}
	return b, items
}

func createBatch(t *testing.T, s store.Store, b *store.Batch, items []store.BatchItem) {
	t.Helper()
	if err := s.CreateBatch(context.Background(), b, items); err != nil {
		t.Fatalf("create batch: %v", err)
	}
}

func getBatch(t *testing.T, s store.Store, id string) *store.Batch {
	t.Helper()
	return read(t, "batch", id, s.GetBatch)
}

func chunkOf(b *store.Batch, n int) store.BatchChunk {
	return store.BatchChunk{Key: fmt.Sprintf("%s-%d", b.ID, n), BatchID: b.ID, State: "planned",
		Record: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), UpdatedAt: T0}
}

// refusesRepeatedCustomID checks that a batch of n items whose item at
// repeats item first's custom_id is refused with ErrConflict and leaves
// nothing stored.
func refusesRepeatedCustomID(t *testing.T, s store.Store, n, first, at int) {
	t.Helper()
	dup, items := NewBatch("acme", n)
	items[at].CustomID = items[first].CustomID
	if err := s.CreateBatch(context.Background(), dup, items); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a custom_id repeated at item %d of %d: %v, want ErrConflict", at, n, err)
	}
	if _, err := s.GetBatch(context.Background(), dup.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused batch left something: %v", err)
	}
}

func testBatchCreateGetList(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 3)
	createBatch(t, s, b, items)
	got := getBatch(t, s, b.ID)
	if got.Tenant != "acme" || got.Provider != "openai" || got.State != store.BatchRunning || !got.Deadline.Equal(b.Deadline) ||
		got.MaxAttempts != 3 || string(got.Summary) != `{"reviews":1}` || !got.CreatedAt.Equal(T0) {
		t.Fatalf("got %+v", got)
	}
	if got.Counts != (store.BatchCounts{Total: 3, Pending: 3}) {
		t.Fatalf("counts %+v, want 3 pending", got.Counts)
	}
	if err := s.CreateBatch(ctx, b, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	refusesRepeatedCustomID(t, s, 2, 0, 1)
	if _, err := s.GetBatch(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	bad, _ := NewBatch("acme", 0)
	bad.Region = "eu"
	if err := s.CreateBatch(ctx, bad, nil); err == nil {
		t.Fatal("a batch of another region was stored")
	}
	b2, items2 := NewBatch("acme", 1)
	createBatch(t, s, b2, items2)
	b3, _ := NewBatch("globex", 0)
	createBatch(t, s, b3, nil)
	page, err := s.ListBatches(ctx, store.BatchListParams{Tenant: "acme", Limit: 1})
	if err != nil || len(page) != 1 || page[0].ID != b2.ID || page[0].Counts.Total != 1 {
		t.Fatalf("first page %v, %v; want the newest acme batch", page, err)
	}
	page, err = s.ListBatches(ctx, store.BatchListParams{Tenant: "acme", Before: page[0].ID})
	if err != nil || len(page) != 1 || page[0].ID != b.ID {
		t.Fatalf("second page %v, %v; want the oldest acme batch", page, err)
	}
	if all, err := s.ListBatches(ctx, store.BatchListParams{}); err != nil || len(all) != 3 {
		t.Fatalf("all tenants: %d, %v", len(all), err)
	}
}

func testBatchState(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, _ := NewBatch("acme", 0)
	createBatch(t, s, b, nil)
	if err := s.SetBatchState(ctx, b.ID, []string{store.BatchRunning}, store.BatchCanceling, T0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetBatchState(ctx, b.ID, []string{store.BatchRunning}, store.BatchDone, T0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("from the wrong state: %v, want ErrConflict", err)
	}
	if got := getBatch(t, s, b.ID); got.State != store.BatchCanceling || !got.UpdatedAt.Equal(T0.Add(time.Second)) {
		t.Fatalf("state %s at %v", got.State, got.UpdatedAt)
	}
	if err := s.SetBatchState(ctx, "nope", []string{store.BatchRunning}, store.BatchDone, T0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown batch: %v, want ErrNotFound", err)
	}
	if err := s.SetBatchState(ctx, b.ID, []string{store.BatchRunning, store.BatchCanceling}, "sleeping", T0); err == nil {
		t.Fatal("an unknown state was stored")
	}
}

func testBatchPlanChunk(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 3)
	createBatch(t, s, b, items)
	c0 := chunkOf(b, 0)
	if err := s.PlanBatchChunk(ctx, c0, []string{"r-000", "r-001"}); err != nil {
		t.Fatal(err)
	}
	// r-001 is no longer pending: the whole second plan is refused, and
	// neither its chunk nor r-002 is written.
	c1 := chunkOf(b, 1)
	if err := s.PlanBatchChunk(ctx, c1, []string{"r-002", "r-001"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("plan over a submitted item: %v, want ErrConflict", err)
	}
	if err := s.PlanBatchChunk(ctx, c0, []string{"r-002"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("plan with a taken chunk key: %v, want ErrConflict", err)
	}
	chunks, err := s.BatchChunks(ctx, b.ID)
	if err != nil || len(chunks) != 1 || chunks[0].Key != c0.Key || string(chunks[0].Record) != `{"n":0}` || chunks[0].State != "planned" {
		t.Fatalf("chunks %+v, %v; want only chunk 0", chunks, err)
	}
	got, err := s.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID})
	if err != nil || len(got) != 3 {
		t.Fatalf("items %v, %v", got, err)
	}
	for i, want := range []struct {
		state, chunk string
		attempts     int
	}{{store.ItemSubmitted, c0.Key, 1}, {store.ItemSubmitted, c0.Key, 1}, {store.ItemPending, "", 0}} {
		if got[i].State != want.state || got[i].ChunkKey != want.chunk || got[i].Attempts != want.attempts {
			t.Errorf("item %d: %s in %q after %d attempts, want %+v", i, got[i].State, got[i].ChunkKey, got[i].Attempts, want)
		}
	}
	if c := getBatch(t, s, b.ID).Counts; c != (store.BatchCounts{Total: 3, Pending: 1, Submitted: 2}) {
		t.Fatalf("counts %+v", c)
	}
}

// testBatchPlanConcurrent: two nodes planning the same pending items at
// once put each item in exactly one chunk.
func testBatchPlanConcurrent(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 20)
	createBatch(t, s, b, items)
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.CustomID
	}
	won := contend(t, "plan", 4, func(n int) error { return s.PlanBatchChunk(ctx, chunkOf(b, n), ids) })
	chunks, _ := s.BatchChunks(ctx, b.ID)
	if won != 1 || len(chunks) != 1 {
		t.Fatalf("%d plans succeeded and %d chunks exist, want 1 and 1", won, len(chunks))
	}
	got, _ := s.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID, State: store.ItemSubmitted})
	if len(got) != 20 {
		t.Fatalf("%d items submitted, want 20", len(got))
	}
	for _, it := range got {
		if it.ChunkKey != chunks[0].Key || it.Attempts != 1 {
			t.Fatalf("item %s in %s after %d attempts", it.CustomID, it.ChunkKey, it.Attempts)
		}
	}
}

func testBatchSaveChunk(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 1)
	createBatch(t, s, b, items)
	c := chunkOf(b, 0)
	if err := s.PlanBatchChunk(ctx, c, []string{"r-000"}); err != nil {
		t.Fatal(err)
	}
	up := c
	up.State, up.Record, up.UpdatedAt = "uploaded", json.RawMessage(`{"file":"f1"}`), T0.Add(time.Minute)
	if err := s.SaveBatchChunk(ctx, up, "planned"); err != nil {
		t.Fatal(err)
	}
	// A second writer that read the chunk planned loses.
	stale := c
	stale.State, stale.Record = "uploaded", json.RawMessage(`{"file":"f2"}`)
	if err := s.SaveBatchChunk(ctx, stale, "planned"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale save: %v, want ErrConflict", err)
	}
	chunks, _ := s.BatchChunks(ctx, b.ID)
	if len(chunks) != 1 || chunks[0].State != "uploaded" || string(chunks[0].Record) != `{"file":"f1"}` || !chunks[0].UpdatedAt.Equal(T0.Add(time.Minute)) {
		t.Fatalf("chunk %+v", chunks)
	}
	missing := c
	missing.Key = "nope"
	if err := s.SaveBatchChunk(ctx, missing, "planned"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown chunk: %v, want ErrNotFound", err)
	}
}

// testBatchSettleOnce: the second delivery of the same result applies
// nothing, and a requeued item is not settled by its old chunk's report.
func testBatchSettleOnce(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 3)
	createBatch(t, s, b, items)
	c := chunkOf(b, 0)
	if err := s.PlanBatchChunk(ctx, c, []string{"r-000", "r-001", "r-002"}); err != nil {
		t.Fatal(err)
	}
	settle := func(id, to, reason string, result json.RawMessage) bool {
		t.Helper()
		ok, err := s.SettleBatchItem(ctx, store.SettleBatchItemParams{BatchID: b.ID, CustomID: id, From: store.ItemSubmitted,
			ChunkKey: c.Key, To: to, Disposition: "x", Reason: reason, Result: result, Now: T0.Add(time.Hour)})
		if err != nil {
			t.Fatalf("settle %s: %v", id, err)
		}
		return ok
	}
	if !settle("r-000", store.ItemSucceeded, "succeeded", json.RawMessage(`{"findings":[1]}`)) {
		t.Fatal("first settle did not apply")
	}
	if settle("r-000", store.ItemSucceeded, "succeeded", json.RawMessage(`{"findings":[2]}`)) {
		t.Fatal("a second delivery applied")
	}
	if !settle("r-001", store.ItemPending, "expired", nil) || !settle("r-002", store.ItemFailed, "errored:invalid_request_error", nil) {
		t.Fatal("requeue or failure did not apply")
	}
	if settle("r-001", store.ItemFailed, "expired", nil) {
		t.Fatal("the old chunk's report settled a requeued item")
	}
	got, err := s.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID})
	if err != nil || len(got) != 3 {
		t.Fatalf("items %v, %v", got, err)
	}
	if string(got[0].Result) != `{"findings":[1]}` || got[0].State != store.ItemSucceeded ||
		got[1].State != store.ItemPending || got[1].Reason != "expired" || got[1].ChunkKey != c.Key ||
		got[2].State != store.ItemFailed || got[2].Result != nil || !got[2].UpdatedAt.Equal(T0.Add(time.Hour)) {
		t.Fatalf("items %+v", got)
	}
	// The schema refuses a failed item without a reason, whatever the caller.
	if _, err := s.SettleBatchItem(ctx, store.SettleBatchItemParams{BatchID: b.ID, CustomID: "r-001", From: store.ItemPending,
		To: store.ItemFailed, Now: T0}); err == nil {
		t.Fatal("a failed item without a reason was stored")
	}
	if c := getBatch(t, s, b.ID).Counts; c != (store.BatchCounts{Total: 3, Pending: 1, Succeeded: 1, Failed: 1}) {
		t.Fatalf("counts %+v", c)
	}
}

func testBatchItemsPaged(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 5)
	items[4].JobID = "other"
	createBatch(t, s, b, items)
	page, err := s.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID, Limit: 2})
	if err != nil || len(page) != 2 || page[1].CustomID != "r-001" {
		t.Fatalf("page 1: %v, %v", page, err)
	}
	page, _ = s.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID, After: page[1].CustomID, Limit: 2})
	if len(page) != 2 || page[0].CustomID != "r-002" {
		t.Fatalf("page 2: %v", page)
	}
	if got, _ := s.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID, JobID: "other"}); len(got) != 1 || got[0].CustomID != "r-004" || got[0].ObjectID != b.ID+"/4" || got[0].Index != 4 {
		t.Fatalf("by job: %v", got)
	}
}

// testBatchItemsOfJobs: BatchItemParams.JobIDs keeps the items of those
// jobs only, paged in custom_id order across the 1000-item default page
// (a woken batch group's read of its reviews' items), ANDed with JobID
// and State; three ids (a statement padded to four) and one.
func testBatchItemsOfJobs(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 2600)
	jobs := []string{"job-a", "job-b", "job-c", "job-d", "job-e"}
	for i := range items {
		items[i].CustomID = fmt.Sprintf("r-%05d", i)
		items[i].JobID = jobs[i%len(jobs)]
	}
	createBatch(t, s, b, items)
	other, oitems := NewBatch("acme", 3)
	for i := range oitems {
		oitems[i].JobID = "job-a"
	}
	createBatch(t, s, other, oitems)
	if err := s.PlanBatchChunk(ctx, chunkOf(b, 0), []string{"r-00000", "r-00001", "r-00003"}); err != nil {
		t.Fatal(err)
	}
	want := func(keep func(i int) bool) []string {
		var out []string
		for i := range items {
			if keep(i) {
				out = append(out, items[i].CustomID)
			}
		}
		return out
	}
	all := func(p store.BatchItemParams) []string {
		t.Helper()
		var out []string
		for pages := 0; ; pages++ {
			page, err := s.BatchItems(ctx, p)
			if err != nil || pages > 5 {
				t.Fatalf("BatchItems(%+v): %d items, %v", p, len(page), err)
			}
			for _, it := range page {
				out = append(out, it.CustomID)
			}
			if len(page) < store.BatchItemPage {
				return out
			}
			p.After = page[len(page)-1].CustomID
		}
	}
	for _, c := range []struct {
		p    store.BatchItemParams
		want []string
	}{
		{store.BatchItemParams{BatchID: b.ID, JobIDs: []string{"job-a", "job-c", "job-d"}},
			want(func(i int) bool { return i%5 == 0 || i%5 == 2 || i%5 == 3 })},
		{store.BatchItemParams{BatchID: b.ID, JobIDs: []string{"job-e"}}, want(func(i int) bool { return i%5 == 4 })},
		{store.BatchItemParams{BatchID: b.ID, JobIDs: []string{"job-a", "job-b", "nobody"}, State: store.ItemSubmitted},
			[]string{"r-00000", "r-00001"}},
		{store.BatchItemParams{BatchID: b.ID, JobIDs: []string{"job-a", "job-b"}, JobID: "job-b", After: "r-02590"},
			[]string{"r-02591", "r-02596"}},
		{store.BatchItemParams{BatchID: b.ID, JobIDs: []string{"job-a"}, JobID: "job-b"}, nil},
		{store.BatchItemParams{BatchID: other.ID, JobIDs: []string{"job-a", "job-b"}}, []string{"r-000", "r-001", "r-002"}},
	} {
		if got := all(c.p); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("BatchItems(JobIDs %v, JobID %q, State %q, After %q): %d items %.80s; want %d %.80s",
				c.p.JobIDs, c.p.JobID, c.p.State, c.p.After, len(got), fmt.Sprint(got), len(c.want), fmt.Sprint(c.want))
		}
	}
}

// testBatchListFilters combines every filter of ListBatches and of
// BatchItems, so each condition is ANDed with the others and each
// placeholder gets its own argument (the two drivers build these queries
// from one store.Query).
func testBatchListFilters(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	ids := func(bs []*store.Batch) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return out
	}
	var acme []*store.Batch
	for range 3 {
		b, _ := NewBatch("acme", 0)
		createBatch(t, s, b, nil)
		acme = append(acme, b)
	}
	other, _ := NewBatch("globex", 0)
	createBatch(t, s, other, nil)
	if err := s.SetBatchState(ctx, acme[1].ID, []string{store.BatchRunning}, store.BatchDone, T0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    store.BatchListParams
		want []string
	}{
		{store.BatchListParams{State: store.BatchDone}, []string{acme[1].ID}},
		{store.BatchListParams{State: store.BatchRunning}, []string{other.ID, acme[2].ID, acme[0].ID}},
		{store.BatchListParams{Tenant: "acme", State: store.BatchRunning}, []string{acme[2].ID, acme[0].ID}},
		{store.BatchListParams{Tenant: "acme", State: store.BatchRunning, Before: acme[2].ID, Limit: 1}, []string{acme[0].ID}},
		{store.BatchListParams{Tenant: "globex", State: store.BatchDone}, nil},
	} {
		got, err := s.ListBatches(ctx, c.p)
		if err != nil || fmt.Sprint(ids(got)) != fmt.Sprint(c.want) {
			t.Errorf("ListBatches(%+v) = %v, %v; want %v", c.p, ids(got), err, c.want)
		}
	}

	b, items := NewBatch("acme", 4)
	items[2].JobID, items[3].JobID = "other", "other"
	createBatch(t, s, b, items)
	if err := s.PlanBatchChunk(ctx, chunkOf(b, 0), []string{"r-000", "r-003"}); err != nil {
		t.Fatal(err)
	}
	customIDs := func(its []store.BatchItem) []string {
		var out []string
		for _, it := range its {
			out = append(out, it.CustomID)
		}
		return out
	}
	for _, c := range []struct {
		p    store.BatchItemParams
		want []string
	}{
		{store.BatchItemParams{BatchID: b.ID, JobID: "other", State: store.ItemSubmitted}, []string{"r-003"}},
		{store.BatchItemParams{BatchID: b.ID, JobID: "other", State: store.ItemPending}, []string{"r-002"}},
		{store.BatchItemParams{BatchID: b.ID, JobID: "other", After: "r-002"}, []string{"r-003"}},
		{store.BatchItemParams{BatchID: b.ID, State: store.ItemPending, After: "r-000", Limit: 1}, []string{"r-001"}},
		{store.BatchItemParams{BatchID: acme[0].ID, State: store.ItemPending}, nil},
	} {
		got, err := s.BatchItems(ctx, c.p)
		if err != nil || fmt.Sprint(customIDs(got)) != fmt.Sprint(c.want) {
			t.Errorf("BatchItems(%+v) = %v, %v; want %v", c.p, customIDs(got), err, c.want)
		}
	}
}

// testBatchCreateLarge: a batch-lane CreateBatch of more items than a
// single-writer store's piece is whole when it returns (all items, not
// Creating, listed, its state settable); one that is refused (a custom_id
// repeated late in the manifest, an id taken) leaves nothing of itself and
// does not touch the batch whose id it took; AbandonBatch leaves a
// complete batch, and an unknown id, alone.
func testBatchCreateLarge(t *testing.T, open Opener) {
	s := open(t)
	ctx := store.WithLane(context.Background(), job.LaneBatch)
	b, items := NewBatch("acme", 100)
	if err := s.CreateBatch(ctx, b, items); err != nil {
		t.Fatalf("create batch: %v", err)
	}
	got := getBatch(t, s, b.ID)
	if got.Creating || got.Counts != (store.BatchCounts{Total: 100, Pending: 100}) {
		t.Fatalf("created: creating %v, counts %+v; want 100 pending, complete", got.Creating, got.Counts)
	}
	if bs, err := s.ListBatches(ctx, store.BatchListParams{}); err != nil || len(bs) != 1 || bs[0].Counts.Total != 100 {
		t.Fatalf("listed %v, %v; want the batch with 100 items", bs, err)
	}
	taken, titems := NewBatch("acme", 100)
	taken.ID = b.ID
	if err := s.CreateBatch(ctx, taken, titems); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second batch of the same id: %v, want ErrConflict", err)
	}
	refusesRepeatedCustomID(t, s, 100, 3, 90)
	for _, id := range []string{b.ID, "nope"} {
		if gone, err := s.AbandonBatch(ctx, id); err != nil || gone {
			t.Fatalf("AbandonBatch(%s) = %v, %v; want false: only a batch being created is abandoned", id, gone, err)
		}
	}
	if got := getBatch(t, s, b.ID); got.Counts.Total != 100 {
		t.Fatalf("the batch whose id was taken, or abandoned, has %d items, want 100", got.Counts.Total)
	}
	if err := s.SetBatchState(ctx, b.ID, []string{store.BatchRunning}, store.BatchCanceling, T0); err != nil {
		t.Fatalf("cancel the created batch: %v", err)
	}
}
