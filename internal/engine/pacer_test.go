package engine_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// tenMsEach is a handler that takes 10 ms, counted in batch or inter by
// its job's lane.
func tenMsEach(batch, inter *concurrency) engine.HandlerFunc {
	return func(_ context.Context, j *job.Job) job.Outcome {
		c := inter
		if j.Lane == job.LaneBatch {
			c = batch
		}
		c.enter()
		time.Sleep(10 * time.Millisecond)
		c.leave()
		return job.Outcome{Class: job.ClassSuccess}
	}
}

// underInteractive starts an engine with cfg, 8 worker slots and one
// computing kind whose handler takes 10 ms (tenMsEach), over n ready batch
// jobs and an interactiveStream; stop ends the stream and waits for it.
func underInteractive(t *testing.T, cfg engine.Config, n int, batch, inter *concurrency) (e *engine.Engine, stop func()) {
	t.Helper()
	s := newStore(t)
	for range n {
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
	}
	cfg.Store, cfg.Workers = s, 8
	cfg.Kinds = map[string]engine.Kind{"noop": {Handler: tenMsEach(batch, inter), Computes: true}}
	e = start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	produced := interactiveStream(ctx, s, e)
	return e, func() { cancel(); <-produced }
}

// interactiveStream inserts an interactive job every 5 ms until ctx ends;
// the returned channel is closed when it has stopped.
func interactiveStream(ctx context.Context, s store.Store, e *engine.Engine) <-chan struct{} {
	return interactiveEvery(ctx, s, e, 5*time.Millisecond)
}

// interactiveEvery is interactiveStream with a job every every.
func interactiveEvery(ctx context.Context, s store.Store, e *engine.Engine, every time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			j := storetest.NewJob("acme", job.LaneInteractive, "k")
			j.EligibleAt, j.CreatedAt = time.Now(), time.Now()
			if _, err := s.Insert(context.Background(), []*job.Job{j}, admission.Config{}); err != nil {
				return
			}
			e.Notify()
			time.Sleep(every)
		}
	}()
	return done
}

// TestBatchPacerHoldsItsShareWhileInteractiveIsAbout: with BatchCPUShare
// 0.25 (BatchCPUs 1), batch jobs of 10 ms each run about a quarter of
// wall time while interactive work is in flight (one 10-ms interactive
// job every 5 ms): some 25 in a simulated second, where the governor
// alone runs them back to back (50 and more:
// TestGovernorBatchShareUnderContinuousInteractive). Once interactive work
// has been gone for BatchPaceWindow the lane runs at full speed again and
// the pacer rests it no more. Without the pacer the first count is twice
// the bound and the test fails. The yield gate is off: the pacer alone.
// In simulated time.
func TestBatchPacerHoldsItsShareWhileInteractiveIsAbout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var batch, inter concurrency
		e, stop := underInteractive(t, engine.Config{BatchCPUs: 1, BatchCPUShare: 0.25, BatchYieldMax: -1}, 400, &batch, &inter)
		time.Sleep(time.Second)
		paced := batch.done.Load()
		rested := e.BudgetCounts().RestSeconds
		stop()
		if paced < 15 || paced > 35 {
			t.Errorf("share 0.25: the batch lane completed %d 10-ms jobs in one second of continuous interactive work, want about 25 (15 to 35)", paced)
		}
		if rested < 0.6 || rested > 0.9 {
			t.Errorf("share 0.25: the pacer rested the lane %.3f s of the first second, want about 0.75", rested)
		}
		if inter.done.Load() < 150 {
			t.Errorf("interactive jobs completed: %d, want about 200", inter.done.Load())
		}

		// Interactive work gone: after the window the lane runs freely.
		time.Sleep(engine.BatchPaceWindow + 100*time.Millisecond)
		before, restedBefore := batch.done.Load(), e.BudgetCounts().RestSeconds
		time.Sleep(time.Second)
		free, c := batch.done.Load()-before, e.BudgetCounts()
		if free < 80 {
			t.Errorf("no interactive work about: the batch lane completed %d 10-ms jobs in a second, want about 100 (at least 80)", free)
		}
		if c.RestSeconds != restedBefore {
			t.Errorf("no interactive work about: the pacer rested the lane %.3f s more, want none", c.RestSeconds-restedBefore)
		}
		if m := batch.most.Load(); m != 1 {
			t.Errorf("at most %d batch handlers ran at once, want 1", m)
		}
		t.Logf("paced: %d batch jobs in 1 s, lane rested %.3f s (%d rests); free: %d in 1 s; %d interactive jobs", paced, rested, c.Rests, free, inter.done.Load())
	})
}

