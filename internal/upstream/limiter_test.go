package upstream

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func bucket(rate float64, burst int) limiter {
	return newLimiter(RouteConfig{Rate: rate, Burst: burst}.WithDefaults(), nil, t0)
}

func TestTokenBucketTake(t *testing.T) {
	t.Parallel()
	b := bucket(2, 3)
	for i := range 3 {
		d := b.take(t0)
		if !d.allowed || d.remaining != 2-i || d.limit != 3 {
			t.Fatalf("take %d = %+v, want allowed with %d remaining of 3", i, d, 2-i)
		}
	}
	d := b.take(t0)
	if d.allowed || d.retryAfter != 500*time.Millisecond || d.reset != 1500*time.Millisecond {
		t.Fatalf("over limit = %+v, want denied, retryAfter 500ms, reset 1.5s", d)
	}
	if d.window != 1500*time.Millisecond {
		t.Errorf("window = %v, want burst/rate = 1.5s", d.window)
	}
	if d := b.take(t0.Add(499 * time.Millisecond)); d.allowed {
		t.Errorf("take before one token refilled was allowed")
	}
	if d := b.take(t0.Add(500 * time.Millisecond)); !d.allowed || d.remaining != 0 {
		t.Errorf("take after one token refilled = %+v, want allowed, 0 remaining", d)
	}
}

func TestTokenBucketClockStepsBack(t *testing.T) {
	t.Parallel()
	b := bucket(1, 1)
	b.take(t0)
	if d := b.take(t0.Add(-time.Hour)); d.allowed {
		t.Errorf("a clock stepping back refilled the bucket")
	}
}

func TestSlidingWindowTake(t *testing.T) {
	t.Parallel()
	w := newLimiter(RouteConfig{Window: time.Minute, Limit: 2}.WithDefaults(), nil, t0)
	w.take(t0)
	w.take(t0.Add(10 * time.Second))
	d := w.take(t0.Add(20 * time.Second))
	if d.allowed || d.retryAfter != 40*time.Second || d.reset != 50*time.Second || d.remaining != 0 {
		t.Fatalf("over limit = %+v, want denied, retryAfter 40s, reset 50s", d)
	}
	if d := w.take(t0.Add(time.Minute)); !d.allowed || d.remaining != 0 {
		t.Errorf("take once the oldest left = %+v, want allowed, 0 remaining", d)
	}
}

// TestLimiterInvariant checks invariant 6 of DESIGN.md on the simulator's
// own limiters: over any window t, admissions never exceed rate*t + burst.
func TestLimiterInvariant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		rc    RouteConfig
		bound func(span time.Duration) float64
	}{
		{"bucket", RouteConfig{Rate: 10, Burst: 4}, func(s time.Duration) float64 { return 10*s.Seconds() + 4 }},
		{"window", RouteConfig{Window: time.Second, Limit: 5}, func(s time.Duration) float64 { return 5 * float64(s/time.Second+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			admitted := admitRandom(newLimiter(tc.rc.WithDefaults(), nil, t0), rand.NewPCG(1, 2), 2000, 60*time.Millisecond)
			for i := range admitted {
				for j := i; j < len(admitted); j++ {
					if n := float64(j - i + 1); n > tc.bound(admitted[j].Sub(admitted[i]))+1e-9 {
						t.Fatalf("%v admitted %v in %v", tc.name, n, admitted[j].Sub(admitted[i]))
					}
				}
			}
		})
	}
}

// admitRandom offers lim n requests from t0, each a random gap below
// maxGap (drawn from src) after the one before, and returns the times of
// those it admitted.
func admitRandom(lim limiter, src rand.Source, n int, maxGap time.Duration) []time.Time {
	r := rand.New(src)
	var admitted []time.Time
	now := t0
	for range n {
		now = now.Add(time.Duration(r.Int64N(int64(maxGap))))
		if lim.take(now).allowed {
			admitted = append(admitted, now)
		}
	}
	return admitted
}

func TestNewLimiterCarriesState(t *testing.T) {
	t.Parallel()
	old := bucket(1, 5)
	for range 5 {
		old.take(t0)
	}
	nb := newLimiter(RouteConfig{Rate: 100, Burst: 10}.WithDefaults(), old, t0)
	if d := nb.take(t0); d.allowed {
		t.Errorf("a drained bucket was refilled by a limit change")
	}
	if d := nb.take(t0.Add(10 * time.Millisecond)); !d.allowed {
		t.Errorf("the new rate did not apply")
	}

	ow := newLimiter(RouteConfig{Window: time.Minute, Limit: 3}.WithDefaults(), nil, t0)
	for range 3 {
		ow.take(t0)
	}
	nw := newLimiter(RouteConfig{Window: time.Minute, Limit: 4}.WithDefaults(), ow, t0)
	if d := nw.take(t0); !d.allowed || d.remaining != 0 {
		t.Errorf("grown window = %+v, want one more admission, then full", d)
	}
}

func TestFormatResetDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{time.Nanosecond, "1ms"},
		{12 * time.Millisecond, "12ms"},
		{12*time.Millisecond + 1, "13ms"},
		{time.Second, "1s"},
		{1500 * time.Millisecond, "1.5s"},
		{6 * time.Minute, "6m0s"},
		{time.Hour + time.Second, "1h0m1s"},
	} {
		if got := formatResetDuration(tc.in); got != tc.want {
			t.Errorf("formatResetDuration(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in          time.Duration
		floor, want int64
	}{
		{0, 1, 1}, {0, 0, 0}, {time.Millisecond, 1, 1}, {time.Second, 1, 1},
		{time.Second + 1, 1, 2}, {90 * time.Second, 0, 90},
	} {
		if got := ceilSeconds(tc.in, tc.floor); got != tc.want {
			t.Errorf("ceilSeconds(%v, %d) = %d, want %d", tc.in, tc.floor, got, tc.want)
		}
	}
}
