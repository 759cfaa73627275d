// Package rltype is ratelane's public vocabulary: the job record, its
// states and the transitions between them, terminal reasons, lane classes,
// the outcome classes a handler returns and the remaining-quota hints it may
// attach. It imports only the standard library, so a program can name these
// types (write an OutcomeHandler, read a job's state or reason) without
// pulling in ratelane's engine, stores or HTTP API, the way River's rivertype
// does. The root package ratelane re-exports the common names; the internal
// packages alias them (internal/job), so there is one definition of what a
// job is.
package rltype

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Size and count limits that every entry point enforces. They are exported so
// the HTTP API, the Go library and the stores agree on one set of numbers.
const (
	// MaxPayloadBytes is the largest JSON payload a job may carry. Larger
	// content belongs in a content store, passed to the job by reference.
	MaxPayloadBytes = 256 << 10
	// MaxLimitKeys is how many limit keys one job may name.
	MaxLimitKeys = 4
	// MaxDelay is the furthest in the future a job or a retry may be
	// scheduled. A retry that would land later ends the job with
	// ReasonNeedsReconciliation instead.
	MaxDelay = 7 * 24 * time.Hour
	// MaxNameLen bounds kinds, tenants, regions, limit keys and idempotency keys.
	MaxNameLen = 200
)

// Lane is a job's lane class: whether someone is waiting for it.
type Lane string

const (
	// LaneInteractive is work someone is waiting for. It has a latency
	// budget and is leased before batch work.
	LaneInteractive Lane = "interactive"
	// LaneBatch is deferred work. It yields to interactive work while the
	// interactive latency budget is threatened, and otherwise keeps a
	// minimum share of starts so it is never starved.
	LaneBatch Lane = "batch"
)

// Lanes lists every lane class in scheduling order.
var Lanes = []Lane{LaneInteractive, LaneBatch}

// Valid reports whether l is a known lane class.
func (l Lane) Valid() bool { return l == LaneInteractive || l == LaneBatch }

// Budgets are the maximum attempts a job may spend per failure class. Each
// budget is separate: congestion (429s) never spends the transient or schema
// budget and the other way round.
type Budgets struct {
	Congestion int `json:"congestion"`
	Transient  int `json:"transient"`
	Schema     int `json:"schema"`
}

// DefaultBudgets are used for every zero field of a job's Budgets.
var DefaultBudgets = Budgets{Congestion: 20, Transient: 5, Schema: 2}

// WithDefaults returns b with every zero budget replaced by its default.
func (b Budgets) WithDefaults() Budgets {
	b.Congestion = cmp.Or(b.Congestion, DefaultBudgets.Congestion)
	b.Transient = cmp.Or(b.Transient, DefaultBudgets.Transient)
	b.Schema = cmp.Or(b.Schema, DefaultBudgets.Schema)
	return b
}

// Attempts counts the attempts a job has spent, per budget.
type Attempts struct {
	Congestion int `json:"congestion"`
	Transient  int `json:"transient"`
	Schema     int `json:"schema"`
}

// AttemptRecord is one line of a job's attempt history. It records what
// happened and why the next step was chosen; it never holds payload, prompt,
// diff or model output.
type AttemptRecord struct {
	At      time.Time     `json:"at"`
	Attempt int           `json:"attempt"`
	Outcome Class         `json:"outcome"`
	Status  int           `json:"status,omitempty"`
	Delay   time.Duration `json:"delay_ns,omitempty"`
	Why     string        `json:"why,omitempty"`
	Error   string        `json:"error,omitempty"`
	// Count is how many attempts this record stands for: consecutive
	// pending passes (ClassPending) are folded into one record, which
	// then holds the newest pass's fields (At, Attempt, Delay, Why,
	// Error) and how many there were. Zero (left out of the JSON) means
	// one, as in every record that is not a fold. See the store's
	// FoldsRecord for the rule.
	Count int `json:"count,omitempty"`
	// FirstAt is when the first of the folded passes ended; zero (left
	// out) unless Count is 2 or more. At is when the newest ended.
	FirstAt time.Time `json:"first_at,omitzero"`
}

// Job is one immutable unit of work and its progress. The fields above
// State are fixed when the job is inserted; the ones below it are written
// only by the engine through guarded store transitions.
type Job struct {
	ID             string          `json:"id"`
	Kind           string          `json:"kind"`
	Region         string          `json:"region"`
	Lane           Lane            `json:"lane"`
	Tenant         string          `json:"tenant"`
	LimitKeys      []string        `json:"limit_keys"`
	Cost           int64           `json:"cost"`
	Priority       int             `json:"priority"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Deadline       time.Time       `json:"deadline,omitzero"`
	Budgets        Budgets         `json:"budgets"`
	ParentID       string          `json:"parent_id,omitempty"`
	Depth          string          `json:"depth,omitempty"`

	State          State           `json:"state"`
	Reason         Reason          `json:"reason,omitempty"`
	EligibleAt     time.Time       `json:"eligible_at"`
	Attempt        int             `json:"attempt"`
	Attempts       Attempts        `json:"attempts"`
	LeaseToken     string          `json:"-"`
	LeaseExpiresAt time.Time       `json:"lease_expires_at,omitzero"`
	History        []AttemptRecord `json:"history,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	FinishedAt     time.Time       `json:"finished_at,omitzero"`
}

