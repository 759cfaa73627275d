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

// TestReadsStartNoWatchers: a read of the pool with a context that can
// end starts no goroutine (readContext), whatever its lane (interactive,
// batch, none), where the same statement run on the pool with that
// context directly starts the drivers' two cancellation watchers; a read
// with a context already done still fails with its error. Interactive
// reads kept their watchers until session 39: 18 of the 22 goroutines
// created per interactive review (docs/benchmarks.md, "Session 39
// (s39h2)"). Not parallel: it counts the process's goroutines created.
func TestReadsStartNoWatchers(t *testing.T) {
	s := OpenTest(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.PutObject(ctx, store.Object{Kind: "part", ID: "p", Body: []byte("x"), UpdatedAt: storetest.T0}); err != nil {
		t.Fatal(err)
	}
	const reads = 200
	count := func(read func() error) uint64 {
		before := goroutinesCreated(t)
		for range reads {
			if err := read(); err != nil {
				t.Fatal(err)
			}
		}
		return goroutinesCreated(t) - before
	}
	direct := count(func() error {
		var n int
		return s.rdb.QueryRowContext(ctx, "SELECT count(*) FROM objects").Scan(&n)
	})
	if direct < reads {
		t.Fatalf("%d reads on the pool with a context that can end created %d goroutines; want at least one each (the drivers' watchers; else this test counts nothing)", reads, direct)
	}
	for _, lctx := range []context.Context{store.WithLane(ctx, job.LaneInteractive), store.WithLane(ctx, job.LaneBatch), ctx} {
		if n := count(func() error { _, err := s.GetObject(lctx, "part", "p"); return err }); n > reads/10 {
			t.Fatalf("%d reads (lane %q) created %d goroutines; want next to none", reads, store.LaneOf(lctx), n)
		}
	}
	cancel()
	for _, l := range []job.Lane{job.LaneInteractive, job.LaneBatch} {
		if _, err := s.GetObject(store.WithLane(ctx, l), "part", "p"); !errors.Is(err, context.Canceled) {
			t.Fatalf("a %s read with its context done = %v; want context.Canceled", l, err)
		}
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
