package ratelane

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// RateLimitedError says the upstream refused the attempt for congestion. The
// job's limit keys pause until RetryAfter has passed (for every worker) and
// the job is rescheduled on its congestion budget.
type RateLimitedError struct {
	// RetryAfter is the server-given delay; zero means "none given", and the
	// engine chooses capped exponential backoff with jitter.
	RetryAfter time.Duration
	// Key, when set, names the one limit key the limit applies to; empty
	// means all of the job's keys.
	Key string
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited (retry after %v)", e.RetryAfter)
}

// RateLimited returns an error that makes the attempt a congestion event.
// Pass the upstream's Retry-After, or zero when it gave none.
func RateLimited(retryAfter time.Duration) error { return &RateLimitedError{RetryAfter: retryAfter} }

// classified wraps an error with the class it was given by a helper.
type classified struct {
	class job.Class
	err   error
}

func (e *classified) Error() string {
	if e.err == nil {
		return string(e.class)
	}
	return e.err.Error()
}

func (e *classified) Unwrap() error { return e.err }

// Transient marks err as a transient failure (5xx, timeout, connection
// error): retried with backoff on the transient budget. Errors that are not
// classified otherwise are transient too.
func Transient(err error) error { return &classified{job.ClassTransient, err} }

// Permanent marks err as permanent (bad input, authentication failure, other
// 4xx): the job ends terminal/permanent_error at once and is never retried.
func Permanent(err error) error { return &classified{job.ClassPermanent, err} }

// InvalidOutput marks err as invalid upstream output (a schema failure):
// retried on the schema budget, never the congestion one.
func InvalidOutput(err error) error { return &classified{job.ClassInvalidOutput, err} }

// outcomeOf classifies a handler's error. The message recorded in the job's
// history is cut short: errors must not carry payloads, and a long message
// is a sign that one does.
func outcomeOf(err error) job.Outcome {
	if err == nil {
		// Before the targets below: errors.As takes their addresses, which
		// puts both on the heap, two allocations a success need not pay.
		return job.Outcome{Class: job.ClassSuccess}
	}
	return failedOutcome(err)
}

// failedOutcome classifies a handler's non-nil error (see outcomeOf).
func failedOutcome(err error) job.Outcome {
	var rl *RateLimitedError
	var c *classified
	switch {
	case errors.As(err, &rl):
		return job.Outcome{Class: job.ClassRateLimited, RetryAfter: rl.RetryAfter, RetrySource: "handler", Scope: rl.Key, Err: short(err)}
	case errors.As(err, &c):
		return job.Outcome{Class: c.class, Err: short(err)}
	default:
		return job.Outcome{Class: job.ClassTransient, Err: short(err)}
	}
}

func short(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
