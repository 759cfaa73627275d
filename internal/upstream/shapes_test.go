package upstream

import (
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

// shapes are one route of every limiter algorithm, all meaning "about 10
// per second".
var shapes = map[string]RouteConfig{
	"bucket":          {Rate: 10, Burst: 4},
	"sliding-window":  {Window: time.Second, Limit: 10},
	"fixed-window":    {Algorithm: AlgorithmFixedWindow, Window: time.Second, Limit: 10},
	"sliding-counter": {Algorithm: AlgorithmSlidingCounter, Window: time.Second, Limit: 10},
}

// TestRetryAfterIsExact checks, for every algorithm, that the Retry-After
// of a refusal is the earliest moment a request is admitted again: a
// millisecond before it is refused, at it admitted (refusals consume
// nothing, so probing is harmless).
func TestRetryAfterIsExact(t *testing.T) {
	t.Parallel()
	for name, rc := range shapes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(3, 4))
			lim := newLimiter(rc.WithDefaults(), nil, t0)
			now, refusals := t0, 0
			for range 3000 {
				now = now.Add(time.Duration(r.Int64N(int64(40 * time.Millisecond))))
				d := lim.take(now)
				if d.allowed {
					continue
				}
				refusals++
				if d.retryAfter <= 0 {
					t.Fatalf("refusal at %v with retryAfter %v", now.Sub(t0), d.retryAfter)
				}
				if d.retryAfter > time.Millisecond {
					if early := lim.take(now.Add(d.retryAfter - time.Millisecond)); early.allowed {
						t.Fatalf("admitted 1ms before the Retry-After %v (at %v)", d.retryAfter, now.Sub(t0))
					}
				}
				now = now.Add(d.retryAfter)
				if !lim.take(now).allowed {
					t.Fatalf("refused at the Retry-After %v (at %v)", d.retryAfter, now.Sub(t0))
				}
			}
			if refusals < 100 {
				t.Fatalf("only %d refusals: the load did not exceed the limit", refusals)
			}
		})
	}
}

// TestFixedWindowDefinition: at most Limit admissions in every aligned
// window, all Limit admitted in a window under excess demand, and up to
// twice Limit within a moment across a boundary, as fixed windows allow.
func TestFixedWindowDefinition(t *testing.T) {
	t.Parallel()
	admitted := admitRandom(newLimiter(shapes["fixed-window"].WithDefaults(), nil, t0), rand.NewPCG(5, 6), 5000, 5*time.Millisecond)
	perWindow := map[int64]int{}
	for _, at := range admitted {
		perWindow[at.Unix()]++
	}
	// The first request of a window is always admitted, so the last
	// admission falls in the last window offered, which may be cut short.
	last := admitted[len(admitted)-1].Unix()
	for sec, n := range perWindow {
		if n != 10 && sec != last {
			t.Errorf("window %d admitted %d, want exactly 10 under excess demand", sec, n)
		}
	}
	// Burst across a boundary: 10 just before, 10 just after.
	f := newLimiter(shapes["fixed-window"].WithDefaults(), nil, t0)
	edge := t0.Add(10 * time.Second)
	n := 0
	for i := range 40 {
		at := edge.Add(-10*time.Millisecond + time.Duration(i)*500*time.Microsecond)
		if f.take(at).allowed {
			n++
		}
	}
	if n != 20 {
		t.Errorf("admitted %d within 20 ms across a boundary, want 20 (two windows' worth)", n)
	}
}

// TestSlidingCounterDefinition replays the admissions against the
// definition: at each admission the previous aligned window's count,
// weighted by its overlap with the window ending then, plus the current
// window's count before it, is at most Limit-1, and at each refusal it
// is above.
func TestSlidingCounterDefinition(t *testing.T) {
	t.Parallel()
	lim := newLimiter(shapes["sliding-counter"].WithDefaults(), nil, t0)
	counts := map[int64]int{}
	r := rand.New(rand.NewPCG(7, 8))
	now := t0
	admitted := 0
	for range 5000 {
		now = now.Add(time.Duration(r.Int64N(int64(12 * time.Millisecond))))
		sec := now.Unix()
		elapsed := float64(now.Sub(time.Unix(sec, 0)).Nanoseconds()) / 1e9
		est := float64(counts[sec-1])*(1-elapsed) + float64(counts[sec])
		d := lim.take(now)
		if d.allowed != (est+1 <= 10+1e-9) {
			t.Fatalf("at %v estimate %.4f: allowed %v", now.Sub(t0), est, d.allowed)
		}
		if d.allowed {
			counts[sec]++
			admitted++
		}
	}
	if secs := now.Sub(t0).Seconds(); float64(admitted) > 10*secs+10 || float64(admitted) < 9*secs {
		t.Errorf("admitted %d in %.1fs, want about 10/s", admitted, secs)
	}
}