// ValidationError lists what is wrong with a job description, one entry per
// field, so the HTTP API can answer with per-field violations.
type ValidationError struct {
	Fields []FieldError
}

// FieldError is one violation: the field's JSON name and a sentence a person
// can act on.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Detail
	}
	return "invalid job: " + strings.Join(parts, "; ")
}

func (e *ValidationError) add(field, format string, args ...any) {
	e.Fields = append(e.Fields, FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

// ErrPayloadTooLarge is wrapped by Validate when the payload exceeds
// MaxPayloadBytes, so callers can answer 413 rather than 400.
var ErrPayloadTooLarge = errors.New("payload too large")

// Validate checks the fields a producer sets. regions is the configured set
// of region names; an empty set accepts any non-empty region. It returns a
// *ValidationError, or one wrapping ErrPayloadTooLarge (test with errors.Is).
func (j *Job) Validate(regions []string) error {
	ve := &ValidationError{}
	checkName(ve, "kind", j.Kind, true)
	checkName(ve, "tenant", j.Tenant, false)
	checkName(ve, "idempotency_key", j.IdempotencyKey, false)
	if checkName(ve, "region", j.Region, true) && len(regions) > 0 && !slices.Contains(regions, j.Region) {
		ve.add("region", "unknown region %q; configured regions are %s", j.Region, strings.Join(regions, ", "))
	}
	if !j.Lane.Valid() {
		ve.add("lane", "lane must be %q or %q, not %q", LaneInteractive, LaneBatch, j.Lane)
	}
	checkKeys(ve, j.LimitKeys)
	if j.Cost < 1 {
		ve.add("cost", "cost must be at least 1, got %d", j.Cost)
	}
	if j.Priority < -100 || j.Priority > 100 {
		ve.add("priority", "priority must be between -100 and 100, got %d", j.Priority)
	}
	b := j.Budgets
	if b.Congestion < 0 || b.Transient < 0 || b.Schema < 0 || b.Congestion > 1000 || b.Transient > 100 || b.Schema > 20 {
		ve.add("budgets", "budgets must be between 0 (default) and 1000 congestion, 100 transient, 20 schema attempts")
	}
	if len(j.Payload) > 0 && !json.Valid(j.Payload) {
		ve.add("payload", "payload is not valid JSON")
	}
	if len(ve.Fields) > 0 {
		return ve
	}
	if len(j.Payload) > MaxPayloadBytes {
		return fmt.Errorf("%w: payload is %d bytes, the limit is %d; store the content elsewhere and pass a reference to it in the payload",
			ErrPayloadTooLarge, len(j.Payload), MaxPayloadBytes)
	}
	return nil
}

func checkName(ve *ValidationError, field, v string, required bool) bool {
	switch {
	case v == "" && required:
		ve.add(field, "%s is required", field)
	case len(v) > MaxNameLen:
		ve.add(field, "%s is %d bytes long; the limit is %d", field, len(v), MaxNameLen)
	case strings.ContainsAny(v, "\x00\n\r\t"):
		ve.add(field, "%s must not contain control characters", field)
	default:
		return v != ""
	}
	return false
}

func checkKeys(ve *ValidationError, keys []string) {
	if len(keys) == 0 || len(keys) > MaxLimitKeys {
		ve.add("limit_keys", "a job names 1 to %d limit keys, got %d", MaxLimitKeys, len(keys))
		return
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			ve.add("limit_keys", "limit key %q is named twice", k)
		}
		seen[k] = true
		checkName(ve, "limit_keys", k, true)
	}
}

// DefaultTenant is the tenant of jobs inserted without one.
const DefaultTenant = "default"

// Prepare completes a producer's job description for insertion at now: it
// sets the id, the defaults (tenant, lane, cost, budgets), the state
// (waiting, or accepted when the kind splits work into parts first) and the
// timestamps. delay is added to now unless EligibleAt is already set.
func (j *Job) Prepare(id string, now time.Time, delay time.Duration, accepted bool) {
	j.ID = id
	j.Tenant = cmp.Or(j.Tenant, DefaultTenant)
	j.Lane = cmp.Or(j.Lane, LaneBatch)
	j.Cost = cmp.Or(j.Cost, 1)
	j.Budgets = j.Budgets.WithDefaults()
	j.State = StateWaiting
	if accepted {
		j.State = StateAccepted
	}
	if j.EligibleAt.IsZero() {
		j.EligibleAt = now.Add(delay)
	}
	j.CreatedAt, j.UpdatedAt = now, now
}

// CheckSchedule validates when a job may run relative to now: not more than
// MaxDelay ahead, and a deadline, if any, after its eligible time.
func (j *Job) CheckSchedule(now time.Time) error {
	ve := &ValidationError{}
	if j.EligibleAt.Sub(now) > MaxDelay {
		ve.add("run_at", "a job may be scheduled at most %s ahead", MaxDelay)
	}
	if j.EligibleAt.Before(now.Add(-time.Minute)) {
		ve.add("run_at", "run_at is in the past")
	}
	if !j.Deadline.IsZero() && !j.Deadline.After(j.EligibleAt) {
		ve.add("deadline", "deadline must be after the time the job becomes eligible")
	}
	if len(ve.Fields) > 0 {
		return ve
	}
	return nil
}
