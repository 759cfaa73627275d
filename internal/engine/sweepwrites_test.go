package engine_test

import (
	"context"
	"runtime/metrics"
	"sync/atomic"
	"testing"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// goroutinesCreated is the process's count of goroutines created so far.
func goroutinesCreated() uint64 {
	m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

// TestSweepStretchAdvancesWithoutAGoroutineEach: a sweep pass that
// advances many ready batch-lane parents on SQLite queues a stretch's
// advances for the writer from its own goroutine (store.ManyAdvancer),
// not from a goroutine per parent: those goroutines, 32 a stretch made
// runnable at once when created and again by the commit that answered
// them, were 94 % of the goroutines waiting for a CPU whenever more than
// 20 did under a 10,000-file sweep (docs/benchmarks.md, "Session 31
// (s31h4)"). The stretch's advances still share the writer's commits.
// Not parallel: the goroutine count is the process's.
func TestSweepStretchAdvancesWithoutAGoroutineEach(t *testing.T) {
	const parents = 64 // two stretches of sweepYieldEvery
	s := newStore(t)
	ctx := context.Background()
	ids := insertBatchParents(t, s, parents)
	var calls atomic.Int64
	// Not started: only the pass below aggregates.
	e, err := engine.New(engine.Config{Store: s, Region: "us", Kinds: map[string]engine.Kind{"report": {Aggregate: sumParts(&calls)}}})
	if err != nil {
		t.Fatal(err)
	}
	wc := s.(store.WriteCounter)
	txs := wc.WriteCounts().Transactions
	created := goroutinesCreated()
	if err := e.SweepParents(ctx); err != nil {
		t.Fatal(err)
	}
	created = goroutinesCreated() - created
	txs = wc.WriteCounts().Transactions - txs
	for _, id := range ids {
		if j, _ := s.Get(ctx, id); j.State != job.StatePublished {
			t.Fatalf("parent %s is %s after the pass, want published", id, j.State)
		}
	}
	if created > parents/8 {
		t.Errorf("the pass over %d ready parents created %d goroutines, want at most %d (none per parent)", parents, created, parents/8)
	}
	if txs > parents/4 {
		t.Errorf("the pass's %d advances took %d transactions, want at most %d: a stretch's advances share commits", parents, txs, parents/4)
	}
	t.Logf("%d parents: %d goroutines created, %d transactions", parents, created, txs)
}
