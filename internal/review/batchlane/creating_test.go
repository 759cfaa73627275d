package batchlane

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite/sqlitetest"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestDriverRemovesAHalfCreatedBatch: a batch left marked creating with
// part of its items (a kill -9 between CreateBatch's pieces) is waited for
// by a young driver job, as a batch not recorded yet, and removed whole by
// one past the grace, which ends permanent: nothing of it is submitted,
// and no item of it is left.
func TestDriverRemovesAHalfCreatedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, path, b := storeWithBatch(t, 40)
	sqlitetest.CutBatchCreation(t, path, b.ID, 32)
	now := storetest.T0.Add(time.Hour)
	h := NewHandler(Config{Region: "us", Store: st, Providers: map[string]Entry{}, Wake: func(string) {},
		Now: func() time.Time { return now }})
	payload, _ := json.Marshal(Args{Batch: b.ID})
	driver := func(created time.Time) *job.Job {
		return &job.Job{ID: "j", Kind: KindSubmit, Tenant: "acme", Region: "us", Payload: payload, CreatedAt: created}
	}
	if o := h.HandleSubmit(ctx, driver(now)); o.Class != job.ClassPending {
		t.Fatalf("a young driver of a batch being created: %s (%s), want pending", o.Class, o.Err)
	}
	if got, err := st.GetBatch(ctx, b.ID); err != nil || !got.Creating || got.Counts.Total != 32 {
		t.Fatalf("the young driver touched the batch: %+v, %v", got, err)
	}
	if o := h.HandleSubmit(ctx, driver(now.Add(-2*orphanGrace))); o.Class != job.ClassPermanent {
		t.Fatalf("a driver past the grace: %s (%s), want permanent", o.Class, o.Err)
	}
	if _, err := st.GetBatch(ctx, b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the half-created batch is still there: %v", err)
	}
	if left, err := st.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID}); err != nil || len(left) != 0 {
		t.Fatalf("%d items left (%v), want none", len(left), err)
	}
}
