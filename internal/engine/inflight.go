package engine

import "sync"

// inFlight counts this engine's interactive work in flight: a leased
// interactive job's handler, an interactive parent's aggregation, an
// interactive job's publication. It is the one copy of that count for the
// policies that hold batch-lane work while there is any, the yield gate
// (yield.go), the batch budget (budget.go) and the batch pacer
// (pacer.go): each listens for the
// count leaving zero (busy) and returning to it (idle), and keeps its own
// view in step under its own lock.
//
// Only listeners that are on are registered, so with both policies off
// (the yield gate is off by default) enter costs an interactive job
// nothing: no lock, no allocation.
type inFlight struct {
	mu        sync.Mutex
	n         int
	listeners []inFlightListener
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
	c := &inFlight{}
	for _, l := range ls {
		if l != nil {
			c.listeners = append(c.listeners, l)
		}
	}
	return c
}

// noLeave is enter's leave when nobody listens.
func noLeave() {}

// enter marks one piece of interactive work in flight until the returned
// func is called (exactly once; later calls do nothing).
func (c *inFlight) enter() (leave func()) {
	if len(c.listeners) == 0 {
		return noLeave
	}
	c.mu.Lock()
	c.n++
	if c.n == 1 {
		for _, l := range c.listeners {
			l.interactiveBusy()
		}
	}
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.n--
			if c.n == 0 {
				for _, l := range c.listeners {
					l.interactiveIdle()
				}
			}
			c.mu.Unlock()
		})
	}
}

// count is the interactive work in flight now.
func (c *inFlight) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
