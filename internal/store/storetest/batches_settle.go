package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// batchSettleCases pin the grouped settle: one transaction for many items,
// each still guarded as SettleBatchItem is, all or nothing.
var batchSettleCases = map[string]func(*testing.T, Opener){
	"BatchSettleGroup":  testBatchSettleGroup,
	"BatchGetHead":      testBatchGetHead,
	"ObjectsBulk":       testObjectsBulk,
	"InsertWithObjects": testInsertWithObjects,
	"BatchLaneBulk":     testBatchLaneBulk,
}

// testBatchSettleGroup: a group settles every item still in its chunk and
// state and reports the rest as not applied (an item settled before, one
// requeued out of the chunk, an unknown one); delivering the same group
// again applies nothing; a group with one row the schema refuses writes
// none of its rows.
func testBatchSettleGroup(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 6)
	createBatch(t, s, b, items)
	c := chunkOf(b, 0)
	if err := s.PlanBatchChunk(ctx, c, []string{"r-000", "r-001", "r-002", "r-003", "r-004"}); err != nil {
		t.Fatal(err)
	}
	at := T0.Add(time.Hour)
	// r-001 was settled by an earlier delivery.
	if ok, err := s.SettleBatchItem(ctx, store.SettleBatchItemParams{BatchID: b.ID, CustomID: "r-001", From: store.ItemSubmitted,
		ChunkKey: c.Key, To: store.ItemSucceeded, Disposition: "succeeded", Reason: "succeeded", Result: json.RawMessage(`{"n":1}`), Now: at}); err != nil || !ok {
		t.Fatalf("single settle: %v, %v", ok, err)
	}
	p := func(id, to, reason string, result json.RawMessage) store.SettleBatchItemParams {
		return store.SettleBatchItemParams{BatchID: b.ID, CustomID: id, From: store.ItemSubmitted, ChunkKey: c.Key, To: to,
			Disposition: "x", Reason: reason, Result: result, Now: at}
	}
	group := []store.SettleBatchItemParams{
		p("r-000", store.ItemSucceeded, "succeeded", json.RawMessage(`{"n":0}`)),
		p("r-001", store.ItemSucceeded, "succeeded", json.RawMessage(`{"n":"again"}`)),
		p("r-002", store.ItemPending, "expired", nil),
		p("r-003", store.ItemFailed, "errored:invalid_request_error", nil),
		p("r-005", store.ItemSucceeded, "succeeded", json.RawMessage(`{"n":5}`)), // pending, in no chunk
		p("r-404", store.ItemSucceeded, "succeeded", nil),
	}
	got, err := s.SettleBatchItems(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v", got, want)
	}
	if again, err := s.SettleBatchItems(ctx, group); err != nil || slices.Contains(again, true) {
		t.Fatalf("the same group again: applied %v, %v; want none", again, err)
	}
	// All or nothing: r-004 would settle, but the failed item without a
	// reason is refused by the schema, so neither is written.
	bad := []store.SettleBatchItemParams{p("r-004", store.ItemSucceeded, "succeeded", json.RawMessage(`{"n":4}`)),
		{BatchID: b.ID, CustomID: "r-002", From: store.ItemPending, To: store.ItemFailed, Now: at}}
	if _, err := s.SettleBatchItems(ctx, bad); err == nil {
		t.Fatal("a group with a row the schema refuses was stored")
	}
	if got, err := s.SettleBatchItems(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty group: %v, %v", got, err)
	}
	all, err := s.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID})
	if err != nil || len(all) != 6 {
		t.Fatalf("items %v, %v", all, err)
	}
	if string(all[0].Result) != `{"n":0}` || all[0].State != store.ItemSucceeded || !all[0].UpdatedAt.Equal(at) ||
		string(all[1].Result) != `{"n":1}` ||
		all[2].State != store.ItemPending || all[2].Reason != "expired" || all[2].ChunkKey != c.Key ||
		all[3].State != store.ItemFailed || all[3].Result != nil ||
		all[4].State != store.ItemSubmitted || all[4].Result != nil ||
		all[5].State != store.ItemPending {
		t.Fatalf("items %+v", all)
	}
	if c := getBatch(t, s, b.ID).Counts; c != (store.BatchCounts{Total: 6, Pending: 2, Submitted: 1, Succeeded: 2, Failed: 1}) {
		t.Fatalf("counts %+v", c)
	}
}

