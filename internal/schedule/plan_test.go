package schedule

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

func TestPlanMissedTicks(t *testing.T) {
	t.Parallel()
	minutely := mustParse(t, "* * * * *", "UTC")
	t0 := utc("2026-06-01T12:00:00Z")
	cases := []struct {
		name        string
		policy      Policy
		nextAt, now time.Time
		ticks       []time.Time
		skipped     int64
		next        time.Time
	}{
		{"not due", Policy{}, t0, t0.Add(-time.Second), nil, 0, t0},
		{"on time", Policy{}, t0, t0.Add(300 * time.Millisecond), []time.Time{t0}, 0, t0.Add(time.Minute)},
		{"exactly at the tick", Policy{}, t0, t0, []time.Time{t0}, 0, t0.Add(time.Minute)},
		// Down for 10.5 minutes: ticks t0..t0+10m are due.
		{"skip keeps only the latest, when recent", Policy{Missed: store.MissedSkip}, t0, t0.Add(10*time.Minute + 30*time.Second),
			[]time.Time{t0.Add(10 * time.Minute)}, 10, t0.Add(11 * time.Minute)},
		{"skip drops a latest tick older than max_late", Policy{Missed: store.MissedSkip, MaxLate: 20 * time.Second}, t0, t0.Add(10*time.Minute + 30*time.Second),
			nil, 11, t0.Add(11 * time.Minute)},
		{"catch_up enqueues them all, oldest first", Policy{Missed: store.MissedCatchUp}, t0, t0.Add(2*time.Minute + time.Second),
			[]time.Time{t0, t0.Add(time.Minute), t0.Add(2 * time.Minute)}, 0, t0.Add(3 * time.Minute)},
		{"catch_up bounded by N keeps the latest N", Policy{Missed: store.MissedCatchUp, CatchUpMax: 3}, t0, t0.Add(10 * time.Minute),
			[]time.Time{t0.Add(8 * time.Minute), t0.Add(9 * time.Minute), t0.Add(10 * time.Minute)}, 8, t0.Add(11 * time.Minute)},
		{"catch_up bounded by max age", Policy{Missed: store.MissedCatchUp, MaxLate: 150 * time.Second}, t0, t0.Add(10 * time.Minute),
			[]time.Time{t0.Add(8 * time.Minute), t0.Add(9 * time.Minute), t0.Add(10 * time.Minute)}, 8, t0.Add(11 * time.Minute)},
		{"catch_up after a day down, default bounds", Policy{Missed: store.MissedCatchUp}, t0, t0.Add(48 * time.Hour),
			tickRange(t0.Add(48*time.Hour-9*time.Minute), 10, time.Minute), 48*60 + 1 - 10, t0.Add(48*time.Hour + time.Minute)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := c.policy.Plan(minutely, c.nextAt, c.now)
			if len(got.Ticks) != len(c.ticks) || got.Skipped != c.skipped || !got.Next.Equal(c.next) {
				t.Fatalf("plan = %d ticks %v, skipped %d, next %s; want %d ticks, skipped %d, next %s",
					len(got.Ticks), got.Ticks, got.Skipped, got.Next, len(c.ticks), c.skipped, c.next)
			}
			for i := range c.ticks {
				if !got.Ticks[i].Equal(c.ticks[i]) {
					t.Fatalf("tick %d = %s, want %s", i, got.Ticks[i], c.ticks[i])
				}
			}
		})
	}
}

func tickRange(from time.Time, n int, step time.Duration) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = from.Add(time.Duration(i) * step)
	}
	return out
}

// A per-second interval down for a long time is counted without stepping
// through every tick past maxScan, and still plans the latest tick.
func TestPlanLongDowntimeIsBounded(t *testing.T) {
	t.Parallel()
	t0 := utc("2026-06-01T00:00:00Z")
	s, err := Parse("", time.Second, t0, "")
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(30 * 24 * time.Hour)
	got := Policy{}.Plan(s, t0, now)
	if len(got.Ticks) != 1 || !got.Ticks[0].Equal(now) || got.Skipped < maxScan || !got.Next.Equal(now.Add(time.Second)) {
		t.Fatalf("plan = %v, skipped %d, next %s", got.Ticks, got.Skipped, got.Next)
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	for _, p := range []Policy{
		{Missed: "retry"},
		{Missed: store.MissedCatchUp, CatchUpMax: MaxCatchUp + 1},
		{Missed: store.MissedSkip, CatchUpMax: 3},
		{Missed: store.MissedSkip, MaxLate: -time.Second},
		{Missed: store.MissedCatchUp, MaxLate: 8 * 24 * time.Hour},
	} {
		if p.Validate() == nil {
			t.Errorf("%+v validated", p)
		}
	}
	if err := (Policy{Missed: store.MissedCatchUp, CatchUpMax: 5, MaxLate: time.Hour}).Validate(); err != nil {
		t.Fatal(err)
	}
}
