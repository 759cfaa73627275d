package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/upstream"
)

// TestVirtualAdapt runs the adapt workload's scenario in simulated time:
// one destination whose token bucket (burst 10) moves 100/s -> 30/s ->
// 80/s every 15 s, answering 429 with no Retry-After and no rate-limit
// headers, paced by the adaptive key runAdapt declares (ceiling 120/s,
// burst 10). It scores it as runAdapt does (goodput per phase, the first
// second left out; seconds to converge after each change) and holds it,
// over three seeds, to what it reaches: goodput 0.938 (target >= 0.85),
// convergence 3 s after the drop and 2 s after the rise (target <= 5 s),
// 1.88% refused (target <= 2%). The real `ratelane bench adapt` figure is this plus the machine's
// noise; this one fails on a discovery regression, not on a loaded run.
func TestVirtualAdapt(t *testing.T) {
	const phase = 15
	dest := UpstreamDestination{Name: "dest", Declared: 120, Adaptive: true,
		Route: upstream.RouteConfig{Rate: adaptPhases[0], Burst: adaptBurst,
			OverLimit: upstream.OverLimit429None, Headers: upstream.HeaderStyleNone}}
	for k := 1; k < len(adaptPhases); k++ {
		dest.Route.Changes = append(dest.Route.Changes,
			upstream.LimitChange{After: time.Duration(k*phase) * time.Second, Rate: adaptPhases[k], Burst: adaptBurst})
	}
	// More than the run can deliver, as in runAdapt: the key is never idle.
	dest.Jobs = 120 * phase * len(adaptPhases)
	key := admission.Config{Name: "subscriber:dest", Rate: 120, Burst: adaptBurst, Adaptive: true}
	mix := UpstreamsMix{Name: "adapt", Destinations: []UpstreamDestination{dest}}
	for seed := uint64(1); seed <= 3; seed++ {
		bound := time.Duration(phase*len(adaptPhases)) * time.Second
		r := runVirtualMix(t, mix, seed, bound, upstream.Latency{}, key)
		v := r.dests[0]
		epoch := v.arrivals[0].Truncate(time.Second) // the run's epoch, to the second
		bySec := map[int64]upstream.TimelineSecond{}
		for _, at := range v.arrivals {
			s := bySec[int64(at.Sub(epoch)/time.Second)]
			s.Accepted++
			bySec[int64(at.Sub(epoch)/time.Second)] = s
		}
		for _, at := range v.refusedAt {
			s := bySec[int64(at.Sub(epoch)/time.Second)]
			s.RateLimited++
			bySec[int64(at.Sub(epoch)/time.Second)] = s
		}
		var acc, allowance, worst float64
		line := fmt.Sprintf("seed %d:", seed)
		for k, limit := range adaptPhases {
			from, to := int64(k*phase), int64((k+1)*phase)
			if k == 0 {
				from++ // start-up, as runAdapt leaves it out
			}
			var a int64
			for u := from; u < to; u++ {
				a += bySec[u].Accepted
			}
			g := float64(a) / float64(to-from) / limit
			acc, allowance = acc+float64(a), allowance+limit*float64(to-from)
			line += fmt.Sprintf(" phase%d %.3f", k+1, g)
			if k > 0 {
				c := converge(bySec, int64(k*phase), to, limit, adaptBurst)
				worst = max(worst, c)
				line += fmt.Sprintf(" (converged in %.0f s)", c)
			}
		}
		goodput := acc / allowance
		t.Logf("%s goodput %.3f, worst convergence %.0f s, refused %.2f%%", line, goodput, worst, 100*r.share)
		// Held to what the strategy reaches here, as TestVirtualUpstreams
		// holds its mixes. Until session 16 the drop to 30/s took 12 s:
		// the trailing window, still counting the old 100/s, halved the
		// key to ~22/s, and the probe passed 30 twice before it settled;
		// measured between two refusals (discover.go, sinceCut) it is
		// learned on the second signal. See docs/benchmarks.md.
		if goodput < 0.91 || worst > 3 || r.share > 0.02 {
			t.Errorf("seed %d: goodput %.3f (want >= 0.91), worst convergence %.0f s (want <= 3), refused %.2f%% (want <= 2%%)",
				seed, goodput, worst, 100*r.share)
		}
	}
}
