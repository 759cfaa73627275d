// Package job is the internal name of ratelane's vocabulary. Every name in
// it is an alias of the public package rltype (the job record, states,
// transitions, reasons, lanes, outcomes and hints), kept so the stores, the
// engine and the HTTP API keep one short import while a program outside the
// module names the same types through rltype. It imports only rltype and the
// standard library.
package job

import "github.com/ratelane/ratelane/rltype"

// Limits every entry point enforces; see rltype.
const (
	// MaxPayloadBytes is rltype.MaxPayloadBytes.
	MaxPayloadBytes = rltype.MaxPayloadBytes
	// MaxLimitKeys is rltype.MaxLimitKeys.
	MaxLimitKeys = rltype.MaxLimitKeys
	// MaxDelay is rltype.MaxDelay.
	MaxDelay = rltype.MaxDelay
	// MaxNameLen is rltype.MaxNameLen.
	MaxNameLen = rltype.MaxNameLen
	// DefaultTenant is rltype.DefaultTenant.
	DefaultTenant = rltype.DefaultTenant
)

// Defaults of every configuration; see rltype.
const (
	// DefaultInteractiveBudget is rltype.DefaultInteractiveBudget.
	DefaultInteractiveBudget = rltype.DefaultInteractiveBudget
	// DefaultBatchBudget is rltype.DefaultBatchBudget.
	DefaultBatchBudget = rltype.DefaultBatchBudget
	// DefaultRetention is rltype.DefaultRetention.
	DefaultRetention = rltype.DefaultRetention
	// DefaultWorkers is rltype.DefaultWorkers.
	DefaultWorkers = rltype.DefaultWorkers
	// DefaultLeaseFor is rltype.DefaultLeaseFor.
	DefaultLeaseFor = rltype.DefaultLeaseFor
)

// Types of the vocabulary; each is the rltype type of the same name.
type (
	// Job is rltype.Job.
	Job = rltype.Job
	// Lane is rltype.Lane.
	Lane = rltype.Lane
	// State is rltype.State.
	State = rltype.State
	// Reason is rltype.Reason.
	Reason = rltype.Reason
	// Class is rltype.Class.
	Class = rltype.Class
	// Outcome is rltype.Outcome.
	Outcome = rltype.Outcome
	// Hint is rltype.Hint.
	Hint = rltype.Hint
	// Budgets is rltype.Budgets.
	Budgets = rltype.Budgets
	// Attempts is rltype.Attempts.
	Attempts = rltype.Attempts
	// AttemptRecord is rltype.AttemptRecord.
	AttemptRecord = rltype.AttemptRecord
	// ValidationError is rltype.ValidationError.
	ValidationError = rltype.ValidationError
	// FieldError is rltype.FieldError.
	FieldError = rltype.FieldError
)

// Lane classes.
const (
	LaneInteractive = rltype.LaneInteractive
	LaneBatch       = rltype.LaneBatch
)

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

// Outcome classes.
const (
	ClassSuccess       = rltype.ClassSuccess
	ClassRateLimited   = rltype.ClassRateLimited
	ClassTransient     = rltype.ClassTransient
	ClassInvalidOutput = rltype.ClassInvalidOutput
	ClassPermanent     = rltype.ClassPermanent
	ClassLeaseExpired  = rltype.ClassLeaseExpired
	ClassCancelled     = rltype.ClassCancelled
	ClassRedriven      = rltype.ClassRedriven
	ClassPending       = rltype.ClassPending
)

// DefaultPendingDelay is the wait after a ClassPending outcome without RetryAfter.
const DefaultPendingDelay = rltype.DefaultPendingDelay

// Terminal reasons.
const (
	ReasonRateLimitBudgetExhausted = rltype.ReasonRateLimitBudgetExhausted
	ReasonTransientBudgetExhausted = rltype.ReasonTransientBudgetExhausted
	ReasonSchemaBudgetExhausted    = rltype.ReasonSchemaBudgetExhausted
	ReasonPermanentError           = rltype.ReasonPermanentError
	ReasonProviderQuotaExhausted   = rltype.ReasonProviderQuotaExhausted
	ReasonCancelled                = rltype.ReasonCancelled
	ReasonDeadlineExceeded         = rltype.ReasonDeadlineExceeded
	ReasonNeedsReconciliation      = rltype.ReasonNeedsReconciliation
	ReasonSubscriberGone           = rltype.ReasonSubscriberGone
)

// Lists and sentinels of the vocabulary, shared with rltype (the same
// values, not copies: errors.Is matches across both names).
var (
	// Lanes is rltype.Lanes.
	Lanes = rltype.Lanes
	// States is rltype.States.
	States = rltype.States
	// Reasons is rltype.Reasons.
	Reasons = rltype.Reasons
	// DefaultBudgets is rltype.DefaultBudgets.
	DefaultBudgets = rltype.DefaultBudgets
	// ErrPayloadTooLarge is rltype.ErrPayloadTooLarge.
	ErrPayloadTooLarge = rltype.ErrPayloadTooLarge
)

// CanTransition is rltype.CanTransition.
func CanTransition(from, to State) bool { return rltype.CanTransition(from, to) }
