// Package ratelane is a durable, rate-aware job queue for work that calls
// rate-limited APIs: LLM providers, webhook subscribers, partner APIs.
//
// A job names one to four limit keys; a job is leased only when every one of
// its keys admits it (a token in the key's bucket, below its concurrency cap,
// not paused). A 429 is a scheduling event: the handler returns RateLimited,
// the key pauses for every worker until the server's Retry-After, and the
// job is rescheduled with its lease released; nobody sleeps. Every region
// has its own store (SQLite embedded by default, PostgreSQL to scale out).
//
// Most programs create one Client with a Config, register a handler per job
// kind, Start it, Insert jobs, and Stop it on shutdown:
//
//	cfg := ratelane.Config{DataDir: "./data"}
//	cfg.Handle("email", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, args Email) (any, error) { ... }))
//	client, err := ratelane.NewClient(ctx, cfg)
//	client.Start(ctx)
//	client.Insert(ctx, ratelane.InsertParams{Kind: "email", Region: "eu", LimitKeys: []string{"smtp"}, Args: Email{...}})
package ratelane

import (
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/rltype"
)

// Job is one unit of work and its progress; see package rltype for each
// field. rltype imports only the standard library, so code that only names
// jobs and outcomes need not import this package.
type Job = rltype.Job

// Lane is a job's lane class: LaneInteractive or LaneBatch.
type Lane = rltype.Lane

// State is where a job is in its life.
type State = rltype.State

// Reason says why a terminal job ended.
type Reason = rltype.Reason

// Outcome is what a low-level handler (OutcomeHandler) returns for one
// attempt; ResponseOutcome builds one from an upstream's HTTP answer.
type Outcome = rltype.Outcome

// Class classifies an Outcome: ClassSuccess, ClassRateLimited,
// ClassTransient, ClassInvalidOutput or ClassPermanent.
type Class = rltype.Class

// Hint is an upstream's remaining-quota information about a limit key,
// carried by an Outcome so the key slows down before a 429.
type Hint = rltype.Hint

// Budgets are the per-class attempt budgets of a job.
type Budgets = rltype.Budgets

// Limit is a limit key's configuration: its shapes (a token bucket of Rate
// and Burst, sliding or fixed Windows), a concurrency cap and adaptive
// mode. A start
// is admitted only when every shape admits it.
type Limit = admission.Config

// Window is a window shape of a Limit: at most Limit cost units start in
// any interval of length Period (sliding), or with Fixed in each interval
// of length Period aligned to the Unix epoch.
type Window = admission.Window

// UpstreamLimit returns the Limit for a key that calls an upstream
// declaring rate requests per second with the given burst (for instance a
// provider's documented quota). It never overruns a sliding one-second
// window of the declared rate, the strictest reading of "rate per second":
// a window of the rate per second, which counts each start from its lease
// until its outcome is reported, so that jitter between a start and its
// arrival upstream does not turn into 429s, and a bucket 3% below the rate
// with half the burst, which spreads starts out. Set Limit's fields directly to pace exactly, or use
// UpstreamWindowLimit for an allowance per minute or hour.
func UpstreamLimit(name string, rate, burst float64) Limit {
	return admission.Upstream(name, rate, burst, admission.DefaultHeadroom)
}

// UpstreamWindowLimit is UpstreamLimit for an upstream declaring at most
// limit requests in any window of period (e.g. 200 per minute); burst zero
// means one second's worth. When the burst is a whole window (limit or
// more), its bucket spreads each window's starts at 1.5 times
// limit/period instead of pacing 3% below it: the window alone bounds the
// rate (see admission.UpstreamWindow). An adaptive key's Rate is the
// ceiling its discovery probes to and scales its windows by: to make this
// Limit adaptive, set Rate back to the declared rate (less a margin, as
// webhook subscribers do) along with Adaptive.
func UpstreamWindowLimit(name string, limit float64, period time.Duration, burst float64) Limit {
	return admission.UpstreamWindow(name, limit, period, burst, admission.DefaultHeadroom)
}

// UpstreamFixedWindowLimit is UpstreamLimit for an upstream declaring at
// most limit requests in each window of period aligned to the clock (a
// quota that resets at :00, e.g. 5000 per hour on the hour): a fixed
// window of limit per aligned period, in which a start within 3% of the
// period (at least 20 ms) of a window's end also counts in the next, so
// that a request arriving after the upstream rolled over does not find
// that window already full; a burst below limit adds a bucket at exactly
// limit/period with that burst to spread each window's starts (zero
// means none: each window's whole allowance as it opens). Use it only for an upstream that documents a fixed window:
// against a sliding one it overruns by up to limit across a boundary.
func UpstreamFixedWindowLimit(name string, limit float64, period time.Duration, burst float64) Limit {
	return admission.UpstreamFixedWindow(name, limit, period, burst, admission.DefaultHeadroom)
}

// LimitState is a limit key's configuration plus its live shared state.
type LimitState = admission.State

// Lane classes.
const (
	LaneInteractive = rltype.LaneInteractive
	LaneBatch       = rltype.LaneBatch
)

// Lanes lists the lane classes, interactive first.
var Lanes = rltype.Lanes

// Job states.
const (
	StateAccepted       = rltype.StateAccepted
	StateWaiting        = rltype.StateWaiting
	StateRunning        = rltype.StateRunning
	StateRetryScheduled = rltype.StateRetryScheduled
	StateValidated      = rltype.StateValidated
	StatePublished      = rltype.StatePublished
	StateTerminal       = rltype.StateTerminal
)

// Defaults of a zero Config field, the same in the library, the engine,
// the HTTP API and the CLI (defined once, in rltype).
const (
	DefaultInteractiveBudget = rltype.DefaultInteractiveBudget // 30 s
	DefaultBatchBudget       = rltype.DefaultBatchBudget       // 24 h
	DefaultRetention         = rltype.DefaultRetention         // 30 days
	DefaultWorkers           = rltype.DefaultWorkers           // 16 per region
	DefaultLeaseFor          = rltype.DefaultLeaseFor          // 30 s
)

// Outcome classes an OutcomeHandler returns.
const (
	ClassSuccess       = rltype.ClassSuccess
	ClassRateLimited   = rltype.ClassRateLimited
	ClassTransient     = rltype.ClassTransient
	ClassInvalidOutput = rltype.ClassInvalidOutput
	ClassPermanent     = rltype.ClassPermanent
)

// Version is ratelane's version, set at build time with
// -ldflags "-X github.com/ratelane/ratelane.Version=...".
var Version = "0.1.0-dev"
