package upstream

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

// TestMaxConcurrent: a route that counts concurrent requests refuses one
// more while its slot is held (through the answer's latency), as its
// OverLimit says, and admits again once the answer is written.
func TestMaxConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Routes: map[string]RouteConfig{"c": {MaxConcurrent: 1, OverLimit: OverLimit429None,
		Latency: Latency{Fixed: 300 * time.Millisecond}}}})
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, b.srv.RouteURL("c"), nil)
		resp, err := b.client.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	testkit.WaitFor(t, testkit.Timeout, "the first request to reach the route and hold its slot", func() bool {
		return b.srv.Stats().Routes["c"].Attempts >= 1
	})
	if resp := b.hook(t, "c", ""); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("second request while the first is in flight: %d Retry-After %q, want 429 without Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if st := <-done; st != http.StatusOK {
		t.Fatalf("first request: %d, want 200", st)
	}
	if resp := b.hook(t, "c", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the first answered: %d, want 200 (slot released)", resp.StatusCode)
	}
	if rl := b.srv.Stats().Routes["c"].RateLimited; rl != 1 {
		t.Fatalf("%d over-limit answers, want 1", rl)
	}
}

// TestIdealScheduleConcurrent: with a concurrency cap, the ideal holds
// each slot for the route's least latency.
func TestIdealScheduleConcurrent(t *testing.T) {
	t.Parallel()
	rc := RouteConfig{MaxConcurrent: 2, Latency: Latency{Fixed: 10 * time.Millisecond, Jitter: 5 * time.Millisecond}}
	ts, err := IdealSchedule(rc, 6, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 0, 10 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}
	for i, at := range ts {
		if at.Sub(t0) != want[i] {
			t.Fatalf("ideal request %d at +%v, want +%v (all %v)", i, at.Sub(t0), want[i], ts)
		}
	}
	if _, err := IdealSchedule(RouteConfig{MaxConcurrent: -1}, 1, t0); err == nil {
		t.Fatal("MaxConcurrent -1 accepted")
	}
}
