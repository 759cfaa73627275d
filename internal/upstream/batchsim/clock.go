package batchsim

import (
	"sync"
	"time"
)

// Clock is a manual clock for tests: time moves only when Advance or Set
// is called. The zero Clock starts at the Unix epoch; use [NewClock]. It is
// safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time. Pass the method value as Config.Now.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return c.now
}

// Advance moves the clock forward by d (a negative d is ignored: the
// simulated providers' clocks never run backwards).
func (c *Clock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = time.Unix(0, 0).UTC()
	}
	c.now = c.now.Add(d)
}

// Set moves the clock to t if t is later than its current time.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}
