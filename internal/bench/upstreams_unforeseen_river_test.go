package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestVirtualUnforeseenRiver decomposes the unforeseen mix per destination
// (decomposeRun: where each destination's seconds above its own ideal go,
// seeds 1 to 8 at virtualEpoch, without lag and under the quiet lag) and
// runs the River-like sender of TestVirtualHalvingTwins (riverLike: a
// limiter at the declared rate with a second's burst, each refused job
// snoozed for the Retry-After its answer named, no pause of the
// destination) on each of its destinations from ten start offsets, so
// that ratelane's finish per destination and River's sit side by side
// (docs/benchmarks.md, "Session 22 (s22h2)"). It only logs figures: set
// RATELANE_VIRTUAL_UNFORESEEN=1 to run it.
func TestVirtualUnforeseenRiver(t *testing.T) {
	if os.Getenv("RATELANE_VIRTUAL_UNFORESEEN") == "" {
		t.Skip("set RATELANE_VIRTUAL_UNFORESEEN=1 to log the unforeseen decomposition and the River-like sender")
	}
	var m UpstreamsMix
	for _, x := range Upstreams(false).Mixes {
		if x.Name == "unforeseen" {
			m = x
		}
	}
	var b strings.Builder
	const seeds = 8
	for _, lag := range []virtualLag{{name: "none"}, lagQuiet} {
		sum := map[string]*decomposition{}
		var mix float64
		for seed := uint64(1); seed <= seeds; seed++ {
			r, ds := decomposeRun(t, m, seed, lag)
			mix += r.ratio / seeds
			for _, d := range ds {
				s, ok := sum[d.name]
				if !ok {
					s = &decomposition{name: d.name}
					sum[d.name] = s
				}
				s.finish += d.finish / seeds
				s.ideal += d.ideal / seeds
				s.paused += d.paused / seeds
				s.refused += d.refused
				for c := range d.by {
					s.by[c] += d.by[c] / seeds
				}
			}
		}
		fmt.Fprintf(&b, "ratelane, lag %s, 123 ms, mean of seeds 1-%d: mix %.4f\n", lag.name, seeds, mix)
		for _, d := range m.Destinations {
			s := sum[d.Name]
			fmt.Fprintf(&b, "  %-13s finish %6.3f own ideal %6.3f excess %+.3f =", s.name, s.finish, s.ideal, s.finish-s.ideal)
			for c, v := range s.by {
				fmt.Fprintf(&b, " %s %+.3f", causeNames[c], v)
			}
			fmt.Fprintf(&b, " | refused %d in all, paused %.2f s\n", s.refused, s.paused)
		}
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
	t.Log("\n" + b.String())
}
