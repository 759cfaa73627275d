package sqlite

import (
	"context"
	"errors"
	"runtime/metrics"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// goroutinesCreated is the process's count of goroutines created so far.
func goroutinesCreated(t *testing.T) uint64 {
	m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindUint64 {
		t.Skip("the runtime does not count goroutines created")
	}
	return m[0].Value.Uint64()
}

// TestBatchReadsStartNoWatchers: a batch-lane read with a context that can
// end starts no goroutine (readContext), where an interactive read starts
// the drivers' two cancellation watchers per statement; a batch-lane read
// with a context already done still fails with its error. Not parallel:
// it counts the process's goroutines created.
func TestBatchReadsStartNoWatchers(t *testing.T) {
	s := OpenTest(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.PutObject(ctx, store.Object{Kind: "part", ID: "p", Body: []byte("x"), UpdatedAt: storetest.T0}); err != nil {
		t.Fatal(err)
	}
	const reads = 200
	created := func(lane job.Lane) uint64 {
		lctx := store.WithLane(ctx, lane)
		before := goroutinesCreated(t)
		for range reads {
			if _, err := s.GetObject(lctx, "part", "p"); err != nil {
				t.Fatal(err)
			}
		}
		return goroutinesCreated(t) - before
	}
	if n := created(job.LaneInteractive); n < reads {
		t.Fatalf("%d interactive reads created %d goroutines; want at least one each (the drivers' watchers; else this test counts nothing)", reads, n)
	}
	if n := created(job.LaneBatch); n > reads/10 {
		t.Fatalf("%d batch-lane reads created %d goroutines; want next to none", reads, n)
	}
	cancel()
	if _, err := s.GetObject(store.WithLane(ctx, job.LaneBatch), "part", "p"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a batch-lane read with its context done = %v; want context.Canceled", err)
	}
}
