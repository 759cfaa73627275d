package rltype

import (
	"encoding/json"
	"time"
)

// Class is the classification of one attempt's outcome. The engine maps each
// class to exactly one kind of transition; see the engine's Decide.
type Class string

// Outcome classes.
const (
	// ClassSuccess: the work was done. The job moves to validated when its
	// kind has a publication step, else straight to published.
	ClassSuccess Class = "success"
	// ClassRateLimited: the upstream said "too many requests" (429, or 503
	// with Retry-After). The limit key pauses for every node, the job is
	// rescheduled on the congestion budget and its lease released.
	ClassRateLimited Class = "rate_limited"
	// ClassTransient: 5xx, timeout or connection error; retried with backoff
	// on the transient budget.
	ClassTransient Class = "transient"
	// ClassInvalidOutput: the upstream answered but its output failed parsing
	// or validation; retried on the schema budget, never the congestion one.
	ClassInvalidOutput Class = "invalid_output"
	// ClassPermanent: bad input, authentication failure, other 4xx: terminal
	// at once, never retried.
	ClassPermanent Class = "permanent"
	// ClassPending: the attempt made progress but the work goes on
	// elsewhere (a provider's batch runs for hours); run the job again
	// after RetryAfter (default DefaultPendingDelay). It spends no budget
	// and pauses no key: each pass still costs its admission on the job's
	// keys, which is how the batch lane paces its provider calls. Used by
	// built-in kinds that drive long-running work.
	ClassPending Class = "pending"
	// ClassLeaseExpired is recorded by the reaper when a worker lost its
	// lease; it spends one transient attempt.
	ClassLeaseExpired Class = "lease_expired"
	// ClassCancelled is recorded when a job is cancelled.
	ClassCancelled Class = "cancelled"
	// ClassRedriven is recorded when an operator redrives a dead letter.
	ClassRedriven Class = "redriven"
)

// DefaultPendingDelay is the wait before the next pass of a ClassPending
// outcome that gave no RetryAfter.
const DefaultPendingDelay = time.Minute

// Hint is what an upstream said about a limit key's remaining quota. A hint
// lets the key's bucket slow down before a 429 happens.
type Hint struct {
	// Key is the limit key the hint is about; empty means all of the job's keys.
	Key string `json:"key,omitempty"`
	// Limit is the quota per window, or -1 when unknown.
	Limit int64 `json:"limit"`
	// Remaining is what is left of the quota, or -1 when unknown.
	Remaining int64 `json:"remaining"`
	// Reset is how long until the quota refills; zero when unknown.
	Reset time.Duration `json:"reset_ns"`
	// Window is the policy window Limit counts over (an IETF RateLimit-
	// Policy's w); zero when the upstream did not say. With it, Limit over
	// Window is the allowance the upstream announced.
	Window time.Duration `json:"window_ns,omitempty"`
}

// Outcome is what a handler returns for one attempt. Handlers never change job
// state themselves; the engine turns an Outcome into a guarded transition.
type Outcome struct {
	Class Class
	// Result is the validated result of a successful attempt (success only).
	Result json.RawMessage
	// RetryAfter is the server-given delay, when valid. Zero means none was
	// given and the engine chooses capped exponential backoff with jitter.
	RetryAfter time.Duration
	// RetrySource says where RetryAfter came from ("retry-after",
	// "x-ratelimit-reset-requests", ...) for the attempt history.
	RetrySource string
	// Scope is the limit key a rate limit applies to. Empty means all of the
	// job's keys.
	Scope string
	// Status is the upstream's HTTP status, when there was one.
	Status int
	// Err is a short description of a failure. It must never contain payload,
	// prompt, diff or model output.
	Err string
	// Reason overrides the terminal reason of a permanent outcome, e.g.
	// ReasonProviderQuotaExhausted.
	Reason Reason
	// PauseKeyFor pauses the scope's limit key for this long even for a
	// permanent outcome (a provider's spent quota). On a pending outcome
	// it reports a refusal the pass met (a 429 on a provider batch
	// create): the keys pause for every node and learn from it as for a
	// rate-limited outcome, without spending the congestion budget.
	PauseKeyFor time.Duration
	// Hints carry remaining-quota information to the adaptive buckets.
	Hints []Hint
	// Usage is the actual cost of the attempt (e.g. tokens used), reconciled
	// against the job's estimated cost. Zero means "as estimated".
	Usage int64
}
