package sqlite

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// holdCreatePieces makes CreateBatch's piece starting at item lo signal
// started and wait for hold (in the writer, inside the piece's
// transaction). Not parallel: the hook is the package's.
func holdCreatePieces(t *testing.T, lo int) (started, hold chan struct{}) {
	started, hold = make(chan struct{}), make(chan struct{})
	createBatchPieceHook = func(at int) {
		if at == lo {
			close(started)
			select {
			case <-hold:
			case <-t.Context().Done(): // a failed test lets the writer go
			}
		}
	}
	t.Cleanup(func() { createBatchPieceHook = nil })
	return started, hold
}

// createHeld starts a batch-lane CreateBatch of 100 items and returns once
// its piece starting at item lo holds the writer (until hold is closed);
// done answers the CreateBatch.
func createHeld(t *testing.T, w *laneWriter, lo int) (b *store.Batch, done chan error, hold chan struct{}) {
	b, items := storetest.NewBatch("acme", 100)
	started, hold := holdCreatePieces(t, lo)
	done = make(chan error, 1)
	go func() { done <- w.s.CreateBatch(store.WithLane(context.Background(), job.LaneBatch), b, items) }()
	testkit.Recv(t, started, testkit.Timeout, fmt.Sprintf("the piece from item %d running", lo))
	return b, done, hold
}

// TestCreateBatchLetsInteractiveWritesIn: a batch-lane CreateBatch of 100
// items goes through the writer in pieces, so an interactive write queued
// while the first piece runs goes in right after it (seeing the batch
// marked creating with 32 items), not after all 100 items; meanwhile
// readers see the batch as not there yet (Creating, not listed, no state
// change), and the last piece clears the mark.
func TestCreateBatchLetsInteractiveWritesIn(t *testing.T) {
	w := newLaneWriter(t)
	ctx := context.Background()
	b, done, hold := createHeld(t, w, 0)
	w.queued(w.s.batchReqs, 3, "the other three pieces queued")
	type seen struct{ creating, items int }
	saw := make(chan seen, 1)
	go func() {
		var s seen
		err := w.s.write(ctx, func(tx *writeTx) error {
			return tx.QueryRow(`SELECT creating, (SELECT count(*) FROM batch_items WHERE batch_id = id) FROM batches WHERE id = ?`,
				b.ID).Scan(&s.creating, &s.items)
		})
		if err != nil {
			t.Error(err)
		}
		saw <- s
	}()
	w.queued(w.s.reqs, 1, "the interactive write queued")
	// Hold the second piece too, to look at what readers see between pieces.
	started2, hold2 := make(chan struct{}), make(chan struct{})
	createBatchPieceHook = func(at int) {
		if at == 32 {
			close(started2)
			select {
			case <-hold2:
			case <-t.Context().Done():
			}
		}
	}
	close(hold)
	if got := testkit.Recv(t, saw, testkit.Timeout, "the interactive write"); got != (seen{1, 32}) {
		t.Fatalf("the interactive write saw the batch as %+v, want creating with 32 items (right after the first piece)", got)
	}
	testkit.Recv(t, started2, testkit.Timeout, "the second piece running")
	got, err := w.s.GetBatch(ctx, b.ID)
	if err != nil || !got.Creating || got.Counts.Total != 32 {
		t.Fatalf("between pieces GetBatch = %+v, %v; want creating with 32 items", got, err)
	}
	if bs, err := w.s.ListBatches(ctx, store.BatchListParams{}); err != nil || len(bs) != 0 {
		t.Fatalf("a batch being created was listed: %d, %v", len(bs), err)
	}
	close(hold2)
	if err := testkit.Recv(t, done, testkit.Timeout, "CreateBatch"); err != nil {
		t.Fatal(err)
	}
	got, err = w.s.GetBatch(ctx, b.ID)
	if err != nil || got.Creating || got.Counts != (store.BatchCounts{Total: 100, Pending: 100}) {
		t.Fatalf("after CreateBatch: %+v, %v; want 100 pending, not creating", got, err)
	}
	if bs, err := w.s.ListBatches(ctx, store.BatchListParams{}); err != nil || len(bs) != 1 {
		t.Fatalf("the created batch is not listed: %d, %v", len(bs), err)
	}
}

// TestCreateBatchAbandonedBetweenPieces: a batch its drivers abandon
// (AbandonBatch) between two pieces of its creation takes no more items:
// the creation fails whole and nothing of it is left.
func TestCreateBatchAbandonedBetweenPieces(t *testing.T) {
	w := newLaneWriter(t)
	ctx := context.Background()
	b, done, hold := createHeld(t, w, 32)
	abandoned := make(chan bool, 1)
	go func() {
		ok, err := w.s.AbandonBatch(ctx, b.ID)
		if err != nil {
			t.Error(err)
		}
		abandoned <- ok
	}()
	w.queued(w.s.reqs, 1, "the abandon queued")
	close(hold)
	if !testkit.Recv(t, abandoned, testkit.Timeout, "the abandon") {
		t.Fatal("AbandonBatch did not remove a batch being created")
	}
	if err := testkit.Recv(t, done, testkit.Timeout, "CreateBatch"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateBatch after its batch was abandoned: %v, want ErrConflict", err)
	}
	if _, err := w.s.GetBatch(ctx, b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetBatch after the abandon: %v, want ErrNotFound", err)
	}
	var n int
	if err := w.s.rdb.QueryRow(`SELECT count(*) FROM batch_items WHERE batch_id = ?`, b.ID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d items left (%v), want none", n, err)
	}
}
