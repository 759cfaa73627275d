package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBatchYieldMax is the yield gate's bound by default
// (Config.BatchYieldMax zero; negative turns the gate off). It is a few times an interactive
// review's own work on an idle machine (about 15 ms from submit to
// published), so a hold normally ends when the interactive work does, and
// small beside what batch work may take anyway (a provider batch runs for
// minutes to a day), so the bound costs the batch lane little even under a
// continuous interactive stream.
const DefaultBatchYieldMax = 100 * time.Millisecond

// batchYieldMaxDefault is Config.BatchYieldMax when it is zero: off. The
// pacer alone spreads the batch lane's computing uniformly over wall time,
// so a review in flight meets it about as often as at random (30–37 % of
// the reviews' in-flight time in `bench batch-isolation`'s sweep); with
// the gate, held after the turn and credited to the pacer's rest, a
// computing piece no longer starts while a review is in flight and the
// lane keeps its share in the gaps (25 %: docs/benchmarks.md, "Session 35
// (s35h4)"). But the quiet A/B of the merged tree read the same in-sweep
// p99 with and without it (13.1 / 14.3 ms against 13.1 / 10.7;
// "Session 35: the merge (lead)"), and under a continuous interactive
// stream it slows the lane to one piece per bound, so it stays opt-in:
// turning it on by default is this one line (DefaultBatchYieldMax).
const batchYieldMaxDefault time.Duration = 0

// yieldGate is the engine's promise that batch work yields to interactive
// work within one process: interactive work (an interactive job inserted
// through the engine's writer and not yet leased, queued.go; a leased
// interactive job's handler, an interactive parent's aggregation, an
// interactive job's publication) is counted in flight by the engine's
// inFlight, which tells the gate when it rises from none and falls back;
// batch-lane work that computes (a computing kind's batch handler, a
// batch parent's aggregation or sweep step, a batch job's publication)
// waits at it while any interactive work is in flight, for at most
// maxHold. The store's single writer already serves interactive
// writes first; the gate does the same for the CPU the batch lane's
// goroutines would take on a small machine, where the writer's order
// alone left an interactive review's handler, aggregation and
// publication competing with a sweep's.
//
// The bound is the starvation guard: a continuous interactive stream delays
// each piece of batch work by at most maxHold, so the batch lane always
// progresses (each of its goroutines at least one piece per maxHold). It is
// per piece, not a share of time, because batch pieces are short and
// their goroutines many: they are held together and released together.
//
// Only this process's work is seen; another node's interactive work is not
// (the store's lanes and admission's batch share cover the region).
type yieldGate struct {
	maxHold time.Duration

	mu   sync.Mutex
	busy bool // interactive work is in flight (inFlight tells)
	// idle, made by the first piece to wait while busy (idleChan), is
	// closed when interactive work falls to none; nil while no piece
	// waits, so an interactive rise and fall with no batch work held
	// allocate nothing (the gate is on by default).
	idle chan struct{}

	// Counts for YieldCounts.
	passed, held, bounded atomic.Int64
	heldNanos             atomic.Int64
}

func newYieldGate(maxHold time.Duration) *yieldGate {
	return &yieldGate{maxHold: maxHold}
}

// listener is the gate as the engine's inFlight counter's listener; nil
// when the gate is off, so an interactive job pays nothing for it.
func (g *yieldGate) listener() inFlightListener {
	if g.maxHold <= 0 {
		return nil
	}
	return g
}

func (g *yieldGate) interactiveBusy() {
	g.mu.Lock()
	g.busy = true
	g.mu.Unlock()
}

func (g *yieldGate) interactiveIdle() {
	g.mu.Lock()
	g.busy = false
	if g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}

// idleChanLocked is the channel closed when interactive work next falls
// to none, made on first use while busy; g.mu must be held.
func (g *yieldGate) idleChanLocked() chan struct{} {
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	return g.idle
}

// idleChan is idleChanLocked under g.mu (tests).
func (g *yieldGate) idleChan() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.idleChanLocked()
}

// wait holds a piece of batch-lane work while interactive work is in
// flight: it returns when none is, when maxHold has passed, or when ctx
// ends, with how long it held the piece. A maxHold of zero or less means
// the gate is off.
func (g *yieldGate) wait(ctx context.Context) (held time.Duration) {
	if g.maxHold <= 0 {
		return 0
	}
	g.mu.Lock()
	busy := g.busy
	var idle chan struct{}
	if busy {
		idle = g.idleChanLocked()
	}
	g.mu.Unlock()
	if !busy {
		g.passed.Add(1)
		return 0
	}
	start := time.Now()
	t := time.NewTimer(g.maxHold)
	defer t.Stop()
	select {
	case <-idle:
		g.held.Add(1)
	case <-t.C:
		g.bounded.Add(1)
	case <-ctx.Done():
		g.held.Add(1)
	}
	held = time.Since(start)
	g.heldNanos.Add(int64(held))
	return held
}

