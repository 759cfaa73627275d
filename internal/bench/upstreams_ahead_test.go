package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// TestVirtualLeaseAhead measures leasing ahead (issue 12, session 14,
// s14h6): every mix, seeds 1 to 3, under no lag, the quiet and loaded
// lag profiles and loadedTransit, with the simulated sender leasing a
// start whose admissible instant is within the horizon in
// RATELANE_VIRTUAL_AHEAD (a duration; 0s is today's sender), and logs per
// row the makespans (of ideal) and refusal shares, the mean of the
// destinations' own finish-to-ideal ratios (steadier than the makespan,
// which one destination's tail sets) and the start lag (admissible
// instant to arrival at the upstream, see virtualDest.startLag).
// RATELANE_VIRTUAL_AHEAD_DECLARED=1 leases ahead on keys that are not
// adaptive only, RATELANE_VIRTUAL_AHEAD_DROP=1 drops a start leased ahead
// whose key paused before it went out; RATELANE_VIRTUAL_DETAIL=1 logs every run per
// destination. Skipped without RATELANE_VIRTUAL_AHEAD: a measurement, not
// a check (the figures are in docs/benchmarks.md, "Session 14 (s14h6)").
func TestVirtualLeaseAhead(t *testing.T) {
	h := os.Getenv("RATELANE_VIRTUAL_AHEAD")
	if h == "" {
		t.Skip("set RATELANE_VIRTUAL_AHEAD (e.g. 20ms) to measure")
	}
	d, err := time.ParseDuration(h)
	if err != nil {
		t.Fatal(err)
	}
	defer setVirtualAhead(d, os.Getenv("RATELANE_VIRTUAL_AHEAD_DECLARED") != "", os.Getenv("RATELANE_VIRTUAL_AHEAD_DROP") != "")()
	var b strings.Builder
	for _, m := range selectedVirtualMixes() {
		for _, lag := range []virtualLag{{name: "none"}, lagQuiet, lagLoaded, {name: "transit"}} {
			tr := upstream.Latency{}
			if lag.name == "transit" {
				tr = loadedTransit
			}
			var cells []string
			var lags []time.Duration
			var dsum float64
			var dn int
			for seed := uint64(1); seed <= 3; seed++ {
				r := runVirtualMixLag(t, m, seed, 60*time.Second, tr, lag)
				if os.Getenv("RATELANE_VIRTUAL_DETAIL") != "" {
					logVirtualMix(t, m, seed, r)
				}
				for i, v := range r.dests {
					dsum += v.last.Sub(r.epoch).Seconds() / r.ideal[i].Seconds()
					dn++
					lags = append(lags, v.startLag...)
				}
				cells = append(cells, fmt.Sprintf("%.3f (%.2f%%)", r.ratio, 100*r.share))
			}
			fmt.Fprintf(&b, "ahead %v %-10s %-7s %s  dest mean %.3f  lag mean %.1f p50 %.1f p90 %.1f p99 %.1f ms\n", d, m.Name, lag.name,
				strings.Join(cells, " / "), dsum/float64(dn), meanMS(lags), quantileMS(lags, 0.5), quantileMS(lags, 0.9), quantileMS(lags, 0.99))
		}
	}
	t.Log("\n" + b.String())
}

// TestVirtualLeaseAheadFixedBoundary holds a sender that leases ahead to
// the fixed mix's figures without it: no refusal and no more accepted
// arrivals in an aligned second than declared. Leased ahead across a
// fixed window's aligned boundary, a start counted in the next window
// let a check still in the current one find its log empty: 8.8 % of
// the fixed mix's attempts were refused without any lag (see aheadKeeps).
func TestVirtualLeaseAheadFixedBoundary(t *testing.T) {
	defer setVirtualAhead(20*time.Millisecond, false, false)()
	m := Upstreams(false).Mixes[2]
	if m.Name != "fixed" {
		t.Fatalf("mix 2 is %q, want fixed", m.Name)
	}
	for _, lag := range []virtualLag{{name: "none"}, lagQuiet} {
		r := runVirtualMixLag(t, m, 1, 60*time.Second, upstream.Latency{}, lag)
		for _, v := range r.dests {
			if v.refused > 0 {
				t.Errorf("lag %s: %s refused %d times leased ahead", lag.name, v.d.Name, v.refused)
			}
			if n := maxInAligned(v.arrivals, time.Second); n > v.d.Declared {
				t.Errorf("lag %s: %s: %d accepted arrivals in one aligned second, declared %d", lag.name, v.d.Name, n, v.d.Declared)
			}
		}
		if r.ratio > 1.11 {
			t.Errorf("lag %s: makespan %.3f of ideal leased ahead, want <= 1.11", lag.name, r.ratio)
		}
	}
}

// setVirtualAhead sets the simulated sender's lease-ahead horizon and
// variants (virtualAheadDeclaredOnly, virtualAheadDrop) and returns what
// restores them.
func setVirtualAhead(d time.Duration, declaredOnly, drop bool) func() {
	oldD, oldOnly, oldDrop := virtualAhead, virtualAheadDeclaredOnly, virtualAheadDrop
	virtualAhead, virtualAheadDeclaredOnly, virtualAheadDrop = d, declaredOnly, drop
	return func() { virtualAhead, virtualAheadDeclaredOnly, virtualAheadDrop = oldD, oldOnly, oldDrop }
}

// meanMS is the mean of ds in milliseconds; 0 when empty.
func meanMS(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return float64(s) / float64(len(ds)) / 1e6
}
