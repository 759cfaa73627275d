package rltype

// State is where a job is in its life. The same set is enforced by a SQL CHECK
// constraint in every store and drawn in docs/state-machine.md.
type State string

const (
	// StateAccepted: persisted by the API in its region but not yet admitted
	// to a lane, e.g. a review whose diff is being split into parts. A parent
	// job stays accepted until all of its parts have finished.
	StateAccepted State = "accepted"
	// StateWaiting: ready to be leased once eligible_at <= now and all of its
	// limit keys admit it.
	StateWaiting State = "waiting"
	// StateRunning: leased by exactly one worker until lease_expires_at, which
	// is never null. An expired lease returns the job to waiting.
	StateRunning State = "running"
	// StateRetryScheduled: an attempt failed in a retryable way; a later
	// eligible_at was recorded and the lease released. Nobody sleeps: the job
	// becomes waiting again when eligible_at is reached.
	StateRetryScheduled State = "retry_scheduled"
	// StateValidated: the result passed parsing and application checks but has
	// not been delivered yet.
	StateValidated State = "validated"
	// StatePublished: delivered, exactly once (a compare-and-set from
	// validated, or the direct success of a kind with no validation step).
	StatePublished State = "published"
	// StateTerminal: failed for good, with a Reason. Terminal jobs are the
	// dead-letter set and may be redriven.
	StateTerminal State = "terminal"
)

// States lists every state, in lifecycle order.
var States = []State{StateAccepted, StateWaiting, StateRunning, StateRetryScheduled, StateValidated, StatePublished, StateTerminal}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	for _, v := range States {
		if v == s {
			return true
		}
	}
	return false
}

// Final reports whether no transition leaves s (other than a redrive of a
// terminal job, which is an explicit operator action).
func (s State) Final() bool { return s == StatePublished || s == StateTerminal }

// transitions is the state machine of DESIGN.md. Cancel (any non-final state
// to terminal) is included. Terminal -> waiting is the operator's redrive.
var transitions = map[State][]State{
	StateAccepted:       {StateWaiting, StateValidated, StateTerminal},
	StateWaiting:        {StateRunning, StateTerminal},
	StateRunning:        {StateWaiting, StateRetryScheduled, StateValidated, StatePublished, StateTerminal},
	StateRetryScheduled: {StateWaiting, StateTerminal},
	StateValidated:      {StatePublished, StateTerminal},
	StatePublished:      {},
	StateTerminal:       {StateWaiting},
}

// CanTransition reports whether the state machine allows from -> to. Stores
// call it before every write so that an illegal transition is a bug caught
// in Go, not only by a constraint.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Reason says why a job is terminal. It is machine-readable and bounded, so it
// may be used as a metric label.
type Reason string

// Terminal reasons.
const (
	ReasonRateLimitBudgetExhausted Reason = "rate_limit_budget_exhausted"
	ReasonTransientBudgetExhausted Reason = "transient_budget_exhausted"
	ReasonSchemaBudgetExhausted    Reason = "schema_budget_exhausted"
	ReasonPermanentError           Reason = "permanent_error"
	ReasonProviderQuotaExhausted   Reason = "provider_quota_exhausted"
	ReasonCancelled                Reason = "cancelled"
	ReasonDeadlineExceeded         Reason = "deadline_exceeded"
	ReasonNeedsReconciliation      Reason = "needs_reconciliation"
	ReasonSubscriberGone           Reason = "subscriber_gone"
)

// Reasons lists every terminal reason.
var Reasons = []Reason{
	ReasonRateLimitBudgetExhausted, ReasonTransientBudgetExhausted, ReasonSchemaBudgetExhausted,
	ReasonPermanentError, ReasonProviderQuotaExhausted, ReasonCancelled, ReasonDeadlineExceeded,
	ReasonNeedsReconciliation, ReasonSubscriberGone,
}
