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
