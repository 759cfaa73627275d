package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// fakeBatches is a BatchReader over items held in memory that counts its
// reads; it pages BatchItems as the stores do (custom_id order, After,
// Limit).
type fakeBatches struct {
	head         store.Batch
	items        []store.BatchItem // in custom_id order
	heads, pages int
}

func (f *fakeBatches) GetBatchHead(_ context.Context, id string) (*store.Batch, error) {
	f.heads++
	if id != f.head.ID {
		return nil, store.ErrNotFound
	}
	h := f.head
	return &h, nil
}

func (f *fakeBatches) BatchItems(_ context.Context, p store.BatchItemParams) ([]store.BatchItem, error) {
	f.pages++
	var out []store.BatchItem
	for _, it := range f.items {
		if it.BatchID == p.BatchID && it.CustomID > p.After && (p.JobID == "" || it.JobID == p.JobID) &&
			(len(p.JobIDs) == 0 || slices.Contains(p.JobIDs, it.JobID)) && len(out) < p.Limit {
			out = append(out, it)
		}
	}
	return out, nil
}

// newFakeBatch returns batch b1 of acme in us with perReview items for
// each of reviews reviews (job-000, job-001, ...), every every-th item in
// state final and the others pending, and each review's states read
// without a memo (a head read and an item page each).
func newFakeBatch(t *testing.T, reviews, perReview, every int, final string) (*fakeBatches, [][]PartState) {
	f := &fakeBatches{head: store.Batch{ID: "b1", Tenant: "acme", Region: "us"}}
	for i := range reviews * perReview {
		st := store.ItemPending
		if i%every == 0 {
			st = final
		}
		f.items = append(f.items, store.BatchItem{BatchID: "b1", CustomID: fmt.Sprintf("r-%05d", i), JobID: fmt.Sprintf("job-%03d", i%reviews),
			Index: i / reviews, State: st})
	}
	return f, f.freshStates(t, reviews)
}

// parent returns review n of newFakeBatch's batch.
func parent(n int) *job.Job {
	return &job.Job{ID: fmt.Sprintf("job-%03d", n), Tenant: "acme", Region: "us"}
}

// freshStates returns the states of the batch's reviews read without a
// memo.
func (f *fakeBatches) freshStates(t *testing.T, reviews int) [][]PartState {
	t.Helper()
	var fresh [][]PartState
	for n := range reviews {
		ps, err := PartStates(context.Background(), f, parent(n), Args{Batch: "b1"})
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, ps)
	}
	return fresh
}

