package engine

import (
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// LeaseObserver is an optional extension of Observer: an Observer that also
// implements it is told of the lease faults the engine handled. Metrics
// implement it; implementations must be fast and safe for concurrent use.
type LeaseObserver interface {
	// LeasesRecovered reports n expired leases the reaper recovered.
	LeasesRecovered(n int)
	// OutcomeRefused reports one late write of a worker that had lost its
	// lease, refused by the store's guard: op is "finish" or "heartbeat".
	OutcomeRefused(op string)
	// HandlerAbandoned reports an attempt of kind abandoned past its
	// maximum run time, whose goroutine is still running (stuck).
	HandlerAbandoned(kind string)
	// StuckReturned reports that an abandoned attempt's goroutine of kind
	// finally returned (the stuck count goes down by one).
	StuckReturned(kind string)
}

// Refused operations reported to LeaseObserver.OutcomeRefused.
const (
	OpFinish    = "finish"
	OpHeartbeat = "heartbeat"
)

func (e *Engine) leaseObserver() LeaseObserver {
	lo, _ := e.jobs.cfg.Observer.(LeaseObserver) // the writer's: Config.Observer is unused when Config.Jobs is set
	return lo
}

// maxRunOutcome is the outcome recorded for an attempt past its maximum run
// time: a transient failure (a timeout), so the job is retried with backoff
// or ends transient_budget_exhausted.
func maxRunOutcome(d time.Duration) job.Outcome {
	return job.Outcome{Class: job.ClassTransient, Err: fmt.Sprintf("maximum run time %v exceeded", d)}
}

// overrun handles, at one heartbeat tick, the attempts past their maximum
// run time (all attempts once Stop's deadline passed): the first tick past
// it cancels the handler's context and stops renewing its lease; a handler
// still running one tick later is abandoned.
// It returns the attempts still due a heartbeat.
func (e *Engine) overrun(now time.Time) (due []*runningJob) {
	var abandon []*runningJob
	e.mu.Lock()
	for _, r := range e.running {
		switch {
		case r.overrun:
			// Cancelled one tick ago and still running: give up on it.
			r.abandoned, r.stopping = true, e.draining
			delete(e.running, r.job.ID)
			e.stuck[r] = struct{}{}
			if e.freed < e.cfg.Workers {
				r.slotFreed = true
				e.freed++
			}
			abandon = append(abandon, r)
		case e.draining || now.Sub(r.started) >= r.maxRun:
			r.overrun = true
			r.cancel(errMaxRunTime) // no-op after Stop's errStopping
		case now.Sub(r.started) >= e.cfg.HeartbeatEvery:
			due = append(due, r)
		}
	}
	e.mu.Unlock()
	for _, r := range abandon {
		e.abandon(r, now)
	}
	return due
}

// abandon records a timeout for an attempt whose handler ignored its
// cancelled context: the outcome goes through the finisher like any other
// (a guarded transition that releases the job's keys), the worker slot is
// freed when the stuck count allows it, and the stuck goroutine is counted
// until it returns. The caller has marked r abandoned.
func (e *Engine) abandon(r *runningJob, now time.Time) {
	why := "past its maximum run time"
	if r.stopping {
		why = "after the engine's stop deadline"
	}
	e.log.Error("handler ignored its cancelled context "+why+"; attempt abandoned",
		"job_id", r.job.ID, "kind", r.job.Kind, "attempt", r.job.Attempt, "max_run_time", r.maxRun.String(),
		"running_for", now.Sub(r.started).String())
	if lo := e.leaseObserver(); lo != nil {
		lo.HandlerAbandoned(r.job.Kind)
	}
	// The goroutine's slot is still held here, so Stop has not closed
	// results yet.
	out := maxRunOutcome(r.maxRun)
	if r.stopping {
		out = job.Outcome{Class: job.ClassTransient, Err: "engine stopped; the handler ignored its cancelled context"}
	}
	r.leave() // its interactive work no longer holds the batch lane
	// Its outcome is this one: none comes from its goroutine (gather).
	e.handed(r.job)
	e.results <- result{job: r.job, out: out}
	if r.slotFreed {
		<-e.slots
	}
	e.wg.Done() // the goroutine no longer belongs to the engine's lifecycle
}

// stuckReturned is called when an abandoned attempt's handler returns.
func (e *Engine) stuckReturned(r *runningJob) {
	e.log.Warn("abandoned handler returned; its outcome is dropped", "job_id", r.job.ID, "kind", r.job.Kind,
		"attempt", r.job.Attempt)
	if lo := e.leaseObserver(); lo != nil {
		lo.StuckReturned(r.job.Kind)
	}
}

// Stuck returns how many abandoned attempts' handlers are still running.
func (e *Engine) Stuck() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.stuck)
}
