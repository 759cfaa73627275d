package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// concurrency counts pieces of work running at once and the most seen.
// concurrency counts a kind's handlers: running now, the most at once, and
// done (a signal: a test waits on done.Reached instead of polling).
type concurrency struct {
	now, most atomic.Int64
	done      testkit.Counter
}

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
}

func (c *concurrency) leave() { c.now.Add(-1); c.done.Add(1) }

// noTurnHeld fails the test unless e's governor holds no turn and has
// no piece waiting for one: what every budget test expects once all its
// work ended, whatever went on before (a leaked turn blocks batch work
// for good).
func noTurnHeld(t *testing.T, e *engine.Engine) {
	t.Helper()
	if c := e.BudgetCounts(); c.Running != 0 || c.Waiting != 0 {
		t.Fatalf("budget counts %+v after all ended: want no turn held, none waiting", c)
	}
}

// runningBatch counts the batch-lane jobs in state running in the store:
// every one of them holds a lease.
func runningBatch(t *testing.T, s store.Store) int {
	t.Helper()
	js, err := s.List(context.Background(), store.ListParams{State: job.StateRunning, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range js {
		if j.Lane == job.LaneBatch {
			n++
		}
	}
	return n
}

// TestGovernorBoundsBatchHandlers: with BatchCPUs 2 and eight worker
// slots, ten ready batch jobs whose handlers block run two at a time, and
// only two are leased (the others stay waiting, holding no slot and no
// lease); an interactive job inserted meanwhile is leased and runs at once,
// beside the two; each batch handler that returns lets exactly one more
// be leased. In simulated time. On the code before the governor eight
// batch handlers ran at once and the interactive job waited for a slot.
func TestGovernorBoundsBatchHandlers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		var batch concurrency
		release := make(chan struct{})
		interactiveRan := make(chan struct{}, 1)
		h := engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
			if j.Lane != job.LaneBatch {
				interactiveRan <- struct{}{}
				return job.Outcome{Class: job.ClassSuccess}
			}
			batch.enter()
			defer batch.leave()
			<-release
			return job.Outcome{Class: job.ClassSuccess}
		})
		for range 10 {
			insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		}
		e := start(t, engine.Config{Store: s, Workers: 8, BatchCPUs: 2, BatchCPUShare: pacerOff, Kinds: map[string]engine.Kind{"noop": {Handler: h, Computes: true}}})
		defer func() {
			close(release)
			synctest.Wait()
		}()
		synctest.Wait()
		if n, leased := batch.now.Load(), runningBatch(t, s); n != 2 || leased != 2 {
			t.Fatalf("BatchCPUs 2: %d batch handlers running, %d batch jobs leased; want 2 and 2", n, leased)
		}
		insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
		e.Notify()
		synctest.Wait()
		select {
		case <-interactiveRan:
		default:
			t.Fatal("the interactive job did not run while two batch handlers held the governor's turns")
		}
		for i := range 3 {
			release <- struct{}{}
			time.Sleep(10 * time.Millisecond) // a poll, should a wake-up be missed
			synctest.Wait()
			if n, leased := batch.now.Load(), runningBatch(t, s); n != 2 || leased != 2 {
				t.Fatalf("after %d batch handlers returned: %d running, %d leased; want 2 and 2", i+1, n, leased)
			}
		}
		if m := batch.most.Load(); m != 2 {
			t.Fatalf("at most %d batch handlers ran at once, want 2", m)
		}
		if c := e.BudgetCounts(); c.Leased != 5 || c.Running != 2 {
			t.Fatalf("budget counts %+v: want 5 batch jobs leased with a turn, 2 turns held", c)
		}
	})
}

// TestGovernorOff: with BatchCPUs negative (and the in-flight budget
// off), batch handlers take every worker slot, as before the governor.
func TestGovernorOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		var batch concurrency
		release := make(chan struct{})
		h := engine.HandlerFunc(func(_ context.Context, _ *job.Job) job.Outcome {
			batch.enter()
			defer batch.leave()
			<-release
			return job.Outcome{Class: job.ClassSuccess}
		})
		for range 10 {
			insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		}
		start(t, engine.Config{Store: s, Workers: 8, BatchCPUs: -1, BatchPieces: -1, Kinds: map[string]engine.Kind{"noop": {Handler: h}}})
		synctest.Wait()
		n := batch.now.Load()
		close(release)
		synctest.Wait()
		if n != 8 {
			t.Fatalf("governor off: %d batch handlers ran at once, want all 8 slots", n)
		}
	})
}

