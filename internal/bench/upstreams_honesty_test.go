package bench

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// honestyMix is a virtual-only mix of upstream shapes that no pacing
// change of session 7 was designed or tuned against, run before and after
// each such change as a check that the change is a mechanism and not a
// fit to the reported matrix: a sliding window whose limit drops and
// rises twice (adaptive, 429 + seconds), a token bucket with a burst far
// smaller than the declared one (fixed key, 429 + HTTP-date), and fixed
// windows that drop and rise again, answered 503 + HTTP-date on a clock
// 2 s behind (adaptive).
func honestyMix() UpstreamsMix {
	steps := upstream.RouteConfig{Algorithm: upstream.AlgorithmSlidingWindow, Window: time.Second, Limit: 24,
		OverLimit: upstream.OverLimit429Seconds, Latency: latency, Changes: []upstream.LimitChange{
			{After: 2 * time.Second, Limit: 12}, {After: 4500 * time.Millisecond, Limit: 24},
			{After: 6 * time.Second, Limit: 9}, {After: 8500 * time.Millisecond, Limit: 24}}}
	gcra := upstream.RouteConfig{Rate: 12, Burst: 2, OverLimit: upstream.OverLimit429Date, Latency: latency}
	dip := upstream.RouteConfig{Algorithm: upstream.AlgorithmFixedWindow, Window: time.Second, Limit: 25,
		OverLimit: upstream.OverLimit503Date, DateSkew: -2 * time.Second, Latency: latency,
		Changes: []upstream.LimitChange{{After: 3 * time.Second, Limit: 10}, {After: 6 * time.Second, Limit: 25}}}
	return UpstreamsMix{Name: "honesty", Destinations: []UpstreamDestination{
		{Name: "steps-twice", Declared: 24, Adaptive: true, Route: steps, Jobs: 2*24 + 25*12/10 + 15*24/10 + 25*9/10 + 15*24/10},
		{Name: "gcra-burst2", Declared: 12, Route: gcra, Jobs: 120},
		{Name: "fixed-dip", Declared: 25, Adaptive: true, Route: dip, Jobs: 3*25 + 3*10 + 4*25},
	}}
}

// TestVirtualHonesty runs honestyMix in virtual time over three seeds,
// prints its figures (-v) and holds it to being delivered in full within
// invariant 6; its ratio is reported in docs/benchmarks.md, not tuned.
// RATELANE_VIRTUAL_TRACE=1 prints every refusal.
func TestVirtualHonesty(t *testing.T) {
	runVirtualSeeds(t, "honesty", honestyMix())
}