// TestSlidingWindowIsStrict checks the sliding log against "at most
// Limit in any window of length Window" over every pair of admissions.
func TestSlidingWindowIsStrict(t *testing.T) {
	t.Parallel()
	got := admitRandom(newLimiter(shapes["sliding-window"].WithDefaults(), nil, t0), rand.NewPCG(9, 10), 3000, 8*time.Millisecond)
	if m := MaxInWindow(got, time.Second); m != 10 {
		t.Errorf("MaxInWindow = %d, want exactly the limit 10 under excess demand", m)
	}
}

func TestMaxInWindow(t *testing.T) {
	t.Parallel()
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	for _, tc := range []struct {
		ts   []time.Time
		want int
	}{
		{nil, 0},
		{at(0), 1},
		{at(0, 999), 2},
		{at(0, 1000), 1}, // a window is half-open: (t-W, t]
		{at(0, 1, 2, 999, 1000, 1001), 4},
		{at(0, 100, 200, 1100, 1150), 3},
	} {
		if got := MaxInWindow(tc.ts, time.Second); got != tc.want {
			t.Errorf("MaxInWindow(%v) = %d, want %d", tc.ts, got, tc.want)
		}
	}
}

// TestDateSkewAndRetryAfterDate checks the wire: Date on the server's
// skewed clock, truncated; an HTTP-date Retry-After on the same clock,
// rounded up, so that its difference with Date covers the wait without
// adding more than a second; 429 or 503 as configured.
func TestDateSkewAndRetryAfterDate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		style  OverLimit
		status int
	}{{OverLimit429Date, 429}, {OverLimit503Date, 503}} {
		t.Run(string(tc.style), func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			clock.Add(300 * time.Millisecond)
			const skew = 42*time.Minute + 700*time.Millisecond
			b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{
				"sub": {Window: time.Second, Limit: 1, OverLimit: tc.style, DateSkew: skew}}})
			if resp := b.hook(t, "sub", ""); resp.StatusCode != 200 {
				t.Fatalf("first = %d", resp.StatusCode)
			}
			clock.Add(100 * time.Millisecond) // the window frees up 900 ms from now
			resp := b.hook(t, "sub", "")
			if resp.StatusCode != tc.status {
				t.Fatalf("second = %d, want %d", resp.StatusCode, tc.status)
			}
			date, err1 := http.ParseTime(resp.Header.Get("Date"))
			retry, err2 := http.ParseTime(resp.Header.Get("Retry-After"))
			if err1 != nil || err2 != nil {
				t.Fatalf("Date %q, Retry-After %q: %v %v", resp.Header.Get("Date"), resp.Header.Get("Retry-After"), err1, err2)
			}
			server := clock.Now().Add(skew)
			if !date.Equal(server.Truncate(time.Second)) {
				t.Errorf("Date = %v, want the server clock %v truncated", date, server)
			}
			// Free at server+900ms = 12:42:02.0 exactly: no rounding needed.
			if want := time.Date(2026, 3, 1, 12, 42, 2, 0, time.UTC); !retry.Equal(want) {
				t.Errorf("Retry-After = %v, want %v", retry, want)
			}
			if wait := retry.Sub(date); wait < 900*time.Millisecond || wait > 900*time.Millisecond+2*time.Second {
				t.Errorf("Retry-After - Date = %v, want the 900 ms wait rounded to whole seconds", wait)
			}
		})
	}
}

func TestOverLimit503None(t *testing.T) {
	t.Parallel()
	// A fake clock: a stall of 2 s between the requests would refill the
	// bucket on the real one.
	b := setup(t, Config{Now: newFakeClock().Now, Routes: map[string]RouteConfig{"sub": {Rate: 0.5, Burst: 1, OverLimit: OverLimit503None}}})
	b.hook(t, "sub", "")
	resp := b.hook(t, "sub", "")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("status %d Retry-After %q, want 503 without Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestTransientStatuses: injected 503s carry no Retry-After and count
// against the limit (they reached the upstream).
func TestTransientStatuses(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Routes: map[string]RouteConfig{"sub": {Window: time.Minute, Limit: 3, TransientRate: 1, TransientStatuses: []int{503}}}})
	got := b.statuses(t, "sub", 4)
	if count(got, 503) != 3 || count(got, 429) != 1 {
		t.Fatalf("statuses %v, want three injected 503s then the limit's 429", got)
	}
	if r := b.srv.Stats().Routes["sub"]; r.Transient != 3 || r.RateLimited != 1 {
		t.Errorf("counted transient %d rate-limited %d", r.Transient, r.RateLimited)
	}
}

