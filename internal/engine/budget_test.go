package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// budgetWork is an interactive handler that blocks until
// releaseInteractive and an Aggregator whose batch-lane parents block
// until released one by one (batchGo), counting how many batch
// aggregations run at once.
type budgetWork struct {
	interactiveIn   chan struct{}
	interactiveFree chan struct{}
	freeOnce        sync.Once
	batchGo         chan struct{}
	running, most   atomic.Int64
	started         atomic.Int64
}

func newBudgetWork() *budgetWork {
	return &budgetWork{interactiveIn: make(chan struct{}, 1), interactiveFree: make(chan struct{}), batchGo: make(chan struct{})}
}

func (b *budgetWork) releaseInteractive() { b.freeOnce.Do(func() { close(b.interactiveFree) }) }

func (b *budgetWork) Handle(_ context.Context, _ *job.Job) job.Outcome {
	b.interactiveIn <- struct{}{}
	<-b.interactiveFree
	return job.Outcome{Class: job.ClassSuccess}
}

func (b *budgetWork) Aggregate(_ context.Context, _ *job.Job, _ []*job.Job) job.Outcome {
	b.started.Add(1)
	n := b.running.Add(1)
	for {
		m := b.most.Load()
		if n <= m || b.most.CompareAndSwap(m, n) {
			break
		}
	}
	<-b.batchGo
	b.running.Add(-1)
	return job.Outcome{Class: job.ClassSuccess}
}

// budgetEngine starts an engine with an interactive job running
// (blocked in w.Handle) and wakes five batch-lane parents with no parts,
// which the batch aggregation loop aggregates as one group: they are
// woken while a first parent's aggregation holds the loop, and that one
// is then released (w.started counts it). The yield gate (on by default) is
// off: these tests measure the budget alone.
func budgetEngine(t *testing.T, w *budgetWork, pieces int) (*engine.Engine, string) {
	t.Helper()
	var first string
	s := newStore(t)
	insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
	e := start(t, engine.Config{Store: s, Workers: 8, BatchPieces: pieces, BatchCPUs: -1, BatchYieldMax: -1, Kinds: map[string]engine.Kind{
		"noop": {Handler: w}, "report": {Aggregate: w, SweepEvery: time.Hour}}})
	<-w.interactiveIn
	synctest.Wait() // past the start sweep
	for i := range 6 {
		p := parentIn(job.LaneBatch)
		if _, err := e.Jobs().InsertParts(context.Background(), p, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = p.ID
			synctest.Wait() // the first holds the loop
		}
	}
	synctest.Wait()
	w.batchGo <- struct{}{} // the first ends; the group of five starts
	holdPast()
	return e, first
}

// holdPast lets every goroutine that can run do so, then simulated time
// pass the SQLite writer's hold of batch-lane transactions while the
// interactive handler runs (sqlite.Config.BatchHold, 10 ms by default),
// so that the batch-lane writes made so far are committed.
func holdPast() {
	synctest.Wait()
	time.Sleep(20 * time.Millisecond)
	synctest.Wait()
}

