package ratelane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
)

// Handler runs one attempt of a job. Return nil (with an optional result,
// stored as JSON) for success, or an error made with RateLimited, Transient,
// Permanent or InvalidOutput; any other error counts as transient. Handlers
// never change job state themselves.
type Handler interface {
	Work(ctx context.Context, j *Job) (result any, err error)
}

// OutcomeHandler is a lower-level handler that returns an Outcome directly,
// e.g. with rate-limit hints parsed from the upstream's headers. A Handler
// that also implements OutcomeHandler is called through HandleOutcome.
type OutcomeHandler interface {
	HandleOutcome(ctx context.Context, j *Job) Outcome
}

// OutcomeFunc adapts a function that returns an Outcome (typically built
// with ResponseOutcome) to a Handler that Config.Handle accepts; the engine
// calls it through HandleOutcome.
type OutcomeFunc func(ctx context.Context, j *Job) Outcome

// HandleOutcome calls f.
func (f OutcomeFunc) HandleOutcome(ctx context.Context, j *Job) Outcome { return f(ctx, j) }

// Work calls f and translates its outcome into Handler's terms: the result
// of a success, or the error helper of the outcome's class. The engine
// never calls it (it prefers HandleOutcome); it lets an OutcomeFunc be used
// wherever a Handler is called directly, e.g. in a test.
func (f OutcomeFunc) Work(ctx context.Context, j *Job) (any, error) {
	o := f(ctx, j)
	var cause error
	if o.Err != "" {
		cause = errors.New(o.Err)
	}
	switch o.Class {
	case job.ClassSuccess:
		if o.Result == nil {
			return nil, nil
		}
		return o.Result, nil
	case job.ClassRateLimited:
		return nil, &RateLimitedError{RetryAfter: o.RetryAfter, Key: o.Scope}
	case job.ClassPermanent:
		return nil, Permanent(cause)
	case job.ClassInvalidOutput:
		return nil, InvalidOutput(cause)
	default:
		return nil, Transient(cause)
	}
}

// Publisher delivers a validated result; it must be idempotent.
type Publisher interface {
	Publish(ctx context.Context, j *Job) error
}

// WorkFunc returns a Handler that decodes each job's JSON payload into T and
// calls fn with it. A payload that does not decode is a permanent error: a
// retry would fail the same way.
func WorkFunc[T any](fn func(ctx context.Context, j *Job, args T) (any, error)) Handler {
	return typed[T](fn)
}

type typed[T any] func(ctx context.Context, j *Job, args T) (any, error)

func (f typed[T]) Work(ctx context.Context, j *Job) (any, error) {
	var args T
	if len(j.Payload) > 0 {
		if err := json.Unmarshal(j.Payload, &args); err != nil {
			return nil, Permanent(fmt.Errorf("decode %s payload: %w", j.Kind, err))
		}
	}
	return f(ctx, j, args)
}

// adapt turns a Handler into the engine's outcome-returning handler.
func adapt(h Handler) engine.Handler {
	if oh, ok := h.(OutcomeHandler); ok {
		return engine.HandlerFunc(oh.HandleOutcome)
	}
	return engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
		res, err := h.Work(ctx, j)
		o := outcomeOf(err)
		if o.Class == job.ClassSuccess && res != nil {
			b, merr := json.Marshal(res)
			if merr != nil {
				return job.Outcome{Class: job.ClassPermanent, Err: "result is not JSON-serialisable"}
			}
			o.Result = b
		}
		return o
	})
}
