package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// inFlight counts this engine's interactive work in flight: an
// interactive job inserted through the engine's writer and not yet leased
// (queued.go, while the yield gate or the batch pacer is on), a leased
// interactive job's handler, an interactive parent's aggregation, an
// interactive job's publication. It is the one copy of that count for the
// policies that treat batch-lane work differently while there is any:
// the yield gate (yield.go), the batch budget (budget.go) and the batch
// pacer (pacer.go).
//
// Every interactive job enters and leaves it at least once, whether or
// not any batch work exists, so both are an atomic add and allocate
// nothing. The policies read the count when batch work asks (the budget
// in freeLocked, the pacer in rest) rather than being told of every
// change; only what must happen when the count falls to zero is done
// there, and only while it matters:
//
//   - the pacer (stamp) needs when interactive work was last in flight,
//     for its window: one clock read when the count falls to zero;
//   - the budget (budget) wakes the batch pieces it holds for want of a
//     turn, only when some wait (an atomic load otherwise);
//   - the yield gate (listeners, opt-in) is told in order, under a lock,
//     when the count rises from zero and falls back.
//
// Written by session 25 with a lock and a closure per enter, and every
// policy a listener: with the pacer on by default that bookkeeping cost
// a drain with no batch work at all 10 % (docs/benchmarks.md, "Session
// 25: the merge (lead)"; "Session 26 (s26h1)").
type inFlight struct {
	n atomic.Int64

	// stamp: record idleAt (the batch pacer is on); idleAt is when the
	// count last fell to zero, as nanoseconds since epoch plus one (0:
	// never), on the monotonic clock.
	stamp  bool
	epoch  time.Time
	idleAt atomic.Int64

	// budget, when its in-flight bound is on, is woken when the count
	// falls to zero (batchBudget.interactiveIdle).
	budget *batchBudget

	// listeners are told, in order and under mu, when the count rises
	// from zero and falls back (told: what they were last told). A rise
	// and fall that race may reach them as one change or none: each
	// transition is followed by a look at the count under mu, so the last
	// look sees the count as it stays.
	listeners []inFlightListener
	mu        sync.Mutex
	told      bool

	// overlap, when set, times interactive work in flight against batch
	// computing (overlap.go): stepped at each rise and fall once batch
	// work was seen, one clock read on a rise (the fall's is shared with
	// stamp).
	overlap *overlap
}

// inFlightListener is told, under inFlight's lock and in order, when
// interactive work in flight rises from zero and when it falls back.
type inFlightListener interface {
	interactiveBusy()
	interactiveIdle()
}

// newInFlight returns a counter telling the listeners given (nil ones,
// policies that are off, are left out).
func newInFlight(ls ...inFlightListener) *inFlight {
	c := &inFlight{epoch: time.Now()}
	for _, l := range ls {
		if l != nil {
			c.listeners = append(c.listeners, l)
		}
	}
	return c
}

// enter marks one piece of interactive work in flight until leave is
// called for it, exactly once.
func (c *inFlight) enter() {
	if c.n.Add(1) == 1 {
		if c.overlap.on() {
			c.overlap.interactiveChanged(int64(time.Since(c.epoch)))
		}
		if len(c.listeners) > 0 {
			c.tell()
		}
	}
}

// leave ends one piece of interactive work that enter began. A leave
// without its enter is a bug in the engine that would leave the batch
// lane unbounded, so it panics.
func (c *inFlight) leave() {
	n := c.n.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 {
		panic("engine: interactive work left more often than it entered")
	}
	if stamp, measure := c.stamp, c.overlap.on(); stamp || measure {
		// time.Since reads the monotonic clock only: a third of
		// time.Now's cost on a VM's clock.
		now := int64(time.Since(c.epoch))
		if stamp {
			c.stampIdle(now + 1)
		}
		if measure {
			c.overlap.interactiveChanged(now)
		}
	}
	if c.budget != nil {
		c.budget.interactiveIdle()
	}
	if len(c.listeners) > 0 {
		c.tell()
	}
}

// stampIdle moves idleAt to now unless a later fall is already recorded
// (two falls to zero may store in either order).
func (c *inFlight) stampIdle(now int64) {
	for {
		old := c.idleAt.Load()
		if now <= old || c.idleAt.CompareAndSwap(old, now) {
			return
		}
	}
}

// since is t on idleAt's scale.
func (c *inFlight) since(t time.Time) int64 { return int64(t.Sub(c.epoch)) + 1 }

// idleWithin reports whether the count last fell to zero less than d
// before now (false if it never did). Only stamped counters know.
func (c *inFlight) idleWithin(d time.Duration, now time.Time) bool {
	idle := c.idleAt.Load()
	return idle != 0 && c.since(now)-idle < int64(d)
}

// tell brings the listeners in step with the count.
func (c *inFlight) tell() {
	c.mu.Lock()
	defer c.mu.Unlock()
	busy := c.n.Load() > 0
	if busy == c.told {
		return
	}
	c.told = busy
	for _, l := range c.listeners {
		if busy {
			l.interactiveBusy()
		} else {
			l.interactiveIdle()
		}
	}
}

// busy reports whether interactive work is in flight now.
func (c *inFlight) busy() bool { return c.n.Load() > 0 }

// count is the interactive work in flight now.
func (c *inFlight) count() int { return int(c.n.Load()) }