// fortyPieces is a handler whose batch-lane jobs do 40 pieces of 10 ms
// with engine.Yield between them and send the wall time they took on
// took; an interactive job takes 10 ms, or until release is closed when
// release is not nil.
func fortyPieces(took chan<- time.Duration, release <-chan struct{}) engine.HandlerFunc {
	return func(ctx context.Context, j *job.Job) job.Outcome {
		if j.Lane != job.LaneBatch {
			if release != nil {
				<-release
			} else {
				time.Sleep(10 * time.Millisecond)
			}
			return job.Outcome{Class: job.ClassSuccess}
		}
		began := time.Now()
		for range 40 {
			time.Sleep(10 * time.Millisecond)
			engine.Yield(ctx)
		}
		took <- time.Since(began)
		return job.Outcome{Class: job.ClassSuccess}
	}
}

// fortyPiecesEngine starts an engine on s with workers slots, one
// governor turn and BatchCPUShare 0.5 whose one computing kind is
// fortyPieces; took gives its batch job's wall time. The yield gate is
// off: these tests measure the pacer alone (with the gate, on by default,
// see TestBatchComputingOverlapsInteractiveLessWithTheGate).
func fortyPiecesEngine(t *testing.T, s store.Store, workers int, release <-chan struct{}) (e *engine.Engine, took <-chan time.Duration) {
	t.Helper()
	c := make(chan time.Duration, 1)
	e = start(t, engine.Config{Store: s, Workers: workers, BatchCPUs: 1, BatchCPUShare: 0.5, BatchYieldMax: -1,
		Kinds: map[string]engine.Kind{"noop": {Handler: fortyPieces(c, release), Computes: true}}})
	return e, c
}

// TestBatchPacerRestsAtYield: one batch handler doing 40 pieces of 10 ms,
// with engine.Yield between them, under continuous interactive work and
// BatchCPUShare 0.5 takes about twice its 0.4 s of work (each piece is
// followed by a rest as long); alone it takes its 0.4 s. Without the
// pacer at Yield it takes 0.4 s either way. In simulated time.
func TestBatchPacerRestsAtYield(t *testing.T) {
	t.Parallel()
	fortyPiecesPaced(t, func(t *testing.T, s store.Store, e *engine.Engine, took <-chan time.Duration) time.Duration {
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		e.Notify()
		return <-took
	})
}

// fortyPiecesPaced runs forty, which has 40 pieces of 10 ms with Yield
// between them done on a fortyPiecesEngine (BatchCPUShare 0.5) and
// returns how long they took, once beside a stream of interactive work
// and once alone, and checks the pacer's rests: about 800 ms, and 400 ms.
// In simulated time.
func fortyPiecesPaced(t *testing.T, forty func(t *testing.T, s store.Store, e *engine.Engine, took <-chan time.Duration) time.Duration) {
	t.Helper()
	for _, withInteractive := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			s := newStore(t)
			e, took := fortyPiecesEngine(t, s, 8, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			produced := make(<-chan struct{})
			if withInteractive {
				produced = interactiveStream(ctx, s, e)
				time.Sleep(20 * time.Millisecond)
			}
			d := forty(t, s, e, took)
			cancel()
			if withInteractive {
				<-produced
				if d < 750*time.Millisecond || d > 900*time.Millisecond {
					t.Errorf("share 0.5, interactive work about: 40 pieces of 10 ms took %v, want about 800ms", d)
				}
			} else if d != 400*time.Millisecond {
				t.Errorf("no interactive work: 40 pieces of 10 ms took %v, want 400ms", d)
			}
		})
	}
}

// TestBatchPacerPacesBatchWorkAlreadyRunning: the engage race. A batch
// handler's 40 pieces of 10 ms (share 0.5, Yield between them) start with
// no interactive work about; 100 ms in, an interactive stream starts, and
// from then on each piece rests as long as it ran: about 100 ms + 30 ×
// 20 ms = 700 ms in all, where the pieces unpaced take 400 ms. In
// simulated time.
func TestBatchPacerPacesBatchWorkAlreadyRunning(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		e, took := fortyPiecesEngine(t, s, 8, nil)
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		e.Notify()
		time.Sleep(100*time.Millisecond + time.Microsecond) // ten pieces done, unpaced
		if c := e.BudgetCounts(); c.Rests != 0 {
			t.Fatalf("no interactive work about yet: %d rests, want 0", c.Rests)
		}
		ctx, cancel := context.WithCancel(context.Background())
		produced := interactiveStream(ctx, s, e)
		d := <-took
		cancel()
		<-produced
		if d < 650*time.Millisecond || d > 760*time.Millisecond {
			t.Errorf("interactive work from 100 ms on: 40 pieces of 10 ms took %v, want about 700ms (10 unpaced, 30 paced at 0.5)", d)
		}
	})
}