// TestBatchBudgetWhileInteractiveInFlight: with an interactive handler
// running (Config.BatchPieces 1), five batch-lane parents woken together
// are one piece of batch-lane work: their group holds one turn and all
// five are aggregated under it, one after the other by the group's
// goroutine (its CPU work never more than one goroutine's), and their
// advances and publications are written together after, so that they
// share the store's commits (until session 20 each took a turn of its own
// and they ran one at a time, each advance its own transaction; in
// session 20 the five aggregated concurrently under the one turn). Each
// parent is published in its group's turn (the first one, a group of its
// own, before the five start), so nothing waits for a turn. In simulated
// time: synctest.Wait lets every goroutine that can run do so before each
// check.
func TestBatchBudgetWhileInteractiveInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newBudgetWork()
		defer w.releaseInteractive() // a failed check must not leave work blocked
		defer close(w.batchGo)
		e, first := budgetEngine(t, w, 0) // the default: 1
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		running, waiting, interactive := engine.BudgetState(e)
		if got := w.started.Load() - 1; got != 1 || running != 1 || waiting != 0 || interactive != 1 {
			t.Fatalf("with an interactive handler running: %d of the group's aggregations started, budget running %d waiting %d interactive %d; want 1, 1, 0, 1",
				got, running, waiting, interactive)
		}
		if j, err := e.Jobs().Store().Get(context.Background(), first); err != nil || j.State != job.StatePublished {
			t.Fatalf("first parent %+v (%v): want published in its own group's turn", j, err)
		}

		// Each aggregation that ends lets the group's next one start; the
		// turn stays with the group and nothing is written before the
		// group's last parent is aggregated.
		for i := 2; i <= 5; i++ {
			w.batchGo <- struct{}{}
			synctest.Wait()
			if got := w.started.Load() - 1; got != int64(i) {
				t.Fatalf("after %d of the group's aggregations ended: %d started; want %d", i-1, got, i)
			}
			// One published: the first group's, nothing of this group's yet.
			wantBudget(t, e, fmt.Sprintf("after %d of the group's aggregations ended", i-1), 1, 1)
		}

		// The last ends: the group writes, publishes and gives its turn back.
		w.batchGo <- struct{}{}
		holdPast()
		wantBudget(t, e, "after both groups ended", 0, 6)
		if m := w.most.Load(); m != 1 {
			t.Fatalf("%d batch aggregations ran at once; want 1", m)
		}
		if c := e.BudgetCounts(); c.Passed+c.Held < 2 {
			t.Fatalf("budget counts %+v, want the two groups' turns at least", c)
		}
	})
}

// wantBudget fails t unless, when the step described is over, the batch
// budget runs running pieces with none waiting and published "report"
// parents are published.
func wantBudget(t *testing.T, e *engine.Engine, when string, running, published int) {
	t.Helper()
	js, err := e.Jobs().Store().List(context.Background(), store.ListParams{Kind: "report", State: job.StatePublished, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r, wt, _ := engine.BudgetState(e); r != running || wt != 0 || len(js) != published {
		t.Fatalf("%s: budget running %d waiting %d, %d parents published; want %d, 0 and %d", when, r, wt, len(js), running, published)
	}
}

// TestBatchBudgetOff: BatchPieces negative leaves batch work unbounded
// while interactive work runs (the behaviour before the budget): the
// group starts beside the interactive handler without a turn, and nothing
// is counted. (Its aggregations still run one after the other: that is
// the group's shape, not the budget's.)
func TestBatchBudgetOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newBudgetWork()
		defer w.releaseInteractive()
		defer close(w.batchGo)
		e, _ := budgetEngine(t, w, -1)
		if got := w.running.Load(); got != 1 {
			t.Fatalf("budget off: %d batch aggregations running beside the interactive handler, want 1", got)
		}
		if c := e.BudgetCounts(); c.Passed != 0 || c.Held != 0 {
			t.Fatalf("budget off counted %+v, want nothing", c)
		}
	})
}

// The CPU governor is on unless asked off: a zero BatchCPUs becomes
// DefaultBatchCPUs of this process's CPUs (half, at least one), a
// negative one stays off, a positive one is kept (docs/configuration.md).
func TestBatchCPUsDefault(t *testing.T) {
	for procs, want := range map[int]int{1: 1, 2: 1, 3: 1, 8: 4} {
		if got := engine.DefaultBatchCPUs(procs); got != want {
			t.Errorf("DefaultBatchCPUs(%d) = %d, want %d", procs, got, want)
		}
	}
	for set, want := range map[int]int{0: engine.DefaultBatchCPUs(runtime.GOMAXPROCS(0)), -1: -1, 3: 3} {
		if got := (engine.Config{BatchCPUs: set}).WithDefaults().BatchCPUs; got != want {
			t.Errorf("Config{BatchCPUs: %d}.WithDefaults().BatchCPUs = %d, want %d", set, got, want)
		}
	}
}
