package ratelane_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/store/sqlite/sqlitetest"
	"github.com/ratelane/ratelane/review"
)

// TestHalfCreatedBatchIsNotShown: a batch that a kill -9 left between the
// pieces of its creation (marked creating, 32 of its 40 items) is not there
// for the API: GET answers not found, the listing leaves it out and a
// cancel answers not found. Its drivers remove it (batchlane's
// TestDriverRemovesAHalfCreatedBatch).
func TestHalfCreatedBatchIsNotShown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	_, prof := batchSimFor(t, "openai", nil, time.Second)
	cfg, rv := batchConfig(t, dir, prof, nil)
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := review.BatchRequest{Region: "us", Tenant: "acme"}
	for i := range 40 {
		req.Reviews = append(req.Reviews, review.BatchReview{Repo: "acme/app", Change: fmt.Sprint(i), Diff: []byte(batchDiff(i))})
	}
	st, err := rv.SubmitBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts.Total != 40 {
		t.Fatalf("submitted %d items, want 40", st.Counts.Total)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sqlitetest.CutBatchCreation(t, filepath.Join(dir, "us.db"), st.ID, 32)
	cfg, rv = batchConfig(t, dir, prof, nil)
	c, err = ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := rv.GetBatch(ctx, "us", st.ID); !errors.Is(err, ratelane.ErrNotFound) {
		t.Fatalf("GET of a half-created batch: %+v, %v; want not found", got.Counts, err)
	}
	if bs, err := rv.ListBatches(ctx, "us", review.BatchListParams{}); err != nil || len(bs) != 0 {
		t.Fatalf("the listing shows %d batches (%v), want none", len(bs), err)
	}
	if _, err := rv.CancelBatch(ctx, "us", st.ID); !errors.Is(err, ratelane.ErrNotFound) {
		t.Fatalf("cancel of a half-created batch: %v, want not found", err)
	}
}
