package engine

import (
	"cmp"
	"math"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Backoff is the retry timing policy used when the server gave no valid
// delay: min(cap, base * 2^n) * U(0.5, 1.5), where n counts the attempts
// already spent on the same budget.
type Backoff struct {
	// Base is the first delay; zero means 1 s.
	Base time.Duration
	// InteractiveCap caps interactive delays; zero means 60 s.
	InteractiveCap time.Duration
	// BatchCap caps batch delays; zero means 10 min.
	BatchCap time.Duration
}

// WithDefaults returns b with zero fields replaced by their defaults.
func (b Backoff) WithDefaults() Backoff {
	b.Base = cmp.Or(b.Base, time.Second)
	b.InteractiveCap = cmp.Or(b.InteractiveCap, 60*time.Second)
	b.BatchCap = cmp.Or(b.BatchCap, 10*time.Minute)
	return b
}

// Delay returns the backoff before attempt n+1 of a budget (n >= 1 attempts
// spent), given a uniform random u in [0, 1).
func (b Backoff) Delay(lane job.Lane, n int, u float64) time.Duration {
	limit := b.BatchCap
	if lane == job.LaneInteractive {
		limit = b.InteractiveCap
	}
	d := float64(b.Base) * math.Pow(2, float64(max(n-1, 0)))
	d = math.Min(d, float64(limit))
	return time.Duration(d * (0.5 + u))
}

// PacedFaults is how many of a job's transient failures (a 5xx without
// Retry-After, a timeout) the store may retry at its keys' pace instead of
// after a backoff (store.PacedFault; KeyEffect.Fault marks them). Two, not
// one: random 5xx at 2 % meet the same job twice often enough that a second
// fault's 1-3 s backoff set the many mix's worst makespan
// (docs/benchmarks.md, session 18, s18h5), and a key that spaces its starts
// already keeps the retries to its pace. Not more: a run of failures means
// something is wrong with the job or the upstream, and the third failure
// backs off as before, so a destination that always fails still slows down
// (TestFailingUpstreamBacksOff).
const PacedFaults = 2

// Decide turns a handler's outcome into the job's next transition. It is
// the one classification switch of the engine (table-tested in
// decide_test.go). validates says whether the job's kind has a publication
// step (success -> validated) or not (success -> published). u is a uniform
// random number in [0, 1) for jitter.
func Decide(j *job.Job, o job.Outcome, now time.Time, validates bool, b Backoff, u float64) store.Transition {
	b = b.WithDefaults()
	t := store.Transition{
		ID: j.ID, LeaseToken: j.LeaseToken, Attempts: j.Attempts,
		Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: o.Class, Status: o.Status, Error: o.Err},
		Keys:   store.KeyEffect{Now: now, Hints: o.Hints, Estimated: j.Cost, Actual: o.Usage},
	}
	if o.Scope != "" {
		t.Keys.Scope = []string{o.Scope}
	}
	switch o.Class {
	case job.ClassSuccess:
		t.To, t.Result, t.Keys.Success = job.StatePublished, o.Result, true
		if validates {
			t.To = job.StateValidated
		}
	case job.ClassRateLimited:
		t.Attempts.Congestion++
		delay, why := o.RetryAfter, o.RetrySource
		if delay <= 0 {
			delay, why = b.Delay(j.Lane, t.Attempts.Congestion, u), "backoff"
			// The store drops the backoff when these keys pace the retry
			// themselves (store.PacedRetry); the attempt still counts.
			t.Keys.Backoff, t.Keys.JobKeys = true, j.LimitKeys
		} else if why == "" {
			why = "server"
		}
		t.Keys.RateLimited, t.Keys.PauseUntil = true, now.Add(min(delay, job.MaxDelay))
		retry(&t, j, now, delay, why, t.Attempts.Congestion > j.Budgets.Congestion, job.ReasonRateLimitBudgetExhausted)
	case job.ClassTransient, "":
		t.Record.Outcome = job.ClassTransient
		t.Attempts.Transient++
		delay := b.Delay(j.Lane, t.Attempts.Transient, u)
		if t.Attempts.Transient <= PacedFaults {
			// A job's first faults: the store drops the backoff when
			// every key of the job spaces its starts
			// (store.PacedFault). A later fault of the same job backs
			// off as always, so a run of failures still slows down.
			t.Keys.Fault, t.Keys.JobKeys = true, j.LimitKeys
		}
		retry(&t, j, now, delay, "backoff", t.Attempts.Transient > j.Budgets.Transient, job.ReasonTransientBudgetExhausted)
	case job.ClassLeaseExpired:
		t.Attempts.Transient++
		retry(&t, j, now, 0, "lease expired", t.Attempts.Transient > j.Budgets.Transient, job.ReasonTransientBudgetExhausted)
		if t.To == job.StateRetryScheduled {
			t.To = job.StateWaiting // an expired lease returns the job to waiting
		}
	case job.ClassPending:
		// Work that goes on elsewhere (a provider batch): come back later,
		// spending no budget; the job's deadline still ends it.
		delay := o.RetryAfter
		if delay <= 0 {
			delay = job.DefaultPendingDelay
		}
		if o.PauseKeyFor > 0 {
			// The pass met a refusal (a 429 on a provider batch create):
			// the keys pause for every node and learn from it as for a
			// rate-limited outcome, but the job spends no congestion
			// budget, since its batch lives for hours.
			t.Keys.RateLimited, t.Keys.PauseUntil = true, now.Add(min(o.PauseKeyFor, job.MaxDelay))
		}
		retry(&t, j, now, delay, "pending", false, "")
	case job.ClassInvalidOutput:
		t.Attempts.Schema++
		// A repair attempt needs no backoff: the upstream answered.
		retry(&t, j, now, 0, "repair attempt", t.Attempts.Schema > j.Budgets.Schema, job.ReasonSchemaBudgetExhausted)
	default: // job.ClassPermanent and anything unknown: never retried
		t.To, t.Reason = job.StateTerminal, job.ReasonPermanentError
		if o.Reason != "" {
			t.Reason = o.Reason
		}
		if o.PauseKeyFor > 0 {
			t.Keys.PauseUntil = now.Add(min(o.PauseKeyFor, job.MaxDelay))
		}
	}
	return t
}

// retry schedules the next attempt after delay, or ends the job when the
// budget is spent, the delay passes the 7-day cap, or the deadline would pass.
func retry(t *store.Transition, j *job.Job, now time.Time, delay time.Duration, why string, exhausted bool, reason job.Reason) {
	t.Record.Delay, t.Record.Why = delay, why
	at := now.Add(delay)
	switch {
	case exhausted:
		t.To, t.Reason = job.StateTerminal, reason
	case delay > job.MaxDelay:
		t.To, t.Reason = job.StateTerminal, job.ReasonNeedsReconciliation
	case !j.Deadline.IsZero() && at.After(j.Deadline):
		t.To, t.Reason = job.StateTerminal, job.ReasonDeadlineExceeded
	default:
		t.To, t.EligibleAt = job.StateRetryScheduled, at
	}
}
