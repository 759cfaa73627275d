package bench

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// preciseMix is a virtual-only mix of adaptive keys whose upstreams all
// answer 429 with a millisecond-precise reset (retry-after-ms): a fixed
// window whose limit drops and comes back (the honesty mix's fixed-dip,
// the shape a precise reset's alignment is learned from), and two shapes
// sending the same header that it must not be mistaken for: the honesty
// mix's sliding window that drops and rises twice, and a token bucket of
// half the declared rate with a small burst. Each pause then ends exactly
// where the upstream frees capacity: a fixed window's boundary, a sliding
// window's oldest start leaving it, a bucket's next token. The sliding
// window and the bucket are also answered with an HTTP-date on a skewed
// clock, as honesty's fixed-dip is.
func preciseMix() UpstreamsMix {
	fixed := upstream.RouteConfig{Algorithm: upstream.AlgorithmFixedWindow, Window: time.Second, Limit: 25,
		OverLimit: upstream.OverLimit429Millis, Latency: latency,
		Changes: []upstream.LimitChange{{After: 3 * time.Second, Limit: 10}, {After: 6 * time.Second, Limit: 25}}}
	sliding := upstream.RouteConfig{Algorithm: upstream.AlgorithmSlidingWindow, Window: time.Second, Limit: 24,
		OverLimit: upstream.OverLimit429Millis, Latency: latency, Changes: []upstream.LimitChange{
			{After: 2 * time.Second, Limit: 12}, {After: 4500 * time.Millisecond, Limit: 24},
			{After: 6 * time.Second, Limit: 9}, {After: 8500 * time.Millisecond, Limit: 24}}}
	bucket := upstream.RouteConfig{Rate: 12, Burst: 2, OverLimit: upstream.OverLimit429Millis, Latency: latency}
	// The same sliding window and bucket answering 429 + HTTP-date on a
	// clock 2 s behind, as honesty's fixed-dip does: the shapes any
	// sub-second reading of an HTTP-date (a server clock learned from
	// Dates) must not cost a refusal (docs/benchmarks.md, session 13
	// s13h7).
	slidingDate, bucketDate := sliding, bucket
	slidingDate.OverLimit, slidingDate.DateSkew = upstream.OverLimit429Date, -2*time.Second
	bucketDate.OverLimit, bucketDate.DateSkew = upstream.OverLimit429Date, -2*time.Second
	return UpstreamsMix{Name: "precise", Destinations: []UpstreamDestination{
		{Name: "fixed-dip-ms", Declared: 25, Adaptive: true, Route: fixed, Jobs: 3*25 + 3*10 + 4*25},
		{Name: "steps-twice-ms", Declared: 24, Adaptive: true, Route: sliding, Jobs: 2*24 + 25*12/10 + 15*24/10 + 25*9/10 + 15*24/10},
		{Name: "bucket-half-ms", Declared: 24, Adaptive: true, Route: bucket, Jobs: 120},
		{Name: "steps-date", Declared: 24, Adaptive: true, Route: slidingDate, Jobs: 2*24 + 25*12/10 + 15*24/10 + 25*9/10 + 15*24/10},
		{Name: "bucket-half-date", Declared: 24, Adaptive: true, Route: bucketDate, Jobs: 120},
	}}
}

// TestVirtualPreciseReset runs preciseMix in virtual time over three
// seeds, prints its figures (-v) and holds it to being delivered in full
// within invariant 6. RATELANE_VIRTUAL_TRACE=1 prints every refusal.
func TestVirtualPreciseReset(t *testing.T) {
	runVirtualSeeds(t, "precise", preciseMix())
}
