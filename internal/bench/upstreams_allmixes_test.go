package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// TestVirtualAllMixes logs, for every mix of the upstreams workload,
// seeds 1 to 8, without lag and under the quiet lag profile, the makespan
// against the ideal and the refused share, one line a run, and each mix's
// mean: the before/after table of a pacing change across every mix
// (docs/benchmarks.md, session 16, s16h3). It only logs figures: set
// RATELANE_VIRTUAL_ALLMIXES=1 to run it (RATELANE_VIRTUAL_MIX selects
// mixes as in TestVirtualUpstreams; RATELANE_VIRTUAL_PACEDFAULT=0 retries
// every fault after the engine's backoff, as before store.PacedFault;
// RATELANE_VIRTUAL_SEEDS=n runs seeds 1 to n instead of 8, and each line
// also gives the worst run and the worst refused share).
func TestVirtualAllMixes(t *testing.T) {
	if os.Getenv("RATELANE_VIRTUAL_ALLMIXES") == "" {
		t.Skip("set RATELANE_VIRTUAL_ALLMIXES=1 to log every mix, seeds 1-8")
	}
	if os.Getenv("RATELANE_VIRTUAL_PACEDFAULT") == "0" {
		// The engine's backoff after every fault, as before session 16.
		virtualPacedFault = false
		defer func() { virtualPacedFault = true }()
	}
	seeds := virtualSeeds()
	var table strings.Builder
	for _, m := range selectedVirtualMixes() {
		for _, lag := range []virtualLag{{name: "none"}, lagQuiet} {
			var sum, share, worst, worstShare float64
			fmt.Fprintf(&table, "%-12s %-5s", m.Name, lag.name)
			for seed := uint64(1); seed <= seeds; seed++ {
				r := runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lag)
				sum, share, worst = sum+r.ratio/float64(seeds), share+r.share/float64(seeds), max(worst, r.ratio)
				worstShare = max(worstShare, r.share)
				if seeds <= 8 {
					fmt.Fprintf(&table, " %.3f/%.2f%%", r.ratio, 100*r.share)
				}
			}
			fmt.Fprintf(&table, " | mean %.4f %.2f%% worst %.3f %.2f%%\n", sum, 100*share, worst, 100*worstShare)
		}
	}
	t.Log("\n" + table.String())
}