// TestScheduledChanges: a sliding window's limit halves 2 s after the
// schedule starts and rises 2 s later, silently; the arrivals show each
// limit held exactly in its phase.
func TestScheduledChanges(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Now: clock.Now, RecordArrivals: true, Routes: map[string]RouteConfig{"sub": {
		Window: time.Second, Limit: 10,
		Changes: []LimitChange{{After: 2 * time.Second, Limit: 5}, {After: 4 * time.Second, Limit: 20}},
	}}})
	clock.Add(time.Hour) // the schedule runs from StartSchedule, not from creation
	start := clock.Now()
	b.srv.StartSchedule(start)
	for range 600 { // 6 s at one request every 10 ms: far more than any limit
		b.hook(t, "sub", "")
		clock.Add(10 * time.Millisecond)
	}
	arr := b.srv.Arrivals("sub")
	perSecond := make([]int, 6)
	for _, a := range arr {
		perSecond[int(a.Sub(start)/time.Second)]++
	}
	if want := []int{10, 10, 5, 5, 20, 20}; !equalInts(perSecond, want) {
		t.Errorf("accepted per second %v, want %v", perSecond, want)
	}
	if r := b.srv.Stats().Routes["sub"]; r.Accepted != int64(len(arr)) || r.Config.Limit != 20 {
		t.Errorf("accepted %d, %d arrivals, limit now %d", r.Accepted, len(arr), r.Config.Limit)
	}
	if m := MaxInWindow(arr, time.Second); m != 20 {
		t.Errorf("MaxInWindow = %d, want 20", m)
	}
}

// TestScheduledBucketChange: a token bucket's rate drops silently.
func TestScheduledBucketChange(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Now: clock.Now, RecordArrivals: true, Routes: map[string]RouteConfig{"sub": {
		Rate: 20, Burst: 1, Changes: []LimitChange{{After: time.Second, Rate: 5}},
	}}})
	b.srv.StartSchedule(clock.Now())
	for range 200 {
		b.hook(t, "sub", "")
		clock.Add(10 * time.Millisecond)
	}
	n := len(b.srv.Arrivals("sub"))
	if want := 20 + 5; math.Abs(float64(n-want)) > 1 {
		t.Errorf("accepted %d in 2 s at 20/s then 5/s, want about %d", n, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestIdealSchedule(t *testing.T) {
	t.Parallel()
	start := t0.Add(250 * time.Millisecond)
	last := func(rc RouteConfig, n int) time.Duration {
		t.Helper()
		ts, err := IdealSchedule(rc, n, start)
		if err != nil || len(ts) != n {
			t.Fatalf("IdealSchedule: %d times, %v", len(ts), err)
		}
		return ts[n-1].Sub(start)
	}
	for _, tc := range []struct {
		name string
		rc   RouteConfig
		n    int
		want time.Duration
	}{
		// 4 at once, then one every 100 ms: the 14th at 1 s.
		{"bucket", RouteConfig{Rate: 10, Burst: 4}, 14, time.Second},
		// 10 at once, 10 more a window later: the 25th at 2 s.
		{"sliding", RouteConfig{Window: time.Second, Limit: 10}, 25, 2 * time.Second},
		// 10 at 0.25 s, 10 at the boundary 1.0, 5 at 2.0 (start is .25 into a second).
		{"fixed", RouteConfig{Algorithm: AlgorithmFixedWindow, Window: time.Second, Limit: 10}, 25, 1750 * time.Millisecond},
		// Halved at 1 s: 10 at 0, then 5 at 1 s (the window frees at 1 s)...
		{"sliding halves", RouteConfig{Window: time.Second, Limit: 10, Changes: []LimitChange{{After: time.Second, Limit: 5}}}, 20, 2 * time.Second},
		// A rise is used the moment it happens: 2 at 0, 8 more at 0.5 s.
		{"sliding rises", RouteConfig{Window: time.Second, Limit: 2, Changes: []LimitChange{{After: 500 * time.Millisecond, Limit: 10}}}, 10, 500 * time.Millisecond},
		{"unlimited", RouteConfig{}, 100, 0},
	} {
		if got := last(tc.rc, tc.n); got != tc.want {
			t.Errorf("%s: last admission at %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, err := IdealSchedule(RouteConfig{Window: -1}, 1, start); err == nil {
		t.Error("IdealSchedule accepted an invalid route")
	}
}

// TestScheduleOverHTTP: a sender in another process starts the schedule
// with POST /_schedule.
func TestScheduleOverHTTP(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{"sub": {
		Window: time.Second, Limit: 1, Changes: []LimitChange{{After: time.Minute, Limit: 3}}}}})
	clock.Add(time.Hour)
	resp, _ := b.post(t, b.srv.URL()+"/_schedule", "", nil)
	if resp.StatusCode != 200 || !b.srv.ScheduleEpoch().Equal(clock.Now()) {
		t.Fatalf("POST /_schedule = %d, epoch %v, want 200 and %v", resp.StatusCode, b.srv.ScheduleEpoch(), clock.Now())
	}
	clock.Add(time.Minute)
	if got := b.statuses(t, "sub", 4); count(got, 200) != 3 {
		t.Errorf("a minute after the epoch: %v, want the new limit of 3", got)
	}
}
