package engine

import (
	"sync"

	"github.com/ratelane/ratelane/internal/job"
)

// queuedWork counts interactive jobs inserted through the engine's
// writer, and not yet seen by a lease, as one more piece of interactive
// work in flight (inFlight), so the yield gate closes when interactive
// work is accepted rather than only once it is leased. Without it a batch
// handler leased between the insert and the lease that takes the
// interactive job started unhindered, and the interactive job's queued
// stage waited behind it (batch-isolation: queued p99 10 → 50 ms under a
// sweep; docs/benchmarks.md, "Session 18 (s18h6)").
//
// The piece ends after the first lease of the fetch loop that began after
// the last such insert: that lease either took the jobs (their handlers
// are counted in flight from then on) or could not (a key refused them, or
// every worker slot is busy with interactive work), and in neither case
// should the batch lane wait longer for them. Inserts during a lease keep
// the piece for the next one, which their Notify brings. The yield gate's
// bound (Config.BatchYieldMax) still caps every hold.
type queuedWork struct {
	enter func() (leave func())

	mu    sync.Mutex
	gen   uint64 // interactive inserts seen so far
	leave func() // non-nil while queued interactive work is counted in flight
}

// inserted counts jobs just inserted: any that ready says the engine
// will lease now marks queued work in flight until a lease sees it.
func (q *queuedWork) inserted(jobs []*job.Job, ready func(*job.Job) bool) {
	for _, j := range jobs {
		if ready(j) {
			q.mu.Lock()
			q.gen++
			if q.leave == nil {
				q.leave = q.enter()
			}
			q.mu.Unlock()
			return
		}
	}
}

// leasing is called as a lease begins; the returned func, called once the
// jobs it leased are running (each counted in flight by its handler),
// ends the queued piece unless an interactive insert came after the lease
// began.
func (q *queuedWork) leasing() (seen func()) {
	if q == nil { // the yield gate is off
		return noLeave
	}
	q.mu.Lock()
	gen := q.gen
	q.mu.Unlock()
	return func() {
		q.mu.Lock()
		leave := q.leave
		if leave != nil && q.gen == gen {
			q.leave = nil
		} else {
			leave = nil
		}
		q.mu.Unlock()
		if leave != nil {
			leave()
		}
	}
}
