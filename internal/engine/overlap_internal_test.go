package engine

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestOverlapTimesBatchComputingBesideInteractive: the overlap measure
// integrates interactive work in flight (inFlight's count above zero)
// against computing batch pieces, at the clock reads of each side's
// steps: nothing before the first batch piece, the interactive time in
// flight after it, and only the part of it a batch piece also ran. In
// simulated time.
func TestOverlapTimesBatchComputingBesideInteractive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := newInFlight()
		o := newOverlap(c)
		step := func(d time.Duration) { time.Sleep(d) }

		// Before any batch piece: interactive work is not timed.
		c.enter()
		step(7 * time.Millisecond)
		c.leave()

		o.batchStart() // batch computes from 0
		step(10 * time.Millisecond)
		c.enter() // interactive from 10 ms: overlapped
		c.enter() // a second piece in flight: no step
		step(4 * time.Millisecond)
		c.leave()
		step(1 * time.Millisecond)
		c.leave() // interactive until 15 ms
		step(5 * time.Millisecond)
		o.batchEnd() // batch until 20 ms
		step(10 * time.Millisecond)
		c.enter() // interactive 30 to 36 ms, alone
		step(6 * time.Millisecond)
		c.leave()
		step(2 * time.Millisecond)

		got := (&Engine{overlap: o}).OverlapCounts()
		want := OverlapCounts{InteractiveSeconds: 0.011, BatchSeconds: 0.020, BothSeconds: 0.005}
		if !near(got.InteractiveSeconds, want.InteractiveSeconds) || !near(got.BatchSeconds, want.BatchSeconds) || !near(got.BothSeconds, want.BothSeconds) {
			t.Errorf("overlap: %+v, want %+v", got, want)
		}
	})
}

// TestOverlapOffCostsNothing: an inFlight with the overlap measure but no
// batch piece yet (an engine that could compute batch work and has none)
// allocates nothing and times nothing per interactive job.
func TestOverlapOffCostsNothing(t *testing.T) {
	c := newInFlight()
	o := newOverlap(c)
	if n := testing.AllocsPerRun(100, func() { c.enter(); c.leave() }); n != 0 {
		t.Errorf("enter and leave with the overlap measure inactive: %v allocations, want 0", n)
	}
	if o.active.Load() || o.last != 0 || o.interactiveNanos != 0 {
		t.Errorf("inactive overlap was stepped: last %d, interactive %d ns", o.last, o.interactiveNanos)
	}
}

// near reports whether a and b (seconds) are within 1 µs.
func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
