package schedule

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Template is the job every tick of a schedule enqueues. It is stored as
// JSON in the schedule (store.Schedule.Template) and is the "job" object of
// the HTTP API's schedule requests.
type Template struct {
	Kind      string          `json:"kind" required:"true" doc:"job kind; the built-in kinds listed as reserved_kinds in GET /v1 are refused with 422"`
	Lane      job.Lane        `json:"lane,omitempty" enum:"interactive,batch" doc:"the lane of every produced job; default batch"`
	LimitKeys []string        `json:"limit_keys" required:"true" doc:"1 to 4 limit keys that must all admit each produced job"`
	Payload   json.RawMessage `json:"payload,omitempty" doc:"any JSON value, at most 256 KiB, copied into every produced job"`
	Priority  int             `json:"priority,omitempty" doc:"-100..100, higher first within a tenant's group"`
	Cost      int64           `json:"cost,omitempty" doc:"what one start takes from each key's bucket; default 1"`
	Budgets   *job.Budgets    `json:"budgets,omitempty" doc:"maximum attempts per failure class; zero fields take defaults"`
	// DeadlineSeconds, when set, gives every produced job a deadline that
	// many seconds after its tick.
	DeadlineSeconds float64 `json:"deadline_seconds,omitempty" doc:"each produced job ends as deadline_exceeded if not done this many seconds after its tick"`
}

// IdempotencyKeyPrefix starts the idempotency key of every job a schedule
// produces: "ratelane.schedule/<schedule id>/<tick, RFC 3339 UTC>". With the
// claim's guard and the tick ledger it is a third guard against a second
// enqueue of a tick, and it says in the job itself where it came from.
const IdempotencyKeyPrefix = "ratelane.schedule/"

// TickKey is the idempotency key of the job of schedule id's tick.
func TickKey(id string, tick time.Time) string {
	return IdempotencyKeyPrefix + id + "/" + tick.UTC().Format(time.RFC3339Nano)
}

// Job builds the job of one tick of sc, eligible at now, prepared and
// validated against regions (empty: any region).
func (t Template) Job(sc *store.Schedule, tick, now time.Time, regions []string) (*job.Job, error) {
	if err := job.CheckPublicKind("job.kind", t.Kind); err != nil {
		return nil, err
	}
	if t.DeadlineSeconds < 0 || t.DeadlineSeconds > job.MaxDelay.Seconds() {
		return nil, fieldErr("job.deadline_seconds", "deadline_seconds must be from 0 to %v (7 days), got %v", job.MaxDelay.Seconds(), t.DeadlineSeconds)
	}
	j := &job.Job{
		Kind: t.Kind, Region: sc.Region, Lane: t.Lane, Tenant: sc.Tenant, LimitKeys: t.LimitKeys,
		Payload: t.Payload, Priority: t.Priority, Cost: t.Cost, IdempotencyKey: TickKey(sc.ID, tick),
	}
	if t.Budgets != nil {
		j.Budgets = *t.Budgets
	}
	if t.DeadlineSeconds > 0 {
		j.Deadline = tick.Add(time.Duration(t.DeadlineSeconds * float64(time.Second)))
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	j.Prepare(id.String(), now, 0, false)
	if err := j.Validate(regions); err != nil {
		return nil, prefixFields(err, "job.")
	}
	return j, nil
}

// prefixFields renames a validation error's fields under prefix, so the
// API names "job.limit_keys" rather than a top-level field.
func prefixFields(err error, prefix string) error {
	ve, ok := err.(*job.ValidationError)
	if !ok {
		return err
	}
	out := &job.ValidationError{Fields: make([]job.FieldError, len(ve.Fields))}
	for i, f := range ve.Fields {
		out.Fields[i] = job.FieldError{Field: prefix + f.Field, Detail: f.Detail}
	}
	return out
}

// DecodeTemplate reads a stored template.
func DecodeTemplate(raw json.RawMessage) (Template, error) {
	var t Template
	if err := json.Unmarshal(raw, &t); err != nil {
		return t, fmt.Errorf("schedule template: %w", err)
	}
	return t, nil
}

// SpecOf parses a stored schedule's spec.
func SpecOf(sc *store.Schedule) (Spec, error) {
	return Parse(sc.Cron, sc.Every, sc.Anchor, sc.TimeZone)
}

// PolicyOf is a stored schedule's missed-tick policy.
func PolicyOf(sc *store.Schedule) Policy {
	return Policy{Missed: sc.Missed, CatchUpMax: sc.CatchUpMax, MaxLate: sc.MaxLate}.WithDefaults()
}

// Resume unpauses sc at now. Its next tick is the first after now: the
// ticks of the pause are not produced, whatever the missed-tick policy,
// since a pause means "do not produce".
func Resume(sc *store.Schedule, now time.Time) error {
	spec, err := SpecOf(sc)
	if err != nil {
		return err
	}
	sc.Paused, sc.NextAt, sc.UpdatedAt = false, spec.Next(now), now
	return nil
}
