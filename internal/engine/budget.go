package engine

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

// DefaultBatchPieces is Config.BatchPieces' default: while interactive
// work is in flight, one piece of batch-lane work runs at a time.
const DefaultBatchPieces = 1

// DefaultBatchCPUs is Config.BatchCPUs' default for a process with procs
// CPUs (GOMAXPROCS): half of them, at least one. Half, not all but one:
// each running piece of batch-lane work drives about as much again in
// goroutines it does not own (the SQLite writer running its writes, the
// garbage collector), so one batch piece on a 2-core machine already
// keeps a core busy, and a second would leave interactive work none
// (docs/benchmarks.md, "Session 15 (s15h3)").
func DefaultBatchCPUs(procs int) int { return max(1, procs/2) }

// batchBudget is the batch lane's CPU governor within one process. Two
// bounds on the pieces of batch-lane work running at once (a batch job's
// handler, a batch parent's aggregation, a stretch of the periodic sweep,
// a batch job's publication):
//
//   - width (Config.BatchCPUs), at all times: the batch lane never has
//     more than width goroutines doing its work, so on a small machine a
//     sweep leaves a core to interactive work that arrives while no
//     interactive work was in flight (before it, the batch lane took both
//     cores whenever none was, and an interactive review that arrived then
//     waited for a CPU at every stage: docs/benchmarks.md, "Session 15
//     (s15h3)");
//   - limit (Config.BatchPieces), while interactive work is in flight in
//     this engine (the engine's inFlight tells).
//
// Only the handlers of computing kinds (Kind.Computes) take turns; a
// waiting kind's batch jobs (webhook deliveries) are leased and run
// without one, bounded by their keys and the worker slots. A computing
// batch job's handler takes its turn when it is leased, not when it
// starts: the fetch loop asks the store for at most as many computing
// batch jobs as it has free turns (store.LeaseParams.BatchMax and
// BatchMaxKinds), so a batch job never
// waits for a turn holding a worker slot and a lease (a held handler did,
// and with the slots full of them no interactive job was leased:
// docs/benchmarks.md, "Session 11 (s11h5)"); heartbeats and lease expiry
// of running batch jobs are untouched. Other pieces wait in acquire.
//
// No starvation: a piece that finds a turn free goes at once and every
// running piece ends, so under a continuous interactive stream the batch
// lane still runs min(width, limit) pieces at a time. Between the leases
// and the other pieces the turns alternate: a turn given back while a
// lease found none free goes to the next lease (the fetch loop is woken
// for it) unless the last such turn did and other pieces wait, so neither
// batch handlers nor aggregations, sweeps and publications hold the lane.
//
// Only this process's work is seen, as with the yield gate.
type batchBudget struct {
	limit int // while interactive work is in flight; <= 0: no bound then
	width int // at all times; <= 0: no bound, and handlers take no turn

	// notify wakes the fetch loop for a turn kept for its lease.
	notify func()

	// interactive is the engine's count of interactive work in flight
	// (inflight.go), read where the limit applies; it wakes the pieces
	// waiting (interactiveIdle) when it falls to none.
	interactive *inFlight
	// sleepers counts pieces in wait, from before they first look at the
	// count: a fall to none wakes them only when there are any, so an
	// interactive job takes the budget's lock only when batch work waits.
	sleepers atomic.Int64

	mu      sync.Mutex
	running int // turns held (by pieces, or kept for the next lease)
	// ioRunning counts publications holding a turn: bounded by limit
	// while interactive work is in flight, never by width (see
	// acquireIO).
	ioRunning int
	waiting   int // pieces waiting for one in acquire
	// handlersWaiting counts batch handlers waiting in Yield for their
	// turn back: no batch job is leased meanwhile, so at most width
	// handlers ever hold worker slots.
	handlersWaiting int
	// capped: a lease since the last turn given back found fewer turns
	// than worker slots; kept is a turn held for the next lease;
	// lastKept: the last turn given back while capped was kept for it.
	capped, lastKept bool
	kept             int
	// handoff counts turns a handler passed at Yield, each for the next
	// piece that takes one in acquire (not for the handler itself).
	handoff int
	// turn is closed (and replaced) when a held piece may go: a batch
	// piece ended, or interactive work fell to none.
	turn chan struct{}

	// pacer, when on (Config.BatchCPUShare), rests the computing turns
	// after each piece while interactive work is about (pacer.go): no
	// such turn is taken before restUntil; restTimer wakes the pieces
	// waiting, and the fetch loop, when it passes.
	pacer     *batchPacer
	restUntil time.Time
	restTimer *time.Timer
	// heldCredit is time a computing piece holding a turn was held at the
	// yield gate since the pacer's last rest (credit): the lane computed
	// nothing meanwhile, so the next rest is that much shorter, and the
	// lane still computes about its share of wall time while interactive
	// work is about, in the gaps between the reviews in flight.
	heldCredit time.Duration

	// overlap, when set, times the computing pieces against interactive
	// work in flight (overlap.go).
	overlap *overlap

	passed, held atomic.Int64
	heldNanos    atomic.Int64
	// rests counts the pacer's rests that moved restUntil later,
	// restNanos the wall time they added (the lane's rest, once
	// however many pieces waited through it).
	rests, restNanos atomic.Int64
	// chargedNanos is what the pacer was charged (paceLocked): computing
	// pieces by their pieceClock, writes by the writer's time;
	// threadCPUNanos what of it pieces on idle threads were charged by
	// their thread's CPU clock, threadWallNanos the wall time those
	// pieces spanned (what wall time would have charged them).
	chargedNanos, threadCPUNanos, threadWallNanos atomic.Int64
	// leasedTurns counts batch jobs leased with a turn; cappedLeases the
	// leases that asked for fewer batch jobs than worker slots for want of
	// turns.
	leasedTurns, cappedLeases atomic.Int64
}

