package testkit

import (
	"sync"
	"time"
)

// Clock is a fake clock for code that takes one as a func() time.Time (the
// engine's Config.Now, the upstream simulator's Config.Now) or reads one to
// pass as a now argument (the stores). It either stands still, moving only
// when the test says (Add, Set), or runs with the real clock from its
// current reading (Run), offset by every Add since. Safe for concurrent use.
//
// A test of timers inside the code under test wants testing/synctest
// instead: a Clock moves what the code reads, not when its timers fire.
type Clock struct {
	mu      sync.Mutex
	at      time.Time // the reading when the clock stands still, or at since
	running bool
	since   time.Time // real time at which a running clock read at
}

// NewClock returns a clock standing still at at.
func NewClock(at time.Time) *Clock { return &Clock{at: at} }

// NewRunningClock returns a clock that runs with the real clock, reading
// real time until the test moves it with Add or Set.
func NewRunningClock() *Clock {
	now := time.Now()
	return &Clock{at: now, running: true, since: now}
}

// Now returns the clock's reading; pass c.Now where a clock is wanted.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *Clock) nowLocked() time.Time {
	if c.running {
		return c.at.Add(time.Since(c.since))
	}
	return c.at
}

// Add moves the clock forward by d (back, if d is negative).
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.at = c.at.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to at; a running clock runs on from there.
func (c *Clock) Set(at time.Time) {
	c.mu.Lock()
	c.at, c.since = at, time.Now()
	c.mu.Unlock()
}

// Run lets a standing clock run with the real clock from its current
// reading; on a running clock it does nothing.
func (c *Clock) Run() {
	c.mu.Lock()
	if !c.running {
		c.running, c.since = true, time.Now()
	}
	c.mu.Unlock()
}

// Freeze stops a running clock at its current reading.
func (c *Clock) Freeze() {
	c.mu.Lock()
	c.at, c.running = c.nowLocked(), false
	c.mu.Unlock()
}
