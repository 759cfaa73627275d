package schedule

import (
	"cmp"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

// Defaults of Policy.
const (
	// DefaultSkipMaxLate is how late a tick may be under the skip policy
	// and still be enqueued: a node restarting or a producer a few polls
	// behind still runs the tick; one down for longer skips it.
	DefaultSkipMaxLate = time.Minute
	// DefaultCatchUpMaxLate is how old a missed tick may be under the
	// catch_up policy and still be enqueued.
	DefaultCatchUpMaxLate = 24 * time.Hour
	// DefaultCatchUpMax is how many missed ticks catch_up enqueues at most.
	DefaultCatchUpMax = 10
	// MaxCatchUp bounds CatchUpMax.
	MaxCatchUp = 1000
	// maxScan bounds the ticks Plan steps through to count skipped ones (a
	// per-second cron down for a week); past it the count is a lower bound.
	maxScan = 100_000
)

// Policy is what a schedule does with ticks that are due: the missed-tick
// policy. Missed is store.MissedSkip or store.MissedCatchUp.
//
// skip enqueues only the most recent due tick, and only when it is at most
// MaxLate old; every other due tick is skipped (counted, never enqueued).
// catch_up enqueues the most recent CatchUpMax due ticks that are at most
// MaxLate old, oldest first, and skips the rest. On a healthy node both
// behave alike: the producer polls every second, so one tick is due at a
// time. They differ after downtime, a pause (resume does not replay the
// ticks of the pause: see Resume), or a schedule faster than the poll.
type Policy struct {
	Missed     string
	CatchUpMax int
	MaxLate    time.Duration
}

// WithDefaults returns p with zero fields replaced by the defaults of its
// Missed policy (skip when empty).
func (p Policy) WithDefaults() Policy {
	p.Missed = cmp.Or(p.Missed, store.MissedSkip)
	if p.Missed == store.MissedSkip {
		p.CatchUpMax = 1
		p.MaxLate = cmp.Or(p.MaxLate, DefaultSkipMaxLate)
		return p
	}
	p.CatchUpMax = cmp.Or(p.CatchUpMax, DefaultCatchUpMax)
	p.MaxLate = cmp.Or(p.MaxLate, DefaultCatchUpMaxLate)
	return p
}

// Validate reports a policy out of range as a *job.ValidationError naming
// the field (missed, catch_up_max or max_late_seconds).
func (p Policy) Validate() error {
	switch {
	case p.Missed != store.MissedSkip && p.Missed != store.MissedCatchUp:
		return fieldErr("missed", "missed must be %s or %s, not %q", store.MissedSkip, store.MissedCatchUp, p.Missed)
	case p.CatchUpMax < 0 || p.CatchUpMax > MaxCatchUp:
		return fieldErr("catch_up_max", "catch_up_max must be from 1 to %d, got %d", MaxCatchUp, p.CatchUpMax)
	case p.Missed == store.MissedSkip && p.CatchUpMax > 1:
		return fieldErr("catch_up_max", "catch_up_max applies to missed=catch_up; skip enqueues at most the latest tick")
	case p.MaxLate < 0 || p.MaxLate > 7*24*time.Hour:
		return fieldErr("max_late_seconds", "max_late_seconds must be from 0 (default) to 7 days, got %s", p.MaxLate)
	}
	return nil
}

// Plan is what a producer does with a due schedule at one moment.
type Plan struct {
	// Ticks are the ticks to enqueue, oldest first.
	Ticks []time.Time
	// Skipped is how many due ticks the policy drops (a lower bound past
	// maxScan ticks).
	Skipped int64
	// Next is the first tick after now: the schedule's NextAt once Ticks
	// are claimed.
	Next time.Time
}

// Plan applies the policy (after WithDefaults) to a schedule whose earliest
// unclaimed tick is nextAt, at now. A nextAt after now plans nothing and
// Next is nextAt.
func (p Policy) Plan(spec Spec, nextAt, now time.Time) Plan {
	p = p.WithDefaults()
	if nextAt.After(now) {
		return Plan{Next: nextAt}
	}
	cutoff := now.Add(-p.MaxLate)
	out := Plan{Next: spec.Next(now)}
	t := nextAt
	// Ticks too old for the policy are only counted; stop counting after
	// maxScan and jump to the first tick at or after the cutoff.
	for n := 0; !t.IsZero() && t.Before(cutoff); n++ {
		if n == maxScan {
			t = spec.Next(cutoff.Add(-time.Nanosecond))
			break
		}
		out.Skipped++
		t = spec.Next(t)
	}
	// The ticks within MaxLate: keep the last CatchUpMax of them.
	var recent []time.Time
	for ; !t.IsZero() && !t.After(now); t = spec.Next(t) {
		recent = append(recent, t)
		if len(recent) > p.CatchUpMax {
			recent = recent[1:]
			out.Skipped++
		}
	}
	out.Ticks = recent
	return out
}