// newBatchBudget returns the budget over the engine's count of
// interactive work c, which wakes it when the in-flight bound is on.
func newBatchBudget(limit, width int, pacer *batchPacer, c *inFlight) *batchBudget {
	b := &batchBudget{limit: limit, width: width, pacer: pacer, interactive: c, turn: make(chan struct{}), notify: func() {}}
	if limit > 0 {
		c.budget = b
	}
	return b
}

// restingLocked reports whether the pacer rests the computing turns now.
func (b *batchBudget) restingLocked() bool {
	return b.pacer != nil && !b.restUntil.IsZero() && time.Now().Before(b.restUntil)
}

// paceLocked is the pacer's word on a computing piece that just ran for
// d: while interactive work is about, no computing turn is taken until
// its rest has passed (restTimer then wakes the lane: rested).
func (b *batchBudget) paceLocked(d time.Duration) {
	if b.pacer == nil {
		return
	}
	if d > 0 {
		b.chargedNanos.Add(int64(d))
	}
	now := time.Now()
	r := b.pacer.rest(d, now) - b.heldCredit
	b.heldCredit = 0
	until := now.Add(r)
	if r <= 0 || !until.After(b.restUntil) {
		return
	}
	from := now
	if b.restUntil.After(now) {
		from = b.restUntil
	}
	b.rests.Add(1)
	b.restNanos.Add(int64(until.Sub(from)))
	b.restUntil = until
	if b.restTimer == nil {
		b.restTimer = time.AfterFunc(r, b.rested)
	} else {
		b.restTimer.Reset(r)
	}
}

// credit counts d held at the yield gate toward the pacer's next rest
// (heldCredit); nothing while the pacer is off or for no hold.
func (b *batchBudget) credit(d time.Duration) {
	if b.pacer == nil || d <= 0 {
		return
	}
	b.mu.Lock()
	b.heldCredit += d
	b.mu.Unlock()
}

// rested ends a rest of the pacer: a turn goes to the next lease if one
// found none free meanwhile (as when a turn is given back), and the
// pieces waiting look again.
func (b *batchBudget) rested() {
	b.mu.Lock()
	if d := time.Until(b.restUntil); d > 0 { // moved later meanwhile
		b.restTimer.Reset(d)
		b.mu.Unlock()
		return
	}
	notify := b.keepLocked()
	b.wakeLocked()
	b.mu.Unlock()
	if notify {
		b.notify()
	}
}

