package testkit

import "sync"

// Counter counts events (a handler's return, an Observer's call) and
// signals when a count is reached, so that a test waits on the event
// itself (Recv(t, c.Reached(n), ...)) instead of polling a number. Inside
// a testing/synctest bubble the wait is a durable block: the bubble's
// clock jumps straight to the engine's next timer, with no 1 ms polls of
// virtual time between. The zero Counter is ready; it is safe for
// concurrent use.
type Counter struct {
	mu    sync.Mutex
	n     int64
	waits []countWait
}

type countWait struct {
	at int64
	ch chan struct{}
}

// Add adds d to the count and closes the channels of the counts it
// reached.
func (c *Counter) Add(d int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += d
	kept := c.waits[:0]
	for _, w := range c.waits {
		if c.n >= w.at {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	c.waits = kept
}

// Load returns the count.
func (c *Counter) Load() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Reached returns a channel that is closed once the count is at least n
// (at once when it already is).
func (c *Counter) Reached(n int64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if c.n >= n {
		close(ch)
		return ch
	}
	c.waits = append(c.waits, countWait{at: n, ch: ch})
	return ch
}
