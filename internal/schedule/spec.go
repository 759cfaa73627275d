// Package schedule runs ratelane's periodic producers: schedules that
// enqueue a job from a template once per tick, on a cron expression in an
// IANA time zone or on a fixed interval. It owns the computation of ticks
// (Spec.Next, with a stated daylight-saving policy), the missed-tick policy
// (Policy.Plan) and the Producer loop each node runs per region, which
// claims due ticks through the store's guarded ClaimTick so that of many
// nodes on one store exactly one enqueues each tick.
//
// Everything that decides takes now as a parameter; only Producer.Start
// reads the clock, and tests call Producer.RunOnce with the time they want.
package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/ratelane/ratelane/internal/job"
)

// MinEvery is the shortest fixed interval: the producer polls about once a
// second, so a shorter interval could only be met by catching up.
const MinEvery = time.Second

// Spec is a parsed schedule: a cron expression read in a time zone, or a
// fixed interval counted from an anchor. The zero Spec is not valid; make
// one with Parse.
type Spec struct {
	cron *cron.SpecSchedule // nil for a fixed interval
	wall *cron.SpecSchedule // cron's fields read on a UTC clock: wall times
	loc  *time.Location
	// everyHour is true when the cron's hour field is "*": such a spec
	// ticks in both runs of a repeated hour (it means "every hour").
	everyHour bool
	every     time.Duration
	anchor    time.Time
}

// cronParser reads five fields (minute hour day-of-month month
// day-of-week) and the descriptors @yearly, @monthly, @weekly, @daily,
// @hourly. @every is refused (use a fixed interval), and so is a CRON_TZ=
// prefix (use the time zone field).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse returns the Spec of a cron expression in zone tz ("" is UTC), or of
// a fixed interval every counted from anchor; exactly one of expr and every
// is set. Its errors are *job.ValidationError naming the field ("cron",
// "every" or "timezone").
func Parse(expr string, every time.Duration, anchor time.Time, tz string) (Spec, error) {
	switch {
	case expr == "" && every == 0:
		return Spec{}, fieldErr("cron", "a schedule needs a cron expression (cron) or a fixed interval (every)")
	case expr != "" && every != 0:
		return Spec{}, fieldErr("every", "set cron or every, not both")
	case every != 0:
		if every < MinEvery {
			return Spec{}, fieldErr("every", "every must be at least %s, got %s", MinEvery, every)
		}
		if anchor.IsZero() {
			return Spec{}, fieldErr("every", "a fixed interval needs an anchor time")
		}
		return Spec{every: every, anchor: anchor.UTC(), loc: time.UTC}, nil
	}
	loc, err := LoadZone(tz)
	if err != nil {
		return Spec{}, err
	}
	trimmed := strings.TrimSpace(expr)
	switch {
	case strings.HasPrefix(trimmed, "@every"):
		return Spec{}, fieldErr("cron", "@every is not a cron expression here; give the schedule a fixed interval instead of a cron expression (every_seconds over HTTP, --every in the CLI)")
	case strings.HasPrefix(trimmed, "CRON_TZ=") || strings.HasPrefix(trimmed, "TZ="):
		return Spec{}, fieldErr("cron", "name the time zone in the timezone field, not in the cron expression")
	}
	s, err := cronParser.Parse(trimmed)
	if err != nil {
		return Spec{}, fieldErr("cron", "%q is not a cron expression (minute hour day-of-month month day-of-week, or @hourly, @daily, ...): %v", expr, err)
	}
	sp, ok := s.(*cron.SpecSchedule)
	if !ok {
		return Spec{}, fieldErr("cron", "%q is not a cron expression", expr)
	}
	local, wall := *sp, *sp
	local.Location, wall.Location = loc, time.UTC
	const starBit = 1 << 63 // robfig/cron marks a field given as "*"
	spec := Spec{cron: &local, wall: &wall, loc: loc, everyHour: sp.Hour&starBit != 0}
	if spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Spec{}, fieldErr("cron", "%q never matches a date", expr)
	}
	return spec, nil
}

// LoadZone loads an IANA time zone ("" is UTC); its error is a
// *job.ValidationError naming the field "timezone".
func LoadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	if tz == "Local" {
		return nil, fieldErr("timezone", "name an IANA time zone such as Europe/Berlin; Local depends on the node")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fieldErr("timezone", "%q is not an IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)", tz)
	}
	return loc, nil
}

