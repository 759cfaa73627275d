package sqlite

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// setGapWait sets writeInGap's bound for one test (not parallel: the
// bound is the package's).
func setGapWait(t *testing.T, d time.Duration) {
	old := gapWait
	gapWait = d
	t.Cleanup(func() { gapWait = old })
}

// gapBatch opens a store whose one watcher reports busy, creates a batch
// of n items and returns it with its items' custom ids and a chunk for
// them.
func gapBatch(t *testing.T, busy *atomic.Bool, n int) (*laneWriter, *store.Batch, []string, store.BatchChunk) {
	w := newLaneWriter(t)
	w.s.WatchInteractive(busy.Load)
	b, items := storetest.NewBatch("acme", n)
	if err := w.s.CreateBatch(context.Background(), b, items); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, it := range items {
		ids[i] = it.CustomID
	}
	c := store.BatchChunk{Key: b.ID + "-0", BatchID: b.ID, State: "planned", Record: json.RawMessage(`{}`), UpdatedAt: storetest.T0}
	return w, b, ids, c
}

// planAsync calls PlanBatchChunk in ctx's lane from its own goroutine.
func planAsync(s *Store, ctx context.Context, c store.BatchChunk, ids []string) chan error {
	done := make(chan error, 1)
	go func() { done <- s.PlanBatchChunk(ctx, c, ids) }()
	return done
}

// submitted counts b's items in chunk key, and its chunks.
func submitted(t *testing.T, s *Store, b *store.Batch, key string) (items, chunks int) {
	t.Helper()
	its, err := s.BatchItems(context.Background(), store.BatchItemParams{BatchID: b.ID, State: store.ItemSubmitted, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range its {
		if it.ChunkKey == key {
			items++
		}
	}
	cs, err := s.BatchChunks(context.Background(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	return items, len(cs)
}

// TestPlanBatchChunkWaitsForGap: a batch-lane PlanBatchChunk of more
// than batchPiece items that the writer comes to while a watcher reports
// interactive work in flight writes nothing and is put off; it is not
// queued again while the work goes on (an interactive write passes
// through the writer meanwhile), and once the watcher reports none it is
// planned whole: the chunk and all its items, in one write.
func TestPlanBatchChunkWaitsForGap(t *testing.T) {
	setGapWait(t, time.Hour) // never late here
	var busy atomic.Bool
	w, b, ids, c := gapBatch(t, &busy, 100)
	hold := w.running(job.LaneInteractive, "hold", nil)
	done := planAsync(w.s, store.WithLane(context.Background(), job.LaneBatch), c, ids)
	w.queued(w.s.batchReqs, 1, "the plan queued")
	busy.Store(true)
	close(hold)
	testkit.WaitFor(t, testkit.Timeout, "the plan put off", func() bool { return w.s.gapPutOff.Load() == 1 })
	if n, chunks := submitted(t, w.s, b, c.Key); n != 0 || chunks != 0 {
		t.Fatalf("put off, the plan wrote %d items and %d chunks", n, chunks)
	}
	w.submit(job.LaneInteractive, "between", nil, nil, nil)
	w.finish()
	select {
	case err := <-done:
		t.Fatalf("the plan ended while interactive work was in flight: %v", err)
	default:
	}
	if n, chunks := submitted(t, w.s, b, c.Key); n != 0 || chunks != 0 || w.s.gapPutOff.Load() != 1 {
		t.Fatalf("while busy: %d items, %d chunks, put off %d times, want 0, 0, 1", n, chunks, w.s.gapPutOff.Load())
	}
	busy.Store(false)
	if err := testkit.Recv(t, done, testkit.Timeout, "the plan"); err != nil {
		t.Fatal(err)
	}
	if n, chunks := submitted(t, w.s, b, c.Key); n != 100 || chunks != 1 {
		t.Fatalf("planned: %d items in the chunk and %d chunks, want 100 and 1", n, chunks)
	}
	if late := w.s.gapLate.Load(); late != 0 {
		t.Fatalf("%d late plans, want 0", late)
	}
}

// TestPlanBatchChunkGapBound: interactive work that never pauses delays
// a long plan by gapWait at most; then it runs. A small chunk and an
// interactive-lane plan do not wait for a gap at all.
func TestPlanBatchChunkGapBound(t *testing.T) {
	setGapWait(t, time.Hour)
	var busy atomic.Bool
	busy.Store(true)
	w, b, ids, c := gapBatch(t, &busy, 100)
	batch := store.WithLane(context.Background(), job.LaneBatch)
	if err := testkit.Recv(t, planAsync(w.s, batch, c, ids[:batchPiece]), testkit.Timeout, "a small plan"); err != nil {
		t.Fatal(err)
	}
	c1 := c
	c1.Key = b.ID + "-1"
	if err := testkit.Recv(t, planAsync(w.s, context.Background(), c1, ids[batchPiece:2*batchPiece+1]), testkit.Timeout, "an interactive plan"); err != nil {
		t.Fatal(err)
	}
	if off, late := w.s.gapPutOff.Load(), w.s.gapLate.Load(); off != 0 || late != 0 {
		t.Fatalf("small and interactive plans: put off %d, late %d, want 0, 0", off, late)
	}
	gapWait = time.Millisecond
	c2 := c
	c2.Key = b.ID + "-2"
	if err := testkit.Recv(t, planAsync(w.s, batch, c2, ids[2*batchPiece+1:]), testkit.Timeout, "a late plan"); err != nil {
		t.Fatal(err)
	}
	if n, _ := submitted(t, w.s, b, c2.Key); n != 100-2*batchPiece-1 {
		t.Fatalf("late plan: %d items, want %d", n, 100-2*batchPiece-1)
	}
	if late := w.s.gapLate.Load(); late != 1 {
		t.Fatalf("%d late plans, want 1", late)
	}
}
