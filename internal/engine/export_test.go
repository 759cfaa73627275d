package engine

import "github.com/ratelane/ratelane/internal/job"

// SetReapHook makes e call f between selecting expired leases and
// recovering them: the test signal that lets the reaper-vs-completion race
// tests (RELIABILITY.md T3) act in the gap. Set it before Start.
func SetReapHook(e *Engine, f func(expired []*job.Job)) { e.reapHook = f }

// SetPublishQueue bounds each lane's publication queue to n ids, so a test can
// fill it. Set it before Start.
func SetPublishQueue(e *Engine, n int) {
	e.pub.q, e.pub.bq = make(chan pubItem, n), make(chan pubItem, n)
}

// BudgetState returns e's batch budget as it is now: batch pieces holding
// a turn and waiting for one, and interactive pieces in flight.
func BudgetState(e *Engine) (running, waiting, interactive int) {
	b := e.budget
	b.mu.Lock()
	running, waiting = b.running, b.waiting
	b.mu.Unlock()
	return running, waiting, e.interactive.count()
}