// wakeLocked releases every piece waiting for a turn to look again.
func (b *batchBudget) wakeLocked() {
	close(b.turn)
	b.turn = make(chan struct{})
}

// interactiveIdle lets held pieces look again when interactive work in
// flight fell to none (inFlight calls it): then only the width bounds the
// batch lane. With no piece in wait it does nothing. A piece counts
// itself a sleeper before it looks at the count and the count falls
// before this looks at the sleepers, so either the piece sees the count
// at zero or this sees the piece (Go's atomics are sequentially
// consistent) and wakes it under the lock it waits under.
func (b *batchBudget) interactiveIdle() {
	if b.sleepers.Load() == 0 {
		return
	}
	b.mu.Lock()
	b.wakeLocked()
	b.mu.Unlock()
}

// freeLocked is how many more turns of kind may be held now.
func (b *batchBudget) freeLocked(kind pieceKind) int {
	n := math.MaxInt
	if b.width > 0 && kind != pieceIO {
		if b.restingLocked() {
			return 0
		}
		n = b.width - b.running
	}
	if b.limit > 0 && b.interactive.busy() {
		n = min(n, b.limit-b.running-b.ioRunning)
	}
	return max(0, n)
}

// pieceKind is what a piece waiting for a turn is.
type pieceKind int

const (
	pieceCPU     pieceKind = iota // an aggregation, a sweep stretch
	pieceIO                       // a publication: not bounded by width
	pieceHandler                  // a batch handler taking its turn back after Yield
)

// giveBackLocked ends n turns; one may be kept for the next lease (see
// the type's comment), for which notify must then be called (unlocked).
func (b *batchBudget) giveBackLocked(n int) (notify bool) {
	if n <= 0 {
		return false
	}
	b.running -= n
	notify = b.keepLocked()
	b.wakeLocked()
	return notify
}

// keepLocked keeps a free turn for the next lease when the last one found
// none (see the type's comment), unless the last such turn was kept and
// other pieces wait; notify must then be called (unlocked).
func (b *batchBudget) keepLocked() (notify bool) {
	if b.capped && b.handlersWaiting == 0 && (b.waiting == 0 || !b.lastKept) && b.freeLocked(pieceCPU) > 0 {
		b.capped, b.lastKept = false, true
		b.kept++
		b.running++
		return true
	} else if b.capped {
		b.lastKept = false
	}
	return false
}

// giveBack ends n turns.
func (b *batchBudget) giveBack(n int) { b.giveBackAfter(n, 0) }

// giveBackAfter ends n turns of a computing piece that ran for d, which
// the pacer paces by (paceLocked).
func (b *batchBudget) giveBackAfter(n int, d time.Duration) {
	b.mu.Lock()
	b.paceLocked(d)
	notify := b.giveBackLocked(n)
	b.mu.Unlock()
	if notify {
		b.notify()
	}
}

// turnFree reports whether a lease now would get a turn (take), without
// taking it. When it would not, a batch job of a computing kind could not
// be leased (BatchMax -1), and an idle poll that found only such jobs
// ready calls wanted instead of leasing.
func (b *batchBudget) turnFree() bool {
	if b.width <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kept > 0 || b.handlersWaiting == 0 && b.waiting == 0 && b.freeLocked(pieceCPU) > 0
}

// wanted records what a lease finding no turn free records (take): batch
// jobs may be ready, so the next turn given back is kept for a lease and
// wakes the fetch loop. An idle poll calls it when its read found only
// batch jobs of computing kinds ready and no turn free: the lease it
// used to make then took nothing, a write through SQLite's one writer
// (docs/benchmarks.md, "Session 30 (s30h2)").
func (b *batchBudget) wanted() {
	b.mu.Lock()
	b.capped = true
	b.mu.Unlock()
}

