package upstream

import (
	"net/http"
	"testing"
	"time"
)

// TestVirtualHoldsConcurrencySlots checks that a Virtual route with
// MaxConcurrent keeps an admitted request's slot until its answer arrives,
// as the server keeps it until the handler returns: a second request
// inside the first one's latency is refused, one at its answer is taken.
func TestVirtualHoldsConcurrencySlots(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rc := RouteConfig{Algorithm: AlgorithmSlidingWindow, Window: time.Second, Limit: 100, MaxConcurrent: 1,
		OverLimit: OverLimit429None, Latency: Latency{Fixed: 40 * time.Millisecond}}
	v, err := NewVirtual(rc, epoch, 1)
	if err != nil {
		t.Fatal(err)
	}
	status, _, lat := v.Answer(epoch)
	if status != http.StatusOK || lat != 40*time.Millisecond {
		t.Fatalf("first request = %d after %v, want 200 after 40ms", status, lat)
	}
	if status, _, _ := v.Answer(epoch.Add(20 * time.Millisecond)); status != http.StatusTooManyRequests {
		t.Errorf("request during the first's latency = %d, want 429 (one at a time)", status)
	}
	if status, _, _ := v.Answer(epoch.Add(lat)); status != http.StatusOK {
		t.Errorf("request once the first was answered = %d, want 200", status)
	}
}

// TestPolicyQuotaOfBucket checks that a bucket announces, in IETF
// RateLimit-Policy, what it sustains over the policy window rather than
// its burst alone: a client that paces to the announcement is not held
// to a fraction of the allowance.
func TestPolicyQuotaOfBucket(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		rc   RouteConfig
		want string
	}{
		{RouteConfig{Rate: 15, Burst: 5, Headers: HeaderStyleRateLimit}, `"default";q=15;w=1`},
		{RouteConfig{Rate: 1, Burst: 3, Headers: HeaderStyleRateLimit}, `"default";q=3;w=3`},
		{RouteConfig{Algorithm: AlgorithmSlidingWindow, Window: time.Second, Limit: 30, Headers: HeaderStyleRateLimit}, `"default";q=30;w=1`},
	} {
		v, err := NewVirtual(tc.rc, epoch, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, h, _ := v.Answer(epoch); h.Get("RateLimit-Policy") != tc.want {
			t.Errorf("%+v: RateLimit-Policy %q, want %q", tc.rc, h.Get("RateLimit-Policy"), tc.want)
		}
	}
}

// TestVirtualTransit checks the transit mode: with none set a request
// arrives the instant it is sent; with one, every arrival falls in
// [sent+Fixed, sent+Fixed+Jitter), the draws vary, repeat for the same
// seed, and leave the route's own latency draws as they were; a negative
// transit is refused.
func TestVirtualTransit(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rc := RouteConfig{Algorithm: AlgorithmSlidingWindow, Window: time.Second, Limit: 1000,
		Latency: Latency{Fixed: 10 * time.Millisecond, Jitter: 30 * time.Millisecond}}
	plain, err := NewVirtual(rc, epoch, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.Arrival(epoch); !got.Equal(epoch) {
		t.Fatalf("no transit: arrival %v after sending", got.Sub(epoch))
	}
	tr := Latency{Fixed: 5 * time.Millisecond, Jitter: 100 * time.Millisecond}
	draw := func() ([]time.Duration, []time.Duration) {
		v, err := NewVirtual(rc, epoch, 7)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.SetTransit(tr); err != nil {
			t.Fatal(err)
		}
		var transits, latencies []time.Duration
		for i := range 200 {
			sent := epoch.Add(time.Duration(i) * 10 * time.Millisecond)
			transits = append(transits, v.Arrival(sent).Sub(sent))
			_, _, lat := v.Answer(sent)
			latencies = append(latencies, lat)
		}
		return transits, latencies
	}
	a, latA := draw()
	b, _ := draw()
	distinct := map[time.Duration]bool{}
	for i, d := range a {
		if d < tr.Fixed || d >= tr.Fixed+tr.Jitter {
			t.Fatalf("transit %v outside [%v, %v)", d, tr.Fixed, tr.Fixed+tr.Jitter)
		}
		if d != b[i] {
			t.Fatalf("draw %d: %v then %v for the same seed", i, d, b[i])
		}
		distinct[d] = true
	}
	if len(distinct) < 100 {
		t.Fatalf("only %d distinct transits in 200 draws", len(distinct))
	}
	for i := range latA {
		sent := epoch.Add(time.Duration(i) * 10 * time.Millisecond)
		if _, _, lat := plain.Answer(sent); lat != latA[i] {
			t.Fatalf("answer %d: latency %v with a transit, %v without: the transit changed the route's draws", i, latA[i], lat)
		}
	}
	if err := plain.SetTransit(Latency{Jitter: -time.Millisecond}); err == nil {
		t.Fatal("a negative transit was accepted")
	}
}
