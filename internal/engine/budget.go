package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBatchPieces is Config.BatchPieces' default: while interactive
// work is in flight, one piece of batch-lane work runs at a time.
const DefaultBatchPieces = 1

// batchBudget is the batch lane's CPU budget within one process: while
// any interactive work is in flight (a leased interactive job's handler,
// an interactive parent's aggregation, an interactive job's publication),
// at most limit pieces of batch-lane work (a batch parent's aggregation,
// a stretch of the periodic sweep, a batch job's publication) run at
// once; with none in flight batch work runs as wide as it is given (the
// aggregation groups, the publication pool), so a sweep alone keeps its
// full speed. A batch job's handler is not held here: waiting for a turn
// it would hold a worker slot, and with the slots full of waiting batch
// handlers no interactive job could be leased (the yield gate, when on,
// holds handlers before they start, and Yield between their pieces).
//
// Unlike the yield gate it holds nothing for a fixed time and never holds
// every batch piece: on a machine with few cores the interactive tail
// under a sweep is interactive goroutines waiting for a CPU that dozens of
// runnable batch goroutines share (docs/benchmarks.md, "Session 11
// (s11h5)"); one batch piece at a time leaves a core to the interactive
// work and still moves the batch lane. No starvation: a piece that finds
// fewer than limit running goes at once, and every running piece ends, so
// under a continuous interactive stream the batch lane still runs limit
// pieces at a time.
//
// Only this process's work is seen, as with the yield gate.
type batchBudget struct {
	limit int // <= 0: off

	mu sync.Mutex
	// interactive: interactive work is in flight (the engine's inFlight
	// tells, as it tells the yield gate).
	interactive bool
	running     int // batch pieces holding a turn
	waiting     int // batch pieces waiting for one
	// turn is closed (and replaced) when a held piece may go: a batch
	// piece ended, or interactive work fell to none.
	turn chan struct{}

	passed, held atomic.Int64
	heldNanos    atomic.Int64
}

func newBatchBudget(limit int) *batchBudget {
	return &batchBudget{limit: limit, turn: make(chan struct{})}
}

// wakeLocked releases every piece waiting for a turn to look again.
func (b *batchBudget) wakeLocked() {
	close(b.turn)
	b.turn = make(chan struct{})
}

// listener is the budget as the engine's inFlight counter's listener;
// nil when the budget is off.
func (b *batchBudget) listener() inFlightListener {
	if b.limit <= 0 {
		return nil
	}
	return b
}

func (b *batchBudget) interactiveBusy() {
	b.mu.Lock()
	b.interactive = true
	b.mu.Unlock()
}

// interactiveIdle lets every held piece go: with no interactive work in
// flight the budget does not bound the batch lane.
func (b *batchBudget) interactiveIdle() {
	b.mu.Lock()
	b.interactive = false
	b.wakeLocked()
	b.mu.Unlock()
}

// acquire takes a turn for one piece of batch-lane work, waiting while
// interactive work is in flight and limit pieces hold a turn; the
// returned func gives it back (call it exactly once, when the piece ends).
// A ctx that ends while waiting takes the turn anyway: the piece is about
// to find its context done and return.
func (b *batchBudget) acquire(ctx context.Context) (release func()) {
	if b.limit <= 0 {
		return noLeave
	}
	var start time.Time
	for {
		b.mu.Lock()
		if !b.interactive || b.running < b.limit || ctx.Err() != nil {
			b.running++
			if !start.IsZero() {
				b.waiting--
			}
			b.mu.Unlock()
			break
		}
		turn := b.turn
		if start.IsZero() {
			start = time.Now()
			b.waiting++
		}
		b.mu.Unlock()
		select {
		case <-turn:
		case <-ctx.Done():
		}
	}
	if start.IsZero() {
		b.passed.Add(1)
	} else {
		b.held.Add(1)
		b.heldNanos.Add(int64(time.Since(start)))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.running--
			b.wakeLocked()
			b.mu.Unlock()
		})
	}
}

// BudgetCounts are an engine's batch-budget totals since it was made.
type BudgetCounts struct {
	// Passed counts pieces of batch-lane work that found a turn free (or
	// no interactive work in flight); Held those that waited for one.
	Passed, Held int64
	// HeldSeconds is the time batch-lane work waited for a turn, summed
	// over its pieces.
	HeldSeconds float64
}

// BudgetCounts returns the engine's batch-budget totals. It is safe for
// concurrent use.
func (e *Engine) BudgetCounts() BudgetCounts {
	b := e.budget
	return BudgetCounts{Passed: b.passed.Load(), Held: b.held.Load(), HeldSeconds: time.Duration(b.heldNanos.Load()).Seconds()}
}

// interactiveWork marks one piece of interactive work in flight until
// the returned func is called: the one count the yield gate and the batch
// budget both listen to (inflight.go).
func (e *Engine) interactiveWork() (leave func()) { return e.interactive.enter() }

// batchPiece starts one piece of batch-lane work: it waits at the yield
// gate (when on) and takes a turn of the batch budget; the returned func
// ends the piece. Work nested in a piece that holds a turn (a publication
// inline in a sweep pass) is part of that piece: it takes no second turn,
// which with a budget of one would never come.
func (e *Engine) batchPiece(ctx context.Context) (end func()) {
	if ctx.Value(turnHeldKey{}) != nil {
		return noLeave
	}
	e.yield.wait(ctx)
	return e.budget.acquire(ctx)
}

type turnHeldKey struct{}

// withTurnHeld marks ctx as a piece's that holds a budget turn for all
// its work (batchPiece).
func withTurnHeld(ctx context.Context) context.Context {
	return context.WithValue(ctx, turnHeldKey{}, true)
}