// take reserves turns for a lease of up to n jobs: it returns the turns
// taken and the lease's store.LeaseParams.BatchMax (0: no bound, when the
// width is off; -1: no batch job). Call leased with what the lease
// returned; each batch job leased keeps one turn until its handler
// returns (handlerTurn.end).
func (b *batchBudget) take(n int) (turns, batchMax int) {
	if b.width <= 0 || n <= 0 {
		return 0, 0
	}
	b.mu.Lock()
	turns = min(n, b.kept)
	b.kept -= turns
	if b.handlersWaiting == 0 && b.waiting == 0 {
		more := min(n-turns, b.freeLocked(pieceCPU))
		turns += more
		b.running += more
	}
	if turns == 0 {
		// Whether batch jobs are ready is not known: keep the next turn
		// given back for a lease, which finds out.
		b.capped = true
		b.cappedLeases.Add(1)
	}
	b.mu.Unlock()
	if turns == 0 {
		return 0, -1
	}
	return turns, turns
}

// leased settles a lease's turns: batch of them were used by batch jobs
// leased; the rest are given back. A lease that used every turn it had,
// fewer than the n jobs it asked for, may have left batch jobs ready: the
// next turn given back is kept for a lease. One that left turns unused
// found no more batch work to take.
func (b *batchBudget) leased(turns, batch, n int) {
	if turns <= 0 {
		return
	}
	b.leasedTurns.Add(int64(batch))
	b.mu.Lock()
	if batch == turns && turns < n {
		b.capped = true
		b.cappedLeases.Add(1)
	} else if batch < turns {
		b.capped = false
	}
	notify := b.giveBackLocked(turns - batch)
	b.mu.Unlock()
	if notify {
		b.notify()
	}
}

// noLeave is the end of a piece that took no turn (a policy that is off).
func noLeave() {}

// acquire takes a turn for one piece of batch-lane work, waiting while
// none is free, and then waits at gate with the turn held (batchPiece);
// the returned func gives it back (call it exactly once, when the piece
// ends). A ctx that ends while waiting takes the turn anyway: the piece
// is about to find its context done and return.
func (b *batchBudget) acquire(ctx context.Context, gate *yieldGate) (release func()) {
	if !b.takeTurn(ctx, gate) {
		return noLeave
	}
	return b.releaser(nil)
}

// takeTurn is acquire's wait: false when the budget is off (the piece
// only waited at gate) and there is no turn to give back.
func (b *batchBudget) takeTurn(ctx context.Context, gate *yieldGate) bool {
	if b.limit <= 0 && b.width <= 0 {
		gate.wait(ctx)
		return false
	}
	b.wait(ctx, pieceCPU)
	b.credit(gate.wait(ctx))
	return true
}

// acquireIO is acquire for a batch job's publication: bounded by limit
// while interactive work is in flight, as before the governor, but not by
// the governor's width. A Publisher mostly waits for an external system
// (a GitHub call can take seconds), and the publication pool already
// bounds how many run (Config.Publishers); holding one of the width's
// turns it would stop every other piece of the batch lane meanwhile.
func (b *batchBudget) acquireIO(ctx context.Context) (release func()) {
	if b.limit <= 0 {
		return noLeave
	}
	b.wait(ctx, pieceIO)
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.ioRunning--
			b.wakeLocked()
			b.mu.Unlock()
		})
	}
}

