package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

func mustParse(t *testing.T, expr, tz string) Spec {
	t.Helper()
	s, err := Parse(expr, 0, time.Time{}, tz)
	if err != nil {
		t.Fatalf("parse %q in %s: %v", expr, tz, err)
	}
	return s
}

// ticks returns the first n ticks after from.
func ticks(s Spec, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = s.Next(t)
		out = append(out, t)
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func wantTicks(t *testing.T, got []time.Time, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d ticks %v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if !got[i].Equal(utc(want[i])) {
			t.Errorf("tick %d = %s (%s), want %s", i, got[i].UTC().Format(time.RFC3339), got[i].Format(time.RFC3339), want[i])
		}
	}
}

func TestNextInZone(t *testing.T) {
	t.Parallel()
	// 09:00 in New York is 14:00 UTC in winter and 13:00 UTC in summer.
	s := mustParse(t, "0 9 * * 1-5", "America/New_York")
	wantTicks(t, ticks(s, utc("2026-03-05T00:00:00Z"), 3), // Thursday
		"2026-03-05T14:00:00Z", "2026-03-06T14:00:00Z", "2026-03-09T13:00:00Z") // Monday after the change
	if s.Location().String() != "America/New_York" {
		t.Fatalf("location %s", s.Location())
	}
	d := mustParse(t, "@daily", "")
	wantTicks(t, ticks(d, utc("2026-01-01T00:00:00Z"), 2), "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z")
}

// The daylight-saving policy (see Spec.Next), on Europe/Berlin's 2026
// changes: clocks go forward on 29 March at 02:00 CET (01:00 UTC) and back
// on 25 October at 03:00 CEST (01:00 UTC).
func TestNextDaylightSaving(t *testing.T) {
	t.Parallel()
	const zone = "Europe/Berlin"
	cases := []struct {
		name, expr, from string
		want             []string
	}{
		{"skipped hour: a daily 02:30 runs at 03:30 CEST that day", "30 2 * * *", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"}},
		{"skipped hour: every wall time of the gap moves, in order", "*/20 2 * * *", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-29T01:20:00Z", "2026-03-29T01:40:00Z", "2026-03-30T00:00:00Z"}},
		{"skipped hour: hourly just has no 02:00", "0 * * * *", "2026-03-28T23:30:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
		{"repeated hour: a daily 02:30 runs once, in the first 02:30", "30 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"repeated hour: a fixed hour's minutes run once", "*/20 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T00:20:00Z", "2026-10-25T00:40:00Z", "2026-10-26T01:00:00Z"}},
		{"repeated hour: every hour runs in both 02:00s, an hour apart", "0 * * * *", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wantTicks(t, ticks(mustParse(t, c.expr, zone), utc(c.from), len(c.want)), c.want...)
		})
	}
	// A zone whose gap is at midnight: São Paulo's 2018 change skipped
	// 00:00-01:00 on 4 November; the daily midnight tick ran at 01:00.
	s := mustParse(t, "0 0 * * *", "America/Sao_Paulo")
	wantTicks(t, ticks(s, utc("2018-11-02T12:00:00Z"), 3), "2018-11-03T03:00:00Z", "2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z")
}

func TestNextInterval(t *testing.T) {
	t.Parallel()
	anchor := utc("2026-03-29T00:00:10Z")
	s, err := Parse("", 90*time.Minute, anchor, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// Intervals are durations: the DST change at 01:00 UTC moves nothing.
	wantTicks(t, ticks(s, anchor, 3), "2026-03-29T01:30:10Z", "2026-03-29T03:00:10Z", "2026-03-29T04:30:10Z")
	if got := s.Next(anchor.Add(-time.Hour)); !got.Equal(anchor) {
		t.Fatalf("Next before the anchor = %s, want the anchor", got)
	}
	if got := s.Next(anchor.Add(90 * time.Minute)); !got.Equal(anchor.Add(180 * time.Minute)) {
		t.Fatalf("Next on a tick = %s, want the following tick", got)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	t.Parallel()
	anchor := utc("2026-01-01T00:00:00Z")
	cases := []struct {
		expr  string
		every time.Duration
		tz    string
		field string
	}{
		{"", 0, "", "cron"},
		{"* * *", 0, "", "cron"},
		{"61 * * * *", 0, "", "cron"},
		{"@every 5m", 0, "", "cron"},
		{"CRON_TZ=UTC * * * * *", 0, "", "cron"},
		{"0 0 30 2 *", 0, "", "cron"}, // never matches
		{"* * * * *", time.Minute, "", "every"},
		{"", time.Millisecond, "", "every"},
		{"* * * * *", 0, "Mars/Olympus", "timezone"},
		{"* * * * *", 0, "Local", "timezone"},
	}
	for _, c := range cases {
		_, err := Parse(c.expr, c.every, anchor, c.tz)
		var ve *job.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != c.field {
			t.Errorf("Parse(%q, %s, %q) = %v; want a validation error naming %s", c.expr, c.every, c.tz, err, c.field)
			continue
		}
		// The interval's field is every_seconds over HTTP and --every in
		// the CLI: a detail must not send the user to an "every field"
		// that neither has.
		if d := ve.Fields[0].Detail; strings.Contains(d, "every field") {
			t.Errorf("Parse(%q, %s, %q): detail %q names an every field no surface has", c.expr, c.every, c.tz, d)
		}
	}
}
