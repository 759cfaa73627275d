package engine

import (
	"context"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// SetReapHook makes e call f between selecting expired leases and
// recovering them: the test signal that lets the reaper-vs-completion race
// tests (RELIABILITY.md T3) act in the gap. Set it before Start.
func SetReapHook(e *Engine, f func(expired []*job.Job)) { e.reapHook = f }

// SetPublishQueue bounds each lane's publication queue to n ids, so a test can
// fill it. Set it before Start.
func SetPublishQueue(e *Engine, n int) {
	e.pub.q, e.pub.bq = make(chan pubItem, n), make(chan pubItem, n)
}

// BudgetState returns e's batch budget as it is now: batch pieces holding
// a turn and waiting for one, and interactive pieces in flight.
func BudgetState(e *Engine) (running, waiting, interactive int) {
	b := e.budget
	b.mu.Lock()
	running, waiting = b.running, b.waiting
	b.mu.Unlock()
	return running, waiting, e.interactive.count()
}

// InteractiveBookkeeping does to e's bookkeeping what one interactive job
// does beside its store writes and its handler: its insert told to the
// insert watchers (res), the lease that takes it (its handler counted in
// flight, the queued piece seen), its publication in flight, the handler
// and the publication ending.
func InteractiveBookkeeping(e *Engine, res []store.InsertResult) {
	e.jobs.mu.Lock()
	watchers := e.jobs.insertWatchers
	e.jobs.mu.Unlock()
	for _, fn := range watchers {
		fn(res)
	}
	gen := e.queued.leasing()
	e.interactive.enter() // the handler
	e.queued.seen(gen)
	e.interactive.enter() // the publication
	e.interactive.leave()
	e.interactive.leave()
}

// BudgetTurn is the channel e's batch budget closes, and replaces, each
// time it wakes the pieces waiting for a turn.
func BudgetTurn(e *Engine) chan struct{} {
	e.budget.mu.Lock()
	defer e.budget.mu.Unlock()
	return e.budget.turn
}

// Pacing reports whether e's batch pacer is on and whether it tracks
// interactive work accepted and not yet leased (queued.go).
func Pacing(e *Engine) (pacer, queued bool) { return e.budget.pacer != nil, e.queued != nil }

// EnterInteractive counts one piece of interactive work in flight in e
// until the returned func is called, as an interactive handler does.
func EnterInteractive(e *Engine) (leave func()) {
	e.interactive.enter()
	return e.interactive.leave
}

// BatchPiece runs one piece of computing batch-lane work in e that does
// nothing: it waits for a turn of the governor (and out the pacer's
// rest) and gives it back at once.
func BatchPiece(e *Engine) { e.batchPiece(context.Background())() }

// SetParentQueues bounds each lane's queue of parent wake-ups to n, so a
// test can fill it. Set it before Start.
func SetParentQueues(e *Engine, n int) {
	e.parents, e.batchParents = make(chan parentWake, n), make(chan parentWake, n)
}

// FusedMaxParts is fusedMaxParts: the most parts a parent may have for
// its last part's finish to carry its aggregation.
const FusedMaxParts = fusedMaxParts

// FreeSlots is how many of e's worker slots are free now.
func FreeSlots(e *Engine) int { return cap(e.slots) - len(e.slots) }

// StartBatchPiece starts one computing piece of batch-lane work on e as a
// sweep stretch or a batch group's aggregation does (batchPiece); the
// returned func ends it.
func StartBatchPiece(e *Engine) (end func()) { return e.batchPiece(context.Background()) }

// SetGatherYield makes e's finish loop call f where it yields the
// processor for more outcomes (runtime.Gosched). Set it before Start.
func SetGatherYield(e *Engine, f func()) { e.gatherYield = f }