// YieldCounts are an engine's yield-gate totals since it was made.
type YieldCounts struct {
	// Passed counts pieces of batch-lane work that found no interactive
	// work in flight; Held those that waited until there was none (or
	// their context ended); Bounded those released by the bound
	// (Config.BatchYieldMax) while interactive work was still in flight.
	Passed, Held, Bounded int64
	// HeldSeconds is the time batch-lane work spent waiting at the gate,
	// summed over its pieces.
	HeldSeconds float64
}

// YieldCounts returns the engine's yield-gate totals, as the metrics read
// them at scrape time (metrics.YieldSource). It is safe for
// concurrent use.
func (e *Engine) YieldCounts() YieldCounts {
	g := e.yield
	return YieldCounts{Passed: g.passed.Load(), Held: g.held.Load(), Bounded: g.bounded.Load(),
		HeldSeconds: time.Duration(g.heldNanos.Load()).Seconds()}
}

type yieldKey struct{}

// Yield holds a batch-lane handler of a computing kind (Kind.Computes)
// between two pieces of its work while interactive work is in flight in
// its engine, for at most the engine's BatchYieldMax; it returns at once
// for any other context (an interactive handler's, a waiting kind's such
// as a webhook delivery, or a caller outside the engine). A batch-lane handler whose
// one attempt does much (settles a provider batch's thousand results, a
// group of writes at a time) calls it between the pieces, so interactive
// work waits for one piece, not the whole attempt: the engine itself only
// holds the attempt before it starts.
//
// With the batch pacer on (Config.BatchCPUShare) and interactive work
// about, Yield rests the handler for its share first (pacer.go).
//
// With the CPU governor on (Config.BatchCPUs), Yield is also where the
// handler's turn goes to the other batch-lane pieces waiting for one (an
// aggregation, a sweep stretch, a publication) before it goes on: the
// handler waits for a turn again, keeping its worker slot and its lease
// (heartbeats go on), so a long attempt does not hold the lane's turns.
func Yield(ctx context.Context) {
	if y, ok := ctx.Value(yieldKey{}).(handlerYield); ok {
		if y.turn != nil {
			y.turn.pause()
			defer y.turn.resume()
		}
		if y.turn != nil {
			y.turn.rest(ctx)
			y.turn.pass(ctx)
		}
		// Last, with the turn back: the pacer's rest and the other
		// pieces' turns may end while a review is in flight, and the
		// handler's next piece should not start beside it either.
		if y.gate != nil {
			held := y.gate.wait(ctx)
			if y.turn != nil {
				y.turn.b.credit(held)
			}
		}
	}
}

// handlerYield is what Yield finds in a batch-lane handler's context.
type handlerYield struct {
	gate *yieldGate   // nil: the handler's kind waits, never held (batchHandlerYield)
	turn *handlerTurn // nil: the handler holds no governor turn
}

// BatchWork makes ctx a piece of the batch lane's computing work done
// outside a handler, such as a batch manifest's intake in an API
// request's goroutine: it takes a turn of the CPU governor
// (Config.BatchCPUs) as a computing batch handler does when leased, and
// returns a context in which Yield works as in that handler's (the batch
// pacer rests it there while interactive work is about, and the turn
// passes to waiting batch pieces). Call end exactly once when the work is
// done; it gives the turn back.
//
// The work's caller waits for the turn like any batch piece: behind the
// lane's running pieces, never behind interactive work, which takes no
// turn. A ctx that already holds a turn or is a batch handler's (work
// nested in batch work) is returned as it is, and so is any ctx when the
// governor is off or the engine has no computing kind (its handlers take
// no turn either); Yield then does what it did in ctx.
func (e *Engine) BatchWork(ctx context.Context) (_ context.Context, end func()) {
	if ctx.Value(turnHeldKey{}) != nil || ctx.Value(yieldKey{}) != nil || e.budget.width <= 0 || len(e.computing) == 0 {
		return ctx, noLeave
	}
	e.budget.wait(ctx, pieceCPU)
	e.budget.credit(e.yield.wait(ctx)) // with the turn held, as batchPiece
	ht := newHandlerTurn(e.budget)
	ht.begin()
	return context.WithValue(withTurnHeld(ctx), yieldKey{}, handlerYield{gate: e.yield, turn: ht}), ht.end
}