// testBatchGetHead: the head is GetBatch without the counts.
func testBatchGetHead(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	b, items := NewBatch("acme", 3)
	createBatch(t, s, b, items)
	h, err := s.GetBatchHead(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	full := getBatch(t, s, b.ID)
	if full.Counts.Total != 3 || h.Counts != (store.BatchCounts{}) {
		t.Fatalf("counts: full %+v, head %+v", full.Counts, h.Counts)
	}
	full.Counts = store.BatchCounts{}
	if h.ID != b.ID || h.Tenant != "acme" || h.Region != "us" || h.State != store.BatchRunning || !h.Deadline.Equal(b.Deadline) ||
		h.MaxAttempts != 3 || string(h.Summary) != string(full.Summary) || !h.CreatedAt.Equal(full.CreatedAt) {
		t.Fatalf("head %+v, want %+v", h, full)
	}
	if _, err := s.GetBatchHead(ctx, "no-such-batch"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown batch: %v, want ErrNotFound", err)
	}
}

// testObjectsBulk: a group of objects is stored in one write, replacing
// earlier versions like PutObject; a group with an object over the size
// limit stores none of them.
func testObjectsBulk(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	if err := s.PutObject(ctx, store.Object{Kind: "part", ID: "a", Body: []byte("old"), UpdatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	group := []store.Object{{Kind: "part", ID: "a", Body: []byte("new"), UpdatedAt: T0.Add(time.Second)},
		{Kind: "part", ID: "b", Body: []byte("b"), UpdatedAt: T0}, {Kind: "diff", ID: "a", Body: []byte("diff a"), UpdatedAt: T0}}
	if err := s.PutObjects(ctx, group); err != nil {
		t.Fatal(err)
	}
	for _, want := range group {
		got, err := s.GetObject(ctx, want.Kind, want.ID)
		if err != nil || string(got.Body) != string(want.Body) || !got.UpdatedAt.Equal(want.UpdatedAt) {
			t.Fatalf("object %s/%s: %+v, %v; want %q", want.Kind, want.ID, got, err, want.Body)
		}
	}
	tooBig := []store.Object{{Kind: "part", ID: "c", Body: []byte("c"), UpdatedAt: T0},
		{Kind: "part", ID: "d", Body: make([]byte, store.MaxObjectBytes+1), UpdatedAt: T0}}
	if err := s.PutObjects(ctx, tooBig); err == nil {
		t.Fatal("a group with an object over the limit was stored")
	}
	if _, err := s.GetObject(ctx, "part", "c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("object c of the refused group: %v, want ErrNotFound", err)
	}
	if err := s.PutObjects(ctx, nil); err != nil {
		t.Fatalf("empty group: %v", err)
	}
}

// testInsertWithObjects: objects and the jobs that reference them are
// stored by one call, the jobs answered as Insert answers them; a replay
// of the jobs' idempotency key returns the first jobs; an object over the
// size limit or a job the store refuses stores no job.
func testInsertWithObjects(t *testing.T, open Opener) {
	s, ctx := open(t), context.Background()
	objs := []store.Object{{Kind: "diff", ID: "r1", Body: []byte("diff"), UpdatedAt: T0},
		{Kind: "part", ID: "r1/0", Body: []byte("part"), UpdatedAt: T0}}
	jobs := []*job.Job{NewJob("t", job.LaneInteractive, "k"), NewJob("t", job.LaneInteractive, "k")}
	jobs[0].IdempotencyKey = "review-1"
	res, err := s.InsertWithObjects(ctx, objs, jobs, admission.Config{})
	if err != nil || len(res) != 2 || res[0].Existing || res[1].Existing {
		t.Fatalf("InsertWithObjects: %+v, %v; want two new jobs", res, err)
	}
	for _, want := range objs {
		if got, err := s.GetObject(ctx, want.Kind, want.ID); err != nil || string(got.Body) != string(want.Body) {
			t.Fatalf("object %s/%s: %+v, %v; want %q", want.Kind, want.ID, got, err, want.Body)
		}
	}
	for _, j := range jobs {
		if got, err := s.Get(ctx, j.ID); err != nil || got.State != job.StateWaiting {
			t.Fatalf("job %s: %+v, %v; want it waiting", j.ID, got, err)
		}
	}
	again := NewJob("t", job.LaneInteractive, "k")
	again.IdempotencyKey = "review-1"
	res, err = s.InsertWithObjects(ctx, []store.Object{{Kind: "diff", ID: "r1-copy", Body: []byte("diff"), UpdatedAt: T0}},
		[]*job.Job{again}, admission.Config{})
	if err != nil || len(res) != 1 || !res[0].Existing || res[0].Job.ID != jobs[0].ID {
		t.Fatalf("replay: %+v, %v; want the first job, existing", res, err)
	}
	tooBig := NewJob("t", job.LaneInteractive, "k")
	if _, err := s.InsertWithObjects(ctx, []store.Object{{Kind: "part", ID: "big", Body: make([]byte, store.MaxObjectBytes+1), UpdatedAt: T0}},
		[]*job.Job{tooBig}, admission.Config{}); err == nil {
		t.Fatal("an object over the limit was stored")
	}
	foreign := NewJob("t", job.LaneInteractive, "k")
	foreign.Region = "elsewhere"
	if _, err := s.InsertWithObjects(ctx, []store.Object{{Kind: "part", ID: "f", Body: []byte("f"), UpdatedAt: T0}},
		[]*job.Job{foreign}, admission.Config{}); err == nil {
		t.Fatal("a job of another region was stored")
	}
	for _, j := range []*job.Job{tooBig, foreign} {
		if _, err := s.Get(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("refused job %s: %v, want ErrNotFound", j.ID, err)
		}
	}
}

// testBatchLaneBulk: the batch lane's large groups (store.WithLane batch;
// a single-writer driver may commit them in pieces so that interactive
// writes go in between) store every object and settle every item,
// reporting each item's own answer in order; a group with a row the
// schema refuses is refused, and neither that row nor any after it is
// written (the rows before it may be, on such a driver).
func testBatchLaneBulk(t *testing.T, open Opener) {
	s := open(t)
	ctx := store.WithLane(context.Background(), job.LaneBatch)
	const n = 100 // several pieces on any driver that cuts them
	var objs []store.Object
	for i := range n {
		objs = append(objs, store.Object{Kind: "part", ID: fmt.Sprint(i), Body: []byte(fmt.Sprint("body ", i)), UpdatedAt: T0})
	}
	if err := s.PutObjects(ctx, objs); err != nil {
		t.Fatal(err)
	}
	for _, want := range objs {
		if got, err := s.GetObject(ctx, want.Kind, want.ID); err != nil || string(got.Body) != string(want.Body) {
			t.Fatalf("object %s: %+v, %v; want %q", want.ID, got, err, want.Body)
		}
	}

	b, items := NewBatch("acme", n)
	createBatch(t, s, b, items)
	c := chunkOf(b, 0)
	ids := make([]string, n)
	for i, it := range items {
		ids[i] = it.CustomID
	}
	if err := s.PlanBatchChunk(ctx, c, ids); err != nil {
		t.Fatal(err)
	}
	at := T0.Add(time.Hour)
	p := func(i int) store.SettleBatchItemParams {
		return store.SettleBatchItemParams{BatchID: b.ID, CustomID: ids[i], From: store.ItemSubmitted, ChunkKey: c.Key,
			To: store.ItemSucceeded, Disposition: "succeeded", Reason: "succeeded", Result: json.RawMessage(fmt.Sprint(i)), Now: at}
	}
	// Item 70 was settled before: it is answered false, in its place.
	if ok, err := s.SettleBatchItem(ctx, p(70)); err != nil || !ok {
		t.Fatalf("single settle: %v, %v", ok, err)
	}
	var group []store.SettleBatchItemParams
	for i := range 80 {
		group = append(group, p(i))
	}
	got, err := s.SettleBatchItems(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range got {
		if ok != (i != 70) || len(got) != 80 {
			t.Fatalf("applied %v: want all 80 but item 70", got)
		}
	}
	// Items 80-99: the row at 90 is refused (failed without a reason).
	var bad []store.SettleBatchItemParams
	for i := 80; i < n; i++ {
		q := p(i)
		if i == 90 {
			q.To, q.Reason, q.Result = store.ItemFailed, "", nil
		}
		bad = append(bad, q)
	}
	if _, err := s.SettleBatchItems(ctx, bad); err == nil {
		t.Fatal("a group with a row the schema refuses was stored")
	}
	all, err := s.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID})
	if err != nil || len(all) != n {
		t.Fatalf("items: %d, %v", len(all), err)
	}
	for i, it := range all {
		if i < 80 && (it.State != store.ItemSucceeded || string(it.Result) != fmt.Sprint(i)) {
			t.Fatalf("item %d: %+v, want succeeded with its own result", i, it)
		}
		if i >= 90 && it.State != store.ItemSubmitted {
			t.Fatalf("item %d at or after the refused row: %+v, want still submitted", i, it)
		}
	}
}