// TestBatchPacerCountsInteractiveWorkFromBeforeTheBatch: interactive work
// that entered the engine's count before any batch work existed (one
// interactive handler that runs throughout, nothing else) still paces the
// batch lane once it starts: 40 pieces of 10 ms at share 0.5 take about
// 800 ms. A count engaged only once batch work is about, without the
// work already in flight, would run them in 400 ms. In simulated time.
func TestBatchPacerCountsInteractiveWorkFromBeforeTheBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		release := make(chan struct{})
		insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
		e, took := fortyPiecesEngine(t, s, 8, release)
		time.Sleep(2 * engine.BatchPaceWindow) // long past any window: only the count tells
		if _, _, inter := engine.BudgetState(e); inter != 1 {
			t.Fatalf("interactive work in flight: %d, want 1", inter)
		}
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k2"))
		e.Notify()
		d := <-took
		close(release)
		if d < 790*time.Millisecond || d > 810*time.Millisecond {
			t.Errorf("one interactive handler in flight since before the batch job: 40 pieces of 10 ms took %v, want 800ms", d)
		}
	})
}

// TestBatchPacerCountsAcceptedInteractiveWork: an interactive job inserted
// through the engine's writer that no lease can take yet (the one worker
// slot is the batch handler's) is interactive work about (queued.go): the
// batch handler's 40 pieces of 10 ms at share 0.5 take about 800 ms, not
// the 400 ms they take with nothing about. In simulated time.
func TestBatchPacerCountsAcceptedInteractiveWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		e, took := fortyPiecesEngine(t, s, 1, nil)
		synctest.Wait() // the batch handler holds the only slot
		i := storetest.NewJob("acme", job.LaneInteractive, "k2")
		i.EligibleAt, i.CreatedAt = time.Now(), time.Now()
		if _, err := e.Jobs().Insert(context.Background(), []*job.Job{i}, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		d := <-took
		if d < 790*time.Millisecond || d > 810*time.Millisecond {
			t.Errorf("an accepted interactive job waiting for the slot: 40 pieces of 10 ms took %v, want 800ms", d)
		}
	})
}

// TestInteractiveBookkeepingFreeWithoutBatchWork: with the defaults (the
// pacer on, the budget's in-flight bound and the governor on) and no
// batch work leased or waiting, what an interactive job does to the
// engine's bookkeeping (its insert told to the queued tracking, the lease
// that sees it, its handler and its publication in flight and out)
// allocates nothing and never takes the batch budget's lock to wake
// pieces that are not there. Session 25's closures and listeners cost a
// drain with no batch work 10 % with the pacer on.
func TestInteractiveBookkeepingFreeWithoutBatchWork(t *testing.T) {
	// Not started: the engine's own loops would allocate meanwhile.
	e, err := engine.New(engine.Config{Store: newStore(t), Region: "us",
		Kinds: map[string]engine.Kind{"noop": noop(), "sweep": {Handler: noop().Handler, Computes: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if pacer, queued := engine.Pacing(e); !pacer || !queued {
		t.Fatalf("defaults: pacer on %v, queued tracking %v; want both on", pacer, queued)
	}
	j := storetest.NewJob("acme", job.LaneInteractive, "k")
	j.EligibleAt = time.Now().Add(-time.Second)
	res := []store.InsertResult{{Job: j}}
	turn := engine.BudgetTurn(e)
	if n := testing.AllocsPerRun(1000, func() { engine.InteractiveBookkeeping(e, res) }); n != 0 {
		t.Errorf("one interactive job's bookkeeping: %v allocations, want 0", n)
	}
	if engine.BudgetTurn(e) != turn {
		t.Error("the batch budget woke its waiting pieces with none waiting")
	}
	if _, _, inter := engine.BudgetState(e); inter != 0 {
		t.Errorf("after the jobs: %d interactive pieces in flight, want 0", inter)
	}
}

// TestBatchWorkRestsAtYield: batch-lane work outside a handler (a
// manifest's intake in an API request's goroutine) made a piece of the
// lane with Engine.BatchWork is paced at Yield as a handler is: 40 pieces
// of 10 ms at BatchCPUShare 0.5 take about 800 ms beside interactive work
// and 400 ms alone. Work nested in it takes no second turn (with one turn
// that would never come), and the turn is given back at its end.
// Without BatchWork, Yield in the caller's
// context returns at once and the pieces take 400 ms either way. In
// simulated time.
func TestBatchWorkRestsAtYield(t *testing.T) {
	t.Parallel()
	fortyPiecesPaced(t, func(t *testing.T, s store.Store, e *engine.Engine, took <-chan time.Duration) time.Duration {
		began := time.Now()
		wctx, end := e.BatchWork(context.Background())
		nested, endNested := e.BatchWork(wctx)
		if nested != wctx {
			t.Error("work nested in batch work got a context of its own, want the outer one's")
		}
		for range 40 {
			time.Sleep(10 * time.Millisecond)
			engine.Yield(nested)
		}
		endNested()
		end()
		d := time.Since(began)
		// The turn is back: the lane's one turn goes to a batch job.
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
		e.Notify()
		<-took
		return d
	})
}