// checkStates zeroes f's read counts and reads every review's states in
// ctx, each of which must be perReview states equal to fresh's.
func (f *fakeBatches) checkStates(ctx context.Context, t *testing.T, fresh [][]PartState, perReview int, where string) {
	t.Helper()
	f.heads, f.pages = 0, 0
	for n := range fresh {
		ps, err := PartStates(ctx, f, parent(n), Args{Batch: "b1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != perReview || !reflect.DeepEqual(ps, fresh[n]) {
			t.Fatalf("review %d %s: %+v, want %+v", n, where, ps, fresh[n])
		}
	}
}

// TestPartStatesReadABatchOncePerSweepPass: in a sweep pass
// (engine.WithSweepMemo) the reviews of one batch share one read of its
// head and of its items (1,500 items: two pages), and each review gets
// exactly the states it gets without the memo, its own items in custom_id
// order; a review of another tenant is still refused. Outside a pass
// every review reads the head and its own items.
func TestPartStatesReadABatchOncePerSweepPass(t *testing.T) {
	t.Parallel()
	const reviews, perReview = 500, 3
	f, fresh := newFakeBatch(t, reviews, perReview, 7, store.ItemSucceeded)
	args := Args{Batch: "b1"}
	ctx := context.Background()
	if f.heads != reviews || f.pages != reviews {
		t.Fatalf("without a memo: %d head reads and %d item pages, want %d each", f.heads, f.pages, reviews)
	}

	pass := engine.WithSweepMemo(ctx)
	f.checkStates(pass, t, fresh, perReview, "in a pass")
	if f.heads != 1 || f.pages != 2 {
		t.Fatalf("in a pass: %d head reads and %d item pages, want 1 and 2", f.heads, f.pages)
	}
	foreign := parent(1)
	foreign.Tenant = "other"
	if _, err := PartStates(pass, f, foreign, args); !errors.Is(err, ErrForeignBatch) {
		t.Fatalf("another tenant's review in a pass: %v, want ErrForeignBatch", err)
	}
	if _, err := PartStates(pass, f, parent(1), Args{Batch: "gone"}); !errors.Is(err, ErrBatchNotFound) {
		t.Fatalf("a review of an unrecorded batch in a pass: %v, want ErrBatchNotFound", err)
	}
}

// TestPartStatesReadAHeadOncePerWokenGroup: in a woken batch group
// (engine.WithGroupMemo) the reviews of one batch share one read of its
// head, each still reading its own items (a wake-up says they changed),
// and each gets exactly the states it gets without the memo; a review of
// another tenant is still refused, and a batch not recorded is read again
// by the next review rather than remembered as missing.
func TestPartStatesReadAHeadOncePerWokenGroup(t *testing.T) {
	t.Parallel()
	const reviews, perReview = 32, 3
	f, fresh := newFakeBatch(t, reviews, perReview, 5, store.ItemFailed)

	group := engine.WithGroupMemo(context.Background())
	f.checkStates(group, t, fresh, perReview, "in a group")
	if f.heads != 1 || f.pages != reviews {
		t.Fatalf("in a group: %d head reads and %d item pages, want 1 and %d", f.heads, f.pages, reviews)
	}
	foreign := parent(1)
	foreign.Tenant = "other"
	if _, err := PartStates(group, f, foreign, Args{Batch: "b1"}); !errors.Is(err, ErrForeignBatch) {
		t.Fatalf("another tenant's review in a group: %v, want ErrForeignBatch", err)
	}
	f.heads = 0
	for range 2 {
		if _, err := PartStates(group, f, parent(1), Args{Batch: "gone"}); !errors.Is(err, ErrBatchNotFound) {
			t.Fatalf("a review of an unrecorded batch in a group: %v, want ErrBatchNotFound", err)
		}
	}
	if f.heads != 2 {
		t.Fatalf("two reviews of an unrecorded batch in a group read its head %d times, want 2 (a miss is not remembered)", f.heads)
	}
}

// TestPartStatesReadItemsOncePerWokenGroup: in a woken batch group whose
// memo names its parents (engine.WithGroupMemo(ctx, ids...), as the
// engine makes it) the reviews of one batch share one read of their items
// — one statement for 32 reviews' 96 items, not one per review — and each
// gets exactly the states it gets without the memo. The read names the
// group's parents only (a review outside the group reads its own), and a
// later group reads afresh: a review woken by an item settled after an
// earlier group's read sees the item settled.
func TestPartStatesReadItemsOncePerWokenGroup(t *testing.T) {
	t.Parallel()
	const reviews, perReview = 40, 3
	f, fresh := newFakeBatch(t, reviews, perReview, 5, store.ItemFailed)
	var ids []string
	for n := range 32 {
		ids = append(ids, parent(n).ID)
	}
	group := engine.WithGroupMemo(context.Background(), ids...)
	f.checkStates(group, t, fresh[:32], perReview, "in a group naming its parents")
	if f.heads != 1 || f.pages != 1 {
		t.Fatalf("in a group of 32: %d head reads and %d item pages, want 1 and 1", f.heads, f.pages)
	}
	f.pages = 0
	ps, err := PartStates(group, f, parent(35), Args{Batch: "b1"})
	if err != nil || !reflect.DeepEqual(ps, fresh[35]) || f.pages != 1 {
		t.Fatalf("a review outside the group: %+v, %v after %d item pages; want %+v from a read of its own", ps, err, f.pages, fresh[35])
	}

	// Settle review 1's pending items, as the batch lane does before it
	// wakes the review: the next group, formed after that wake-up, sees
	// them settled, where the earlier group's read did not.
	for i := range f.items {
		if f.items[i].JobID == parent(1).ID && f.items[i].State == store.ItemPending {
			f.items[i].State = store.ItemSucceeded
		}
	}
	if fresh[1][0].outcome() != partPending {
		t.Fatalf("review 1's items before they settle: %+v, want pending", fresh[1])
	}
	before, err := PartStates(group, f, parent(1), Args{Batch: "b1"})
	if err != nil || !reflect.DeepEqual(before, fresh[1]) {
		t.Fatalf("review 1 in the group read before its items settled: %+v, %v; want %+v", before, err, fresh[1])
	}
	after, err := PartStates(engine.WithGroupMemo(context.Background(), ids...), f, parent(1), Args{Batch: "b1"})
	if err != nil || len(after) != perReview {
		t.Fatalf("review 1 in the next group: %+v, %v", after, err)
	}
	for _, p := range after {
		if p.outcome() == partPending {
			t.Fatalf("review 1 in a group formed after its items settled sees %+v pending: %+v", p, after)
		}
	}
}

// batchItemReads is a real store that counts its BatchItems statements.
type batchItemReads struct {
	store.Store
	n int
}

func (r *batchItemReads) BatchItems(ctx context.Context, p store.BatchItemParams) ([]store.BatchItem, error) {
	r.n++
	return r.Store.BatchItems(ctx, p)
}

// TestPartStatesGroupReadOnSQLite is TestPartStatesReadItemsOncePerWokenGroup
// on a SQLite store: a woken group of 32 reviews of one batch (of 40)
// makes one BatchItems statement where each review made its own, each
// review gets the states of a read of its own, and an item settled (and
// its review woken) after a group's read is seen by the next group.
func TestPartStatesGroupReadOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openEU(t)
	const reviews, perReview = 40, 3
	b := &store.Batch{ID: "b-group", Tenant: "acme", Region: "eu", Provider: "openai", State: store.BatchRunning,
		Deadline: time.Now().Add(24 * time.Hour), MaxAttempts: 3, Summary: json.RawMessage(`{}`), CreatedAt: time.Now(), UpdatedAt: time.Now()}
	var items []store.BatchItem
	for i := range reviews * perReview {
		items = append(items, store.BatchItem{CustomID: fmt.Sprintf("r-%05d", i), JobID: fmt.Sprintf("job-%03d", i%reviews),
			ObjectID: fmt.Sprintf("o-%d", i), Index: i / reviews})
	}
	if err := st.CreateBatch(ctx, b, items); err != nil {
		t.Fatal(err)
	}
	settle := func(customID, to string) {
		t.Helper()
		p := store.SettleBatchItemParams{BatchID: b.ID, CustomID: customID, From: store.ItemPending, To: to, Reason: "x", Now: time.Now()}
		if to == store.ItemSucceeded {
			p.Reason, p.Result = "", json.RawMessage(`{"findings":[]}`)
		}
		ok, err := st.SettleBatchItem(ctx, p)
		if err != nil || !ok {
			t.Fatalf("settle %s: %v, %v", customID, ok, err)
		}
	}
	for i := 0; i < len(items); i += 7 {
		settle(items[i].CustomID, store.ItemFailed)
	}
	review := func(n int) *job.Job { return &job.Job{ID: fmt.Sprintf("job-%03d", n), Tenant: "acme", Region: "eu"} }
	r := &batchItemReads{Store: st}
	args := Args{Batch: b.ID}
	var fresh [][]PartState
	var ids []string
	for n := range reviews {
		ps, err := PartStates(ctx, r, review(n), args)
		if err != nil || len(ps) != perReview {
			t.Fatalf("review %d alone: %+v, %v", n, ps, err)
		}
		fresh = append(fresh, ps)
		if n < 32 {
			ids = append(ids, review(n).ID)
		}
	}
	r.n = 0
	group := engine.WithGroupMemo(ctx, ids...)
	for n := range 32 {
		ps, err := PartStates(group, r, review(n), args)
		if err != nil || !reflect.DeepEqual(ps, fresh[n]) {
			t.Fatalf("review %d in the group: %+v, %v; want %+v", n, ps, err, fresh[n])
		}
	}
	if r.n != 1 {
		t.Fatalf("a group of 32 reviews made %d BatchItems statements, want 1", r.n)
	}

	// Review 1's items (1, 41, 81) are pending; settle them, as the batch
	// lane does before it wakes the review.
	for _, i := range []int{1, 41, 81} {
		settle(items[i].CustomID, store.ItemSucceeded)
	}
	ps, err := PartStates(engine.WithGroupMemo(ctx, ids...), r, review(1), args)
	if err != nil || len(ps) != perReview {
		t.Fatalf("review 1 in the next group: %+v, %v", ps, err)
	}
	for _, p := range ps {
		if p.outcome() != partSucceeded {
			t.Fatalf("review 1 in a group formed after its items settled sees %+v: %+v", p, ps)
		}
	}
}