// TestGovernorBatchShareUnderContinuousInteractive: interactive work is in
// flight the whole time (a 10 ms interactive job every 5 ms) while 300
// batch jobs of 10 ms each wait: the batch lane still runs one piece at a
// time (BatchCPUs 1, BatchPieces 1), back to back, and never two. Over
// one simulated second it completes at least half of what it would alone
// (100): its minimum share. The pacer and the yield gate are off: the
// governor alone (with the gate, TestBatchLaneProgressesUnderContinuousInteractiveWithTheGate).
// In simulated time.
func TestGovernorBatchShareUnderContinuousInteractive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var batch, inter concurrency
		_, stop := underInteractive(t, engine.Config{BatchCPUs: 1, BatchPieces: 1, BatchCPUShare: pacerOff, BatchYieldMax: -1}, 300, &batch, &inter)
		time.Sleep(time.Second)
		stop()
		got, most := batch.done.Load(), batch.most.Load()
		if most != 1 {
			t.Errorf("at most %d batch handlers ran at once, want 1", most)
		}
		if got < 50 {
			t.Errorf("the batch lane completed %d 10-ms jobs in one second of continuous interactive work, want at least 50", got)
		}
		if inter.done.Load() < 150 {
			t.Errorf("interactive jobs completed: %d, want about 200", inter.done.Load())
		}
		t.Logf("in 1 s: %d batch jobs, %d interactive jobs; most batch at once %d, interactive %d", got, inter.done.Load(), most, inter.most.Load())
	})
}

// TestYieldPassesTheTurn: a batch handler holding the only turn
// (BatchCPUs 1) calls engine.Yield while a batch parent's aggregation
// waits for a turn: the aggregation runs before the handler goes on, and
// the handler goes on when it ends. Without a waiting piece Yield returns
// at once. In simulated time.
func TestYieldPassesTheTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		w := newBudgetWork()
		defer w.releaseInteractive()
		inHandler, yield, yielded := make(chan struct{}), make(chan struct{}), make(chan struct{})
		h := engine.HandlerFunc(func(ctx context.Context, _ *job.Job) job.Outcome {
			inHandler <- struct{}{}
			<-yield
			engine.Yield(ctx)
			yielded <- struct{}{}
			<-yield
			return job.Outcome{Class: job.ClassSuccess}
		})
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		e := start(t, engine.Config{Store: s, Workers: 4, BatchCPUs: 1, BatchCPUShare: pacerOff, Kinds: map[string]engine.Kind{
			"noop": {Handler: h, Computes: true}, "report": {Aggregate: w, SweepEvery: time.Hour}}})
		<-inHandler
		synctest.Wait()
		p := parentIn(job.LaneBatch)
		if _, err := e.Jobs().InsertParts(context.Background(), p, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := w.started.Load(); n != 0 {
			t.Fatalf("%d aggregations started while the handler held the only turn, want 0", n)
		}
		if c := e.BudgetCounts(); c.Running != 1 || c.Waiting != 1 {
			t.Fatalf("budget counts %+v before Yield: want the handler's turn held and the aggregation waiting", c)
		}
		yield <- struct{}{} // the handler yields
		synctest.Wait()
		if n := w.started.Load(); n != 1 {
			t.Fatalf("after Yield: %d aggregations started, want 1", n)
		}
		select {
		case <-yielded:
			t.Fatal("the handler went on while the aggregation held the turn")
		default:
		}
		w.batchGo <- struct{}{} // the aggregation ends
		<-yielded
		yield <- struct{}{} // Yield with nothing waiting returns at once; the handler ends
		synctest.Wait()
		noTurnHeld(t, e)
	})
}

