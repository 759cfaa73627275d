package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// overlap measures how much of the time interactive work was in flight in
// this engine (inFlight's count above zero) computing batch-lane pieces
// also ran (a piece holding a turn of the CPU governor and not resting or
// waiting: a sweep stretch, an aggregation, a computing batch handler
// between its Yields). The share overlapped is what an interactive review
// meets of batch computing: the pacer spreads the lane's CPU over wall
// time, and a piece that overlaps a review slows it whoever schedules it
// (docs/benchmarks.md, "Session 35 (s35h4)").
//
// It integrates two step functions, each stepped by its own side at the
// clock reads it makes anyway (a computing piece's start and end, read by
// the pacer's bookkeeping) plus one per rise of interactive work from
// none, and only once a computing batch piece has begun in this engine
// (active): an engine with no batch work pays one atomic load per rise
// and fall, and nothing else.
type overlap struct {
	// active: a computing batch piece has begun; until then interactive
	// work is not timed (there is nothing to overlap it).
	active atomic.Bool

	interactive *inFlight

	mu sync.Mutex
	// last is the time of the last step, on inFlight's epoch scale.
	last int64
	// busy: interactive work was in flight at the last step; batch the
	// computing batch pieces running then.
	busy  bool
	batch int
	// Totals in nanoseconds: interactive work in flight, batch computing,
	// and both at once.
	interactiveNanos, batchNanos, bothNanos int64
}

func newOverlap(c *inFlight) *overlap {
	o := &overlap{interactive: c}
	c.overlap = o
	return o
}

// now is the monotonic time on inFlight's epoch scale.
func (o *overlap) now() int64 { return int64(time.Since(o.interactive.epoch)) }

// step adds the time since the last step to the totals the state then
// held, changes the computing pieces running by dBatch, and takes the
// interactive state from the count as it is now (a rise and a fall that
// race are seen as the count stays, as inFlight.tell does). A now before
// the last step (clocks read before the lock, in another order) adds
// nothing.
func (o *overlap) step(now int64, dBatch int) {
	o.mu.Lock()
	if d := now - o.last; d > 0 {
		if o.busy {
			o.interactiveNanos += d
		}
		if o.batch > 0 {
			o.batchNanos += d
			if o.busy {
				o.bothNanos += d
			}
		}
		o.last = now
	}
	o.batch += dBatch
	o.busy = o.interactive.busy()
	o.mu.Unlock()
}

// batchStart marks a computing batch piece begun now.
func (o *overlap) batchStart() {
	if o == nil {
		return
	}
	o.active.Store(true)
	o.step(o.now(), 1)
}

// batchEnd marks a computing batch piece (batchStart) ended now.
func (o *overlap) batchEnd() {
	if o == nil {
		return
	}
	o.step(o.now(), -1)
}

// on reports whether the measure runs: o exists and batch work was seen
// (active). inFlight asks it before it reads the clock for a step.
func (o *overlap) on() bool { return o != nil && o.active.Load() }

// interactiveChanged steps at a rise or fall of interactive work in
// flight at now; call it only when on.
func (o *overlap) interactiveChanged(now int64) { o.step(now, 0) }

// OverlapCounts are an engine's totals of interactive work in flight and
// of batch computing beside it, since the first computing batch piece.
type OverlapCounts struct {
	// InteractiveSeconds is the time interactive work was in flight in
	// the engine (from an accepted insert to its publication, as the yield
	// gate and the pacer see it); BatchSeconds the time computing batch
	// pieces ran; BothSeconds the time both did at once. BothSeconds over
	// InteractiveSeconds is the share of interactive flight that batch
	// computing overlapped.
	InteractiveSeconds, BatchSeconds, BothSeconds float64
}

// OverlapCounts returns the engine's overlap totals, up to now. It is
// safe for concurrent use.
func (e *Engine) OverlapCounts() OverlapCounts {
	o := e.overlap
	if o == nil {
		return OverlapCounts{}
	}
	if o.active.Load() {
		o.step(o.now(), 0)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return OverlapCounts{InteractiveSeconds: time.Duration(o.interactiveNanos).Seconds(),
		BatchSeconds: time.Duration(o.batchNanos).Seconds(), BothSeconds: time.Duration(o.bothNanos).Seconds()}
}