// wait takes a turn of kind, waiting while none is free, and counts it.
// A handler taking its turn back after passing it waits until the turn it
// passed was taken.
func (b *batchBudget) wait(ctx context.Context, kind pieceKind) {
	handler := kind == pieceHandler
	var start time.Time
	b.sleepers.Add(1) // before the first look at the count (interactiveIdle)
	defer b.sleepers.Add(-1)
	for {
		b.mu.Lock()
		if kind == pieceCPU && b.handoff > 0 && !b.restingLocked() {
			b.handoff-- // the passed turn: already counted in running
			if !start.IsZero() {
				b.waiting--
			}
			b.mu.Unlock()
			break
		}
		if (b.freeLocked(kind) > 0 && (!handler || b.handoff == 0)) || ctx.Err() != nil {
			if kind == pieceIO {
				b.ioRunning++
			} else {
				b.running++
			}
			if !start.IsZero() && !handler {
				b.waiting--
			}
			b.mu.Unlock()
			break
		}
		turn := b.turn
		if start.IsZero() {
			start = time.Now()
			if !handler {
				b.waiting++
			}
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
}

// releaser returns the func that gives one held turn back, once, and
// has the pacer rest the lane after the piece it ended. th, when not nil,
// is the idle thread the piece runs on (threads.go): the func leaves it
// first, and the pacer charges the piece its CPU time (pieceClock).
func (b *batchBudget) releaser(th *idleThread) func() {
	var once sync.Once
	if b.pacer == nil && b.overlap == nil { // no clock read per piece for nothing
		return func() { once.Do(func() { th.leave(); b.giveBack(1) }) }
	}
	c := pieceClock{th: th}
	c.start(time.Now())
	b.overlap.batchStart()
	return func() {
		once.Do(func() {
			th.leave() // reads the thread's clock a last time
			b.overlap.batchEnd()
			b.giveBackAfter(1, b.charged(&c, time.Now()))
		})
	}
}

// charged is what the pacer charges the piece c timed, ended at now
// (pieceClock), counted for BudgetCounts; zero while the pacer is off.
func (b *batchBudget) charged(c *pieceClock, now time.Time) time.Duration {
	if b.pacer == nil {
		return 0
	}
	d, wall, thread := c.ran(now)
	if thread {
		b.threadCPUNanos.Add(int64(d))
		b.threadWallNanos.Add(int64(wall))
	}
	return d
}

// handlerTurn is a leased batch job's turn: it ends with its handler
// (end), and Yield passes it to waiting pieces between the handler's
// pieces of work (pass).
type handlerTurn struct {
	b *batchBudget

	mu sync.Mutex
	// passed: the turn is given away at Yield and not yet taken back;
	// ended: end was called (the handler returned or was abandoned).
	passed, ended bool
	// clock times the handler's current piece from its start (its lease,
	// or its last Yield): the pacer paces it by its wall time, or its
	// idle thread's CPU time (onThread); unread while the pacer is off.
	clock pieceClock
	// computing: the handler is computing now, for the overlap measure
	// (begin; between pause and resume, in Yield, it is not); paused: it
	// was when Yield began.
	computing, paused bool
}

func newHandlerTurn(b *batchBudget) *handlerTurn {
	h := &handlerTurn{b: b}
	if b.pacer != nil {
		h.clock.start(time.Now())
	}
	return h
}

// begin marks the handler computing from now on, for the overlap measure
// (Engine.OverlapCounts): a computing kind's handler once it passed the
// yield gate, or BatchWork's caller.
func (h *handlerTurn) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended && !h.computing {
		h.computing = true
		h.b.overlap.batchStart()
	}
	if h.b.pacer != nil {
		h.clock.start(time.Now()) // a hold at the gate before it was no computing
	}
}

// pause marks the computing handler (begin) not computing while it is in
// Yield: waiting at the gate, resting for the pacer or for its turn back.
func (h *handlerTurn) pause() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.computing {
		h.computing, h.paused = false, true
		h.b.overlap.batchEnd()
	}
}

// resume undoes pause when the handler goes on after Yield.
func (h *handlerTurn) resume() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused && !h.ended {
		h.computing, h.paused = true, false
		h.b.overlap.batchStart()
	}
	if h.b.pacer != nil && !h.ended {
		h.clock.start(time.Now()) // nor was a hold at the gate at the end of Yield
	}
}

// onThread has the pacer charge the handler's pieces from now on by the
// CPU time of th, the idle thread it computes on until it returns
// (threads.go; pieceClock). Call it on the handler's goroutine, after
// begin.
func (h *handlerTurn) onThread(th *idleThread) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock.th = th
	if h.b.pacer != nil && !h.ended {
		h.clock.start(time.Now())
	}
}

// ran is what the pacer charges the handler's current piece so far
// (pieceClock); h.mu held.
func (h *handlerTurn) ran() time.Duration {
	return h.b.charged(&h.clock, time.Now())
}

