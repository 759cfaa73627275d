package engine

import (
	"math"
	"sync"
	"time"
)

// batchCPUShareDefault is Config.BatchCPUShare when it is zero: the pacer
// is off by default (docs/benchmarks.md, "Session 25 (s25h2)").
const batchCPUShareDefault = 0

// BatchPaceWindow is how long after interactive work was last in flight
// in this process the batch pacer (Config.BatchCPUShare) still counts it
// as about: a review arrives every few hundred milliseconds under a
// steady interactive load, so a window of a second keeps the pace through
// the gaps between them, and a batch lane with no interactive work near
// runs at full speed a second after the last.
const BatchPaceWindow = time.Second

// batchPacer is the batch lane's duty cycle while interactive work is
// about (Config.BatchCPUShare): after a piece of batch-lane work that
// computes (one that holds a turn of the CPU governor, budget.go) ran for
// d, no such piece starts for d·(1−share)/share, so the lane computes
// about share of wall time per turn. "About" is interactive work in
// flight in this engine (the engine's inFlight: from an accepted insert,
// queued.go, to its publication) now or within BatchPaceWindow; otherwise
// a piece rests for nothing.
//
// Why a share of time and not a hold until interactive work is gone (the
// yield gate, yield.go): what an interactive review feels under a sweep
// is its rate (the CPU of its pieces, the writer's commits, the garbage
// it makes) whenever both cores are busy, and the gate's release of the
// held pieces all at once made the tail worse (docs/benchmarks.md,
// "Session 18"). Batch work is deferred by design, so a sweep that takes
// longer while interactive work is about costs little.
//
// A rest is at most BatchPaceWindow, so one long piece does not stop the
// lane past the signal it was paced by; batch handlers that do much per
// attempt call Yield between their pieces, where the pacer rests them.
type batchPacer struct {
	share float64

	mu   sync.Mutex
	busy bool // interactive work is in flight (inFlight tells)
	// idleAt is when interactive work in flight last fell to none.
	idleAt time.Time
}

// newBatchPacer returns the pacer for Config.BatchCPUShare, nil when off
// (zero after defaults, negative, at least 1, or not a number).
func newBatchPacer(share float64) *batchPacer {
	if !(share > 0 && share < 1) {
		return nil
	}
	return &batchPacer{share: share}
}

// listener is the pacer as the engine's inFlight counter's listener; nil
// when the pacer is off.
func (p *batchPacer) listener() inFlightListener {
	if p == nil {
		return nil
	}
	return p
}

func (p *batchPacer) interactiveBusy() {
	p.mu.Lock()
	p.busy = true
	p.mu.Unlock()
}

func (p *batchPacer) interactiveIdle() {
	now := time.Now()
	p.mu.Lock()
	p.busy = false
	p.idleAt = now
	p.mu.Unlock()
}

// rest is how long the batch lane rests after a computing piece that ran
// for d and ended at now: d·(1−share)/share while interactive work is
// about, at most BatchPaceWindow; zero otherwise.
func (p *batchPacer) rest(d time.Duration, now time.Time) time.Duration {
	if p == nil || d <= 0 {
		return 0
	}
	p.mu.Lock()
	about := p.busy || (!p.idleAt.IsZero() && now.Sub(p.idleAt) < BatchPaceWindow)
	p.mu.Unlock()
	if !about {
		return 0
	}
	r := float64(d) * (1 - p.share) / p.share
	return time.Duration(math.Min(r, float64(BatchPaceWindow)))
}