func fieldErr(field, format string, args ...any) error {
	return &job.ValidationError{Fields: []job.FieldError{{Field: field, Detail: fmt.Sprintf(format, args...)}}}
}

// Location is the zone cron fields are read in (UTC for a fixed interval).
func (s Spec) Location() *time.Location { return s.loc }

// Next returns the first tick strictly after t, or the zero time if there
// is none (a cron date that never comes, such as 30 February).
//
// A fixed interval ticks at anchor + k*every, whatever the zone: intervals
// are durations, so daylight saving does not move them.
//
// A cron expression matches wall-clock times in its zone, and daylight
// saving changes make some wall times not happen and others happen twice.
// The policy:
//
//   - Skipped hour (clocks go forward, e.g. 02:00 -> 03:00): a wall time in
//     the gap ticks once, at the instant the gap ends plus its offset into
//     the gap (02:30 ticks at 03:30 new time), so a daily job still runs
//     that day. robfig/cron alone would skip the day.
//   - Repeated hour (clocks go back, e.g. 03:00 -> 02:00): a wall time in
//     the repeated hour ticks once, in its first run, unless the hour field
//     is "*": "every hour" ticks in both runs, an hour apart.
func (s Spec) Next(t time.Time) time.Time {
	if s.cron == nil {
		if t.Before(s.anchor) {
			return s.anchor
		}
		n := t.Sub(s.anchor)/s.every + 1
		return s.anchor.Add(n * s.every)
	}
	t = t.In(s.loc)
	for range 1000 { // bounded: each pass moves at least one tick on
		c := s.cron.Next(t)
		if g := s.gapTick(t, c); !g.IsZero() {
			return g
		}
		if c.IsZero() || s.everyHour || !repeated(c) {
			return c
		}
		t = c // the second run of a repeated wall time: not a tick
	}
	return time.Time{}
}

// repeated reports whether t's wall time already happened earlier at
// another offset: t lies in the first (backward-offset) part of a zone
// period that began by setting clocks back.
func repeated(t time.Time) bool {
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Nanosecond).Zone()
	_, after := start.Zone()
	back := time.Duration(before-after) * time.Second
	return back > 0 && t.Sub(start) < back
}

// gapTick returns the earliest tick strictly after t and before c (c zero:
// no bound) that a wall time inside a skipped hour moves to, or zero. It
// looks at the transition that began t's zone period (t may lie among a
// gap's moved ticks) and at every later one before c; the ticks of a gap lie
// in [transition, transition+gap), so the first found is the earliest.
func (s Spec) gapTick(t, c time.Time) time.Time {
	tr, _ := t.ZoneBounds()
	for i := 0; i < 8 && !tr.IsZero(); i++ {
		if !c.IsZero() && !tr.Before(c) {
			break
		}
		if g := s.inGap(tr, t); !g.IsZero() && g.After(t) && (c.IsZero() || g.Before(c)) {
			return g
		}
		_, tr = tr.ZoneBounds()
	}
	return time.Time{}
}

// inGap returns, for the transition at tr when it sets clocks forward, the
// first tick after t that a wall time of the gap moves to, or zero.
func (s Spec) inGap(tr, t time.Time) time.Time {
	_, before := tr.Add(-time.Nanosecond).Zone()
	_, after := tr.Zone()
	gap := time.Duration(after-before) * time.Second
	if gap <= 0 {
		return time.Time{}
	}
	// The gap's wall times, on a UTC clock: [wallStart, wallStart+gap).
	wallStart := tr.Add(time.Duration(before) * time.Second).UTC()
	from := wallStart.Add(-time.Nanosecond)
	if d := t.Sub(tr); d >= 0 {
		from = wallStart.Add(d)
	}
	m := s.wall.Next(from)
	if m.IsZero() || !m.Before(wallStart.Add(gap)) {
		return time.Time{}
	}
	return tr.Add(m.Sub(wallStart))
}

// String describes the spec for logs and views.
func (s Spec) String() string {
	if s.cron == nil {
		return "every " + s.every.String()
	}
	return "cron in " + s.loc.String()
}
