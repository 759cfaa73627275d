package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

// Schedules is the part of the store contract that holds periodic producers:
// schedules that enqueue a job from a template once per tick, and the ledger
// of the ticks they claimed. The store does not parse cron expressions or
// time zones (internal/schedule does); it keeps the schedule's fields and
// makes the claim of a tick a guarded write, so that of many nodes polling
// the same store exactly one enqueues each tick.
type Schedules interface {
	// CreateSchedule persists a new schedule. ErrConflict when its id, or
	// its name within its tenant, is taken.
	CreateSchedule(ctx context.Context, s *Schedule) error
	// GetSchedule returns one schedule or ErrNotFound.
	GetSchedule(ctx context.Context, id string) (*Schedule, error)
	// ListSchedules returns schedules matching p in id order.
	ListSchedules(ctx context.Context, p ScheduleListParams) ([]*Schedule, error)
	// UpdateSchedule replaces the mutable fields of a schedule (everything
	// but ID, Tenant, Region, CreatedAt and the counters), guarded on
	// s.Version being the stored version; the stored version is then
	// s.Version+1. ErrConflict when the schedule changed since it was read
	// (another update, or a claim that moved NextAt), ErrNotFound when it
	// is gone. A pause is an update with Paused set.
	UpdateSchedule(ctx context.Context, s *Schedule) error
	// DeleteSchedule removes a schedule and its tick ledger; jobs it
	// produced stay. ErrNotFound when there is none.
	DeleteSchedule(ctx context.Context, id string) error
	// DueSchedules returns up to limit schedules that are not paused and
	// whose NextAt is at or before now, earliest first.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]*Schedule, error)
	// ClaimTick is the one write a producer makes per tick, in one
	// transaction: guarded on the schedule being unpaused with NextAt ==
	// p.Expect, it moves NextAt to p.Next, records p.Tick in the ledger and
	// inserts p.Job (as Insert would, creating unknown limit keys with
	// p.Def). A second claim of the same expected tick, by this node or
	// another, gets ErrConflict and inserts nothing; a crash before the
	// commit leaves the tick unclaimed, so it is claimed again, once. A
	// tick already in the ledger (the schedule was edited back onto it) is
	// not enqueued twice: the result names the job it produced then.
	ClaimTick(ctx context.Context, p ClaimTickParams) (ClaimTickResult, error)
	// ScheduleTickOf returns the ledger entry of the tick that produced a
	// job, or ErrNotFound for a job no schedule produced.
	ScheduleTickOf(ctx context.Context, jobID string) (ScheduleTick, error)
	// ListScheduleTicks returns a schedule's most recent ledger entries,
	// newest first, at most limit.
	ListScheduleTicks(ctx context.Context, scheduleID string, limit int) ([]ScheduleTick, error)
}

// Missed-tick policies (Schedule.Missed).
const (
	// MissedSkip enqueues a due tick only while it is at most MaxLate old;
	// older ticks (missed while no node ran, or while paused) are skipped
	// and counted, and the schedule continues with its next tick.
	MissedSkip = "skip"
	// MissedCatchUp enqueues missed ticks too, oldest first, but at most
	// CatchUpMax of them and none older than MaxLate; the rest are skipped
	// and counted.
	MissedCatchUp = "catch_up"
)

// Schedule is one periodic producer of a tenant in one region.
type Schedule struct {
	ID     string
	Tenant string
	Region string
	// Name is unique within the tenant.
	Name string
	// Cron is a cron expression (five fields, or a descriptor such as
	// @hourly); exactly one of Cron and Every is set.
	Cron string
	// Every is a fixed interval, counted from Anchor.
	Every time.Duration
	// Anchor is where a fixed interval's ticks are counted from.
	Anchor time.Time
	// TimeZone is the IANA zone cron fields are read in ("UTC" by default).
	TimeZone string
	// Missed is MissedSkip or MissedCatchUp.
	Missed string
	// CatchUpMax bounds the missed ticks MissedCatchUp enqueues at once.
	CatchUpMax int
	// MaxLate is the age past which a tick is skipped rather than enqueued.
	MaxLate time.Duration
	// Template is the job every tick enqueues, as JSON; opaque to the store.
	Template json.RawMessage
	// Kind is the template's job kind, kept beside it for listings.
	Kind   string
	Paused bool
	// NextAt is the earliest tick not yet claimed or skipped.
	NextAt time.Time
	// LastTickAt and LastJobID describe the last tick enqueued.
	LastTickAt time.Time
	LastJobID  string
	// Produced counts ticks enqueued, Skipped ticks dropped by the policy.
	Produced, Skipped int64
	// Version increases with every write; UpdateSchedule is guarded on it.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Check reports a schedule the store must refuse whatever its driver.
func (s *Schedule) Check() error {
	switch {
	case s.ID == "" || s.Tenant == "" || s.Region == "" || s.Name == "":
		return fmt.Errorf("schedule: id, tenant, region and name are required")
	case (s.Cron == "") == (s.Every == 0):
		return fmt.Errorf("schedule %s: exactly one of cron and every is set", s.ID)
	case s.Missed != MissedSkip && s.Missed != MissedCatchUp:
		return fmt.Errorf("schedule %s: missed policy %q is neither %s nor %s", s.ID, s.Missed, MissedSkip, MissedCatchUp)
	case s.NextAt.IsZero():
		return fmt.Errorf("schedule %s: NextAt is required", s.ID)
	case len(s.Template) == 0:
		return fmt.Errorf("schedule %s: a job template is required", s.ID)
	}
	return nil
}

// CheckIn is Check for the store of region, which also refuses a
// schedule of another region (each region has its own store).
func (s *Schedule) CheckIn(region string) error {
	return checkIn(s.Check(), "schedule", s.ID, s.Region, region)
}

// ScheduleListParams filters ListSchedules. Zero fields match everything.
type ScheduleListParams struct {
	Tenant string
	// After is the id of the last schedule of the previous page.
	After string
	// Limit is the page size: zero means DefaultListLimit, at most
	// MaxListLimit.
	Limit int
}

// ClaimTickParams describes the claim of one tick.
type ClaimTickParams struct {
	ScheduleID string
	// Expect is the NextAt the producer read: the claim is guarded on it.
	Expect time.Time
	// Tick is the tick enqueued; zero when the claim only skips ticks.
	Tick time.Time
	// Job is the job the tick enqueues (prepared and validated); nil when
	// the claim only skips ticks.
	Job *job.Job
	// Def configures limit keys the job names that do not exist yet.
	Def admission.Config
	// Next is the schedule's NextAt after the claim (after Tick).
	Next time.Time
	// Skipped is how many ticks before Tick the policy dropped.
	Skipped int64
	Now     time.Time
}

// ClaimTickResult is the outcome of a successful claim.
type ClaimTickResult struct {
	// Job is the job the tick produced (nil for a claim that only skips).
	Job *job.Job
	// Existing is true when the tick was already in the ledger or the job's
	// idempotency key already existed: Job is that earlier job.
	Existing bool
}

// ScheduleTick is one entry of a schedule's tick ledger.
type ScheduleTick struct {
	ScheduleID string
	Tick       time.Time
	JobID      string
	ClaimedAt  time.Time
}

// MaxScheduleTicksKept is how many ledger entries a schedule keeps; older
// ones are trimmed at each claim. The guard against a second enqueue of a
// tick is the NextAt compare-and-set; the ledger is what the job view and
// the dashboard show, plus a second guard for recent ticks.
const MaxScheduleTicksKept = 1000
