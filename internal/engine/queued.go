package engine

import (
	"sync"
	"sync/atomic"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
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
//
// Per insert call of the engine's writer it takes one lock (when a job is
// ready), per lease one atomic load and one lock, and it allocates
// nothing: with the batch pacer on by default every interactive insert
// and every lease goes through it, batch work or not.
type queuedWork struct {
	interactive *inFlight
	// ready says whether the engine will lease an inserted job now
	// (Engine.leasesNow).
	ready func(*job.Job) bool

	gen atomic.Uint64 // interactive inserts seen so far; written under mu

	mu sync.Mutex
	// counted: queued interactive work is counted in flight now (one
	// piece, however many jobs).
	counted bool
}

// inserted counts the jobs of an insert (Jobs.watchInserts): any added
// that ready says the engine will lease now marks queued work in flight
// until a lease sees it.
func (q *queuedWork) inserted(res []store.InsertResult) {
	for _, r := range res {
		if !r.Existing && q.ready(r.Job) {
			q.mu.Lock()
			q.gen.Add(1)
			if !q.counted {
				q.counted = true
				q.interactive.enter()
			}
			q.mu.Unlock()
			return
		}
	}
}

// leasing is called as a lease begins; seen, given what it returned once
// the jobs the lease took are running (each counted in flight by its
// handler), ends the queued piece unless an interactive insert came after
// the lease began.
func (q *queuedWork) leasing() (gen uint64) {
	if q == nil { // the yield gate and the pacer are off
		return 0
	}
	return q.gen.Load()
}

// seen ends the queued piece for a lease that began at gen (leasing).
func (q *queuedWork) seen(gen uint64) {
	if q == nil {
		return
	}
	q.mu.Lock()
	if q.counted && q.gen.Load() == gen {
		q.counted = false
		q.interactive.leave()
	}
	q.mu.Unlock()
}
