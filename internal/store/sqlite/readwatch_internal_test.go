package sqlite

import (
	"context"
	"errors"
	"runtime/metrics"
	"testing"
	"time"

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

// TestWritesStartNoWatchers: the writer's transactions, and the queries
// run inside them, start no goroutine. On a *sql.Tx, database/sql started
// one per transaction (its context's watcher, even for a Tx begun with
// context.Background()) and one per query inside it; the writer now runs
// its own BEGIN IMMEDIATE and COMMIT on its connection (writeTx). Each
// round is an Insert, a Lease (a query inside the transaction) and a
// Finish, of one job each, callers' contexts able to end. Not parallel:
// it counts the process's goroutines created.
func TestWritesStartNoWatchers(t *testing.T) {
	s := OpenTest(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const rounds = 100
	now := storetest.T0
	before := goroutinesCreated(t)
	before0 := s.WriteCounts().Transactions
	for range rounds {
		if _, err := s.Insert(ctx, []*job.Job{storetest.NewJob("t", job.LaneInteractive, "k")}, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
		jobs, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 1, LeaseFor: time.Hour})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("lease: %d jobs, %v", len(jobs), err)
		}
		ts := []store.Transition{{ID: jobs[0].ID, LeaseToken: jobs[0].LeaseToken, To: job.StatePublished,
			Record: job.AttemptRecord{At: now, Attempt: jobs[0].Attempt, Outcome: job.ClassSuccess}, Keys: store.KeyEffect{Now: now}}}
		if errs, err := s.Finish(ctx, ts); err != nil || errs[0] != nil {
			t.Fatalf("finish: %v, %v", errs, err)
		}
	}
	n := goroutinesCreated(t) - before
	txs := s.WriteCounts().Transactions - before0
	if txs < 2*rounds {
		t.Fatalf("%d transactions for %d rounds; want at least two per round (else this test counts little)", txs, rounds)
	}
	t.Logf("%d transactions created %d goroutines", txs, n)
	if n > rounds/10 {
		t.Fatalf("%d transactions created %d goroutines; want next to none", txs, n)
	}
}
