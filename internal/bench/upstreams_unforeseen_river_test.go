package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestVirtualUnforeseenRiver runs the River-like sender of
// TestVirtualHalvingTwins (riverLike: a limiter at the declared rate with a
// second's burst, each refused job snoozed for the Retry-After its answer
// named, no pause of the destination) on each destination of the
// unforeseen mix from ten start offsets, so that River's finish per
// destination can be read beside ratelane's, which TestVirtualDecompose
// logs for the same mix (docs/benchmarks.md, "Session 22 (s22h2)"). It
// only logs figures: set RATELANE_VIRTUAL_UNFORESEEN=1 to run it.
func TestVirtualUnforeseenRiver(t *testing.T) {
	if os.Getenv("RATELANE_VIRTUAL_UNFORESEEN") == "" {
		t.Skip("set RATELANE_VIRTUAL_UNFORESEEN=1 to log the River-like sender on the unforeseen mix")
	}
	var b strings.Builder
	for _, m := range Upstreams(false).Mixes {
		if m.Name != "unforeseen" {
			continue
		}
		for _, d := range m.Destinations {
			fmt.Fprintf(&b, "River-like %-13s by offset (last start s / refused of attempts):", d.Name)
			for ms := 0; ms < 1000; ms += 100 {
				epoch := time.Date(2026, 1, 1, 0, 0, 0, ms*int(time.Millisecond), time.UTC)
				last, refused, attempts := riverLike(t, d, epoch, 1)
				fmt.Fprintf(&b, " %d:%.2f/%d/%d", ms, last.Seconds(), refused, attempts)
			}
			b.WriteString("\n")
		}
	}
	t.Log("\n" + b.String())
}