// TestAbandonedHandlerYieldLeaksNoTurn: a batch handler that ignores its
// context is abandoned past its maximum run time (its turn given back, so
// another batch job runs on the only turn); when it later calls
// engine.Yield with a piece waiting, it passes no turn (it holds none: the
// waiting aggregation still waits for the other handler's) and takes none
// it would never give back: once everything ends no turn is held. In
// simulated time. Without the ended check the late Yield handed the
// waiting aggregation a second turn (two pieces ran on BatchCPUs 1) and
// took one it never gave back.
func TestAbandonedHandlerYieldLeaksNoTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		w := newBudgetWork()
		defer w.releaseInteractive()
		stuck, later := make(chan struct{}), make(chan struct{})
		var first atomic.Bool
		var ran atomic.Int32
		h := engine.HandlerFunc(func(ctx context.Context, _ *job.Job) job.Outcome {
			if first.CompareAndSwap(false, true) {
				<-stuck // ignoring ctx, past the maximum run time
				engine.Yield(ctx)
				return job.Outcome{Class: job.ClassSuccess}
			}
			ran.Add(1)
			<-later
			return job.Outcome{Class: job.ClassSuccess}
		})
		j := storetest.NewJob("acme", job.LaneBatch, "k")
		j.Budgets.Transient = 5
		insertNow(t, s, j, storetest.NewJob("acme", job.LaneBatch, "k"))
		e := start(t, engine.Config{Store: s, Workers: 4, BatchCPUs: 1, BatchCPUShare: pacerOff, LeaseFor: time.Hour, HeartbeatEvery: 20 * time.Millisecond,
			Kinds: map[string]engine.Kind{"noop": {Handler: h, MaxRunTime: time.Second, Computes: true}, "report": {Aggregate: w, SweepEvery: time.Hour}}})
		time.Sleep(2 * time.Second) // abandoned; its turn goes to the other job
		synctest.Wait()
		if n := ran.Load(); n != 1 {
			t.Fatalf("after the first handler was abandoned: %d other batch handlers ran, want 1", n)
		}
		p := parentIn(job.LaneBatch) // a piece waiting for the turn the second handler holds
		if _, err := e.Jobs().InsertParts(context.Background(), p, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		close(stuck) // the abandoned handler yields, then returns
		synctest.Wait()
		if n := w.started.Load(); n != 0 {
			t.Fatalf("after the abandoned handler's Yield: %d aggregations started beside the running handler, want 0 (BatchCPUs 1)", n)
		}
		close(later)
		synctest.Wait()
		if n := w.started.Load(); n != 1 {
			t.Fatalf("after the running handler returned: %d aggregations started, want 1", n)
		}
		w.batchGo <- struct{}{} // the aggregation ends
		time.Sleep(time.Second)
		synctest.Wait()
		noTurnHeld(t, e)
	})
}

// TestGovernorLeavesWaitingKindsFree: with the governor at one turn, the
// batch-lane jobs of a kind that waits (a webhook delivery, its key paced
// and allowing eight at once) all run together, while those of a kind
// that declares Kind.Computes run one at a time beside them, and only one
// of those is leased at once. In simulated time. Before kinds declared
// what they do, every batch handler took a turn: the deliveries ran one
// at a time (`bench upstreams --smoke` many 1.05 → 6.29 of ideal).
func TestGovernorLeavesWaitingKindsFree(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		if _, err := s.UpsertLimit(context.Background(), admission.Config{Name: "subscriber:s1", Rate: 1000, Burst: 10, Concurrency: 8}, time.Now()); err != nil {
			t.Fatal(err)
		}
		var deliveries, computing concurrency
		release := make(chan struct{})
		handler := func(c *concurrency) engine.Handler {
			return engine.HandlerFunc(func(_ context.Context, _ *job.Job) job.Outcome {
				c.enter()
				defer c.leave()
				<-release
				return job.Outcome{Class: job.ClassSuccess}
			})
		}
		for range 6 {
			j := storetest.NewJob("acme", job.LaneBatch, "subscriber:s1")
			j.Kind = "deliver"
			insertNow(t, s, j)
		}
		for range 4 {
			j := storetest.NewJob("acme", job.LaneBatch, "c")
			j.Kind = "compute"
			insertNow(t, s, j)
		}
		e := start(t, engine.Config{Store: s, Workers: 16, BatchCPUs: 1, BatchCPUShare: pacerOff, Kinds: map[string]engine.Kind{
			"deliver": {Handler: handler(&deliveries)},
			"compute": {Handler: handler(&computing), Computes: true},
		}})
		synctest.Wait()
		if d, c := deliveries.now.Load(), computing.now.Load(); d != 6 || c != 1 {
			t.Fatalf("BatchCPUs 1: %d deliveries and %d computing handlers running, want 6 and 1", d, c)
		}
		if n := runningBatch(t, s); n != 7 {
			t.Fatalf("%d batch jobs leased, want 7 (6 deliveries, 1 computing)", n)
		}
		close(release)
		testkit.Recv(t, computing.done.Reached(4), time.Minute, "the 4 computing handlers to return")
		testkit.Recv(t, deliveries.done.Reached(6), time.Minute, "the 6 deliveries to return")
		synctest.Wait()
		if m := computing.most.Load(); m != 1 {
			t.Fatalf("at most %d computing batch handlers ran at once, want 1", m)
		}
		if c := e.BudgetCounts(); c.Leased != 4 {
			t.Fatalf("budget counts %+v: want the 4 computing jobs leased with a turn, and no delivery", c)
		}
	})
}
