package engine

import (
	"math"
	"time"
)

// batchCPUShareDefault is Config.BatchCPUShare when it is zero: while
// interactive work is about, the batch lane computes about a quarter of
// wall time per turn. Measured quiet on 2 cores (docs/benchmarks.md,
// "Session 25: the merge (lead)"): a 10,000-file sweep's pooled in-sweep
// interactive p99 fell 40 % (ratio 4.4 / 3.6 → 2.6 / 2.1) while the sweep
// took 2.3× as long; with no interactive work about it costs nothing.
// Batch work is deferred by design, so the default trades the sweep's
// time for the interactive lane's tail; a node that runs batch work only,
// or an operator who wants the sweep at full speed, sets a negative
// share. It was opt-in until its bookkeeping stopped costing a drain
// with no batch work (inflight.go; docs/benchmarks.md, "Session 26
// (s26h1)").
const batchCPUShareDefault = 0.25

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
	// interactive is the engine's count of interactive work in flight,
	// which stamps when it last fell to none for this pacer (inFlight).
	interactive *inFlight
}

// newBatchPacer returns the pacer for Config.BatchCPUShare over the
// engine's count of interactive work c, nil when off (zero after
// defaults, negative, at least 1, or not a number). An active pacer has
// c stamp each fall to none, one clock read.
func newBatchPacer(share float64, c *inFlight) *batchPacer {
	if !(share > 0 && share < 1) {
		return nil
	}
	c.stamp = true
	return &batchPacer{share: share, interactive: c}
}

// about reports whether interactive work is in flight at now or was
// within BatchPaceWindow before it.
func (p *batchPacer) about(now time.Time) bool {
	return p.interactive.busy() || p.interactive.idleWithin(BatchPaceWindow, now)
}

// rest is how long the batch lane rests after a computing piece that ran
// for d and ended at now: d·(1−share)/share while interactive work is
// about, at most BatchPaceWindow; zero otherwise.
func (p *batchPacer) rest(d time.Duration, now time.Time) time.Duration {
	if p == nil || d <= 0 {
		return 0
	}
	if !p.about(now) {
		return 0
	}
	r := float64(d) * (1 - p.share) / p.share
	return time.Duration(math.Min(r, float64(BatchPaceWindow)))
}
