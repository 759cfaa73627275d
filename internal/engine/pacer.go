package engine

import (
	"math"
	"time"
)

// DefaultBatchCPUShare is Config.BatchCPUShare when it is zero: while
// interactive work is about, the batch lane computes about a tenth of
// wall time per turn. A quarter was the default from session 26 to 40
// (docs/benchmarks.md, "Session 25: the merge (lead)": the pacer cut a
// 10,000-file sweep's in-sweep interactive p99 ratio from 4.4 / 3.6 to
// 2.6 / 2.1); by session 40 the sweep's own costs were small enough that
// what was left of the ratio (1.5–1.9) was the machine's: a plain CPU
// burner at the sweep's rate moves the interactive p99 as much
// (`bench batch-floor`). What the interactive lane feels is how much of
// the time batch work computes beside it, so the share is the lever:
// quiet, every run at a tenth moved the in-sweep p90 less than every
// run at a quarter (p90 ratio 0.98–1.28 against 1.40–1.51), the
// sweep 2.2–2.8× as long; the p99 ratio did not resolve between the two
// (docs/benchmarks.md, "Session 41: the merge (lead)"). Batch work is
// deferred by design (a provider batch's window is a day), so the
// default trades the sweep's local time for the interactive lane's tail;
// with no interactive work about it costs nothing. A node that runs batch work only, or an
// operator who wants the sweep at full speed beside interactive work,
// sets a larger share or a negative one (off). It was opt-in until its
// bookkeeping stopped costing a drain with no batch work (inflight.go;
// docs/benchmarks.md, "Session 26 (s26h1)").
const DefaultBatchCPUShare = 0.1

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

// pieceClock times a computing piece for the pacer: what it charges the
// piece, d in rest's d·(1−share)/share.
//
// On a normal thread that is the piece's wall time. The goroutine is not
// locked to its thread: it migrates between threads, and a thread's clock
// counts whatever else ran there, so a thread's CPU clock says nothing
// about the piece, and wall time (which holds its waits for its writes)
// is the measure. On an idle thread (Config.BatchThreadPolicy "idle",
// Linux: threads.go) the goroutine is locked to the thread, which runs
// nothing else until the piece leaves it: the thread's CPU time is what
// the piece computed. Its wall time there is mostly the time the kernel
// kept it off the CPU for normal threads; charged, it rested the lane
// again for what the idle policy had already withheld, and a sweep beside
// a busy host took 3× as long (docs/benchmarks.md, "Session 36 (s36h1)").
// What the thread's clock leaves out, the writer's work for the piece's
// writes, is charged as each write is made (chargeThreadWrites).
type pieceClock struct {
	th    *idleThread // nil: wall time
	since time.Time
	cpu   time.Duration // th's clock at since
	cpuOK bool          // cpu was read
}

// start begins a piece at now, on th's clock when it can be read.
func (c *pieceClock) start(now time.Time) {
	c.since = now
	if c.th != nil {
		c.cpu, c.cpuOK = c.th.cpu() // unreadable: ran falls back to wall time
	}
}

// ran is the charge of the piece begun at start and ended at now: its
// thread's CPU time (thread true) or its wall time, with the wall time.
func (c *pieceClock) ran(now time.Time) (d, wall time.Duration, thread bool) {
	wall = now.Sub(c.since)
	if c.th != nil {
		if v, ok := c.th.cpu(); ok && c.cpuOK {
			return v - c.cpu, wall, true
		}
	}
	return wall, wall, false
}