// end gives the handler's turn back, once; a turn passed at Yield and not
// yet taken back is not the handler's to give (pass gives back what it
// takes after end).
func (h *handlerTurn) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.ended = true
	if h.computing {
		h.computing = false
		h.b.overlap.batchEnd()
	}
	if !h.passed {
		h.b.giveBackAfter(1, h.ran())
	}
}

// rest has the pacer (Config.BatchCPUShare) pace a handler's piece that
// just ended at Yield: while interactive work is about, the handler
// waits out the lane's rest before its next piece, keeping its turn
// (no other computing piece may start meanwhile anyway).
func (h *handlerTurn) rest(ctx context.Context) {
	b := h.b
	if b.pacer == nil {
		return
	}
	h.mu.Lock()
	if h.ended || h.passed {
		h.mu.Unlock()
		return
	}
	now := time.Now()
	d := b.charged(&h.clock, now)
	b.mu.Lock()
	b.paceLocked(d)
	until := b.restUntil
	b.mu.Unlock()
	h.mu.Unlock()
	if d := until.Sub(now); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	h.mu.Lock()
	h.clock.start(time.Now())
	h.mu.Unlock()
}

// pass lets the pieces waiting for a turn go before the rest of a
// handler's work: it gives the handler's turn back when any wait, and
// waits for one again. The turn is never kept for a lease meanwhile (the
// handler still holds its worker slot).
//
// An ended handler (abandoned past its maximum run time, or cancelled)
// passes nothing: its turn is already back, and one taken again would
// never be.
func (h *handlerTurn) pass(ctx context.Context) {
	b := h.b
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended || ctx.Err() != nil {
		return
	}
	b.mu.Lock()
	if b.waiting == 0 {
		b.mu.Unlock()
		return
	}
	b.handlersWaiting++
	b.handoff++ // the turn goes to a waiting piece, running unchanged
	b.wakeLocked()
	b.mu.Unlock()
	h.passed = true
	h.mu.Unlock() // end may come meanwhile
	b.wait(ctx, pieceHandler)
	h.mu.Lock()
	h.passed = false
	if b.pacer != nil {
		h.clock.start(time.Now()) // its wait for the turn was no computing
	}
	b.mu.Lock()
	b.handlersWaiting--
	b.mu.Unlock()
	if h.ended {
		b.giveBack(1) // ended while waiting: the turn just taken is nobody's
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
	// Leased counts batch jobs leased with a turn; Capped the leases that
	// found fewer turns free than worker slots (they asked the store for
	// fewer batch jobs, or none).
	Leased, Capped int64
	// Running and Waiting are the turns held and the pieces waiting for
	// one, now.
	Running, Waiting int
	// Rests counts the pacer's rests of the computing turns
	// (Config.BatchCPUShare) and RestSeconds the wall time the lane rested
	// in all (overlapping rests counted once).
	Rests       int64
	RestSeconds float64
	// ChargedSeconds is what the pacer was charged in all: each computing
	// piece's wall time, or its idle thread's CPU time (below), and the
	// writer's time of the batch-lane writes charged to it.
	// ThreadCPUSeconds is the part charged by idle threads' CPU clocks
	// (Config.BatchThreadPolicy "idle", Linux), ThreadWallSeconds the
	// wall time those pieces spanned: what wall time would have charged.
	ChargedSeconds, ThreadCPUSeconds, ThreadWallSeconds float64
}

// BudgetCounts returns the engine's batch-budget totals. It is safe for
// concurrent use.
func (e *Engine) BudgetCounts() BudgetCounts {
	b := e.budget
	b.mu.Lock()
	running, waiting := b.running, b.waiting+b.handlersWaiting
	b.mu.Unlock()
	return BudgetCounts{Passed: b.passed.Load(), Held: b.held.Load(), HeldSeconds: time.Duration(b.heldNanos.Load()).Seconds(),
		Leased: b.leasedTurns.Load(), Capped: b.cappedLeases.Load(), Running: running, Waiting: waiting,
		Rests: b.rests.Load(), RestSeconds: time.Duration(b.restNanos.Load()).Seconds(),
		ChargedSeconds: time.Duration(b.chargedNanos.Load()).Seconds(), ThreadCPUSeconds: time.Duration(b.threadCPUNanos.Load()).Seconds(),
		ThreadWallSeconds: time.Duration(b.threadWallNanos.Load()).Seconds()}
}

// batchPiece starts one piece of batch-lane work: it takes a turn of the
// batch budget and then waits at the yield gate (when on); the returned
// func ends the piece. Work nested in a piece that holds a turn (a
// publication inline in a sweep pass) is part of that piece: it takes no
// second turn, which with a budget of one would never come.
//
// The gate comes after the turn, not before: a turn is taken only once
// the pacer's rest has passed (pacer.go), which may end while a review is
// in flight, so a gate passed before it would let the piece compute
// beside the review anyway; and with the governor's one turn only the
// piece holding it waits at the gate, so the gate releases one piece, not
// the herd of session 18 (docs/benchmarks.md, "Session 35 (s35h4)").
func (e *Engine) batchPiece(ctx context.Context) (end func()) {
	if ctx.Value(turnHeldKey{}) != nil {
		return noLeave
	}
	if !e.threads.pieces {
		return e.budget.acquire(ctx, e.yield)
	}
	// On an idle thread while the turn is held (threads.go): these
	// goroutines live on, so only where their thread can be restored.
	// The pacer charges the piece its thread's CPU time (pieceClock).
	if !e.budget.takeTurn(ctx, e.yield) {
		th := e.threads.enter(true)
		return func() { th.leave() }
	}
	return e.budget.releaser(e.threads.enter(true))
}

// batchPublication is batchPiece for a batch job's publication: a turn
// of the in-flight budget, not of the governor's width (acquireIO).
func (e *Engine) batchPublication(ctx context.Context) (end func()) {
	if ctx.Value(turnHeldKey{}) != nil {
		return noLeave
	}
	e.yield.wait(ctx)
	return e.budget.acquireIO(ctx)
}

// chargeWrites marks ctx's batch-lane writes, made outside any piece that
// holds a turn, for the pacer (store.WithWriteCharge): a single-writer
// store reports how long its writer ran each, and the lane rests after it
// as after a computing piece of that length while interactive work is
// about. Inside a piece (turnHeldKey) the piece's own wall time already
// holds its writes, which it waits for, so they are not charged twice.
// With the pacer off ctx is returned as it is.
func (e *Engine) chargeWrites(ctx context.Context) context.Context {
	if e.budget.pacer == nil || ctx.Value(turnHeldKey{}) != nil {
		return ctx
	}
	return store.WithWriteCharge(ctx, e.budget.charge)
}

// chargeThreadWrites is chargeWrites for the batch-lane writes of a piece
// that computes on an idle thread (on): the pacer charges that piece its
// thread's CPU time (pieceClock), which holds none of the writer's work
// for it, so each write is charged the writer's time as it is made. A
// piece that could not enter its thread after all (an Enter that failed
// where the probe at New had passed) is charged its wall time and its
// writes too: its waits for them twice.
func (e *Engine) chargeThreadWrites(ctx context.Context, on bool) context.Context {
	if !on || e.budget.pacer == nil {
		return ctx
	}
	return store.WithWriteCharge(ctx, e.budget.charge)
}

// charge has the pacer rest after d of the writer's time on a batch-lane
// write made outside any piece (chargeWrites), as after a piece that ran
// for d. It runs on the store's writer goroutine: a lock and, at most, a
// timer's reset.
func (b *batchBudget) charge(d time.Duration) {
	b.mu.Lock()
	b.paceLocked(d)
	b.mu.Unlock()
}

type turnHeldKey struct{}

// withTurnHeld marks ctx as a piece's that holds a budget turn for all
// its work (batchPiece).
func withTurnHeld(ctx context.Context) context.Context {
	return context.WithValue(ctx, turnHeldKey{}, true)
}
