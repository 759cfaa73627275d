package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/upstream"
)

// TestVirtualConcurrencyFloor measures the unforeseen mix's concurrent-1
// under loadedTransit against a sender told the truth: the same
// destination paced by a fixed key with its real concurrency limit of one
// configured, so that it never overlaps two requests and is never
// refused. Such a sender waits for each answer before the next start, so
// it pays the transit out and back and the upstream's latency once per
// request (about 145 ms here, under 7 starts a second against a rate of
// 20): that, not discovery, is why the mix reads ~3x its ideal under
// transit, and only a sender that starts before the previous answer is
// back could go faster. The adaptive key, which must discover the limit,
// is held to within 6% of that floor's finish (a regression guard) and
// to at most 5 refusals a seed: the first overlaps before the cap is
// learned, then one cap probe per MaxCapHold (a probe refused at a level
// is not retried before MaxCapHold; doubling from CapHold spent a sixth
// refusal on seed 3).
func TestVirtualConcurrencyFloor(t *testing.T) {
	var m UpstreamsMix
	for _, x := range Upstreams(false).Mixes {
		if x.Name == "unforeseen" {
			m = x
		}
	}
	const dest = "concurrent-1"
	truth := admission.UpstreamWindow("subscriber:"+dest, 20, time.Second, 20, admission.DefaultHeadroom)
	truth.Concurrency = 1
	for seed := uint64(1); seed <= 3; seed++ {
		floor := pick(t, runVirtualMix(t, m, seed, 60*time.Second, loadedTransit, truth), dest)
		got := pick(t, runVirtualMix(t, m, seed, 60*time.Second, loadedTransit), dest)
		epoch := virtualEpoch
		f, g := floor.last.Sub(epoch).Seconds(), got.last.Sub(epoch).Seconds()
		t.Logf("seed %d: %s told its cap finishes at %.2fs (%d refused); discovering it, at %.2fs (%.3f of that), %d refused, cap %d",
			seed, dest, f, floor.refused, g, g/f, got.refused, got.st.LearnedConcurrency)
		if floor.refused != 0 || floor.accepted < floor.d.Jobs {
			t.Errorf("seed %d: the sender told the truth was refused %d times, delivered %d of %d", seed, floor.refused, floor.accepted, floor.d.Jobs)
		}
		if got.accepted < got.d.Jobs {
			t.Errorf("seed %d: %d of %d delivered", seed, got.accepted, got.d.Jobs)
		}
		if g > 1.06*f {
			t.Errorf("seed %d: discovery finished at %.2fs, over 1.06x the floor %.2fs", seed, g, f)
		}
		if got.refused > 5 {
			t.Errorf("seed %d: %d refusals, want at most 5", seed, got.refused)
		}
	}
}

// TestVirtualEpochOffsets runs the mixes whose upstreams count in windows
// aligned to the clock (fixed windows, the sliding counter) from ten
// starts 0-900 ms into a second, without transit: the real benchmark
// starts wherever the clock stands, and an aligned upstream's first window
// (so its ideal, and where its refusals fall) moves with it, while the
// other virtual tests start at virtualEpoch's 123 ms only. counter-20's
// ideal runs from 9.89 s (offset 0) to 8.99 s (900 ms), so from 500 ms on
// unforeseen's ideal is concurrent-1's 9.38 s and its makespan
// concurrent-1's 10.46 s (session 11: 1.110-1.116 at every offset). Each
// run is held to delivery in full, invariant 6, the refusal target and
// unforeseenBound; fixed to its ideal exactly, with no refusal.
func TestVirtualEpochOffsets(t *testing.T) {
	var table strings.Builder
	for _, m := range Upstreams(false).Mixes {
		if m.Name != "unforeseen" && m.Name != "fixed" {
			continue
		}
		for ms := 0; ms < 1000; ms += 100 {
			epoch := time.Date(2026, 1, 1, 0, 0, 0, ms*int(time.Millisecond), time.UTC)
			r := runVirtualMixFrom(t, m, 1, 60*time.Second, upstream.Latency{}, virtualLag{}, epoch)
			checkVirtualMix(t, m, 1, r)
			fmt.Fprintf(&table, "%-10s offset %3d ms: makespan %.3f of ideal, refused %.2f%%;", m.Name, ms, r.ratio, 100*r.share)
			for i, v := range r.dests {
				fmt.Fprintf(&table, " %s %.2f/%.2fs (%d refused)", v.d.Name, v.last.Sub(epoch).Seconds(), r.ideal[i].Seconds(), v.refused)
				if m.Name == "fixed" && v.refused > 0 {
					t.Errorf("fixed offset %d ms: %s refused %d times", ms, v.d.Name, v.refused)
				}
			}
			table.WriteString("\n")
			bound := unforeseenBound
			if m.Name == "fixed" {
				bound = 1.0005
			}
			if r.ratio > bound || r.share > 0.02 {
				t.Errorf("%s offset %d ms: makespan %.3f of ideal (want <= %.3f), refused %.2f%% (want <= 2%%)", m.Name, ms, r.ratio, bound, 100*r.share)
			}
		}
	}
	t.Log("\n" + table.String())
}

// pick returns r's destination named name.
func pick(t *testing.T, r virtualMix, name string) *virtualDest {
	t.Helper()
	for _, v := range r.dests {
		if v.d.Name == name {
			return v
		}
	}
	t.Fatalf("no destination %s", name)
	return nil
}

// capOneMix is a virtual-only mix of receivers that take one request at a
// time and also count starts in a shape the unforeseen mix's concurrent-1
// (a sliding window of its declared 20) does not have: a token bucket at
// exactly the declared rate with a burst of one, a bucket under it
// (the declaration too high), and a fixed window of the declared limit.
// A key that learned a cap of one paces at its declared window's rate
// instead of its headroom-reduced ceiling (see admission's rate); these
// are the shapes on which that could cost refusals.
func capOneMix() UpstreamsMix {
	bucket := upstream.RouteConfig{Rate: 20, Burst: 1, MaxConcurrent: 1, OverLimit: upstream.OverLimit429None, Latency: latency}
	lower := upstream.RouteConfig{Rate: 15, Burst: 2, MaxConcurrent: 1, OverLimit: upstream.OverLimit429None, Latency: latency}
	fixedW := upstream.RouteConfig{Algorithm: upstream.AlgorithmFixedWindow, Window: time.Second, Limit: 20, MaxConcurrent: 1,
		OverLimit: upstream.OverLimit429Seconds, Latency: latency}
	return UpstreamsMix{Name: "cap-one", Destinations: []UpstreamDestination{
		{Name: "cap1-bucket-20", Declared: 20, Adaptive: true, Route: bucket, Jobs: 200},
		{Name: "cap1-bucket-15", Declared: 20, Adaptive: true, Route: lower, Jobs: 150},
		{Name: "cap1-fixed-20", Declared: 20, Adaptive: true, Route: fixedW, Jobs: 200},
	}}
}

// TestVirtualCapOneShapes runs capOneMix, seeds 1 to 3, without transit
// and under loadedTransit, prints its figures (-v) and holds it to
// delivery in full, invariant 6, and each destination to the most
// refusals it met on session 13's base (8a97e2f) over the three seeds: a
// pacing rule designed on the unforeseen mix's sliding window must not
// cost extra refusals on these. Session 13 tried one that failed here: a
// key that learned a cap of one paced at its declared window's 20/s
// instead of its 19.4/s ceiling (concurrent-1 10.46 -> 10.29 s), and
// cap1-bucket-20 met 14 refusals where it met 7 (docs/benchmarks.md).
// Without transit cap1-bucket-20 is held to 2 (its cap's first refusal
// and one refused burst), which even pacing after a refusal the rate did
// not cause (admission's even.go, s13h8) brought it to from 7 / 6 / 7.
func TestVirtualCapOneShapes(t *testing.T) {
	m := capOneMix()
	for _, tr := range []struct {
		name    string
		transit upstream.Latency
		most    map[string]int // refusals per destination, base
	}{
		{"none", upstream.Latency{}, map[string]int{"cap1-bucket-20": 2, "cap1-bucket-15": 8, "cap1-fixed-20": 1}},
		{"transit", loadedTransit, map[string]int{"cap1-bucket-20": 7, "cap1-bucket-15": 5, "cap1-fixed-20": 11}},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			r := runVirtualMix(t, m, seed, 60*time.Second, tr.transit)
			t.Logf("transit %s seed %d: makespan %.3f of ideal, refused %.2f%%", tr.name, seed, r.ratio, 100*r.share)
			checkVirtualMix(t, m, seed, r)
			for _, v := range r.dests {
				if most := tr.most[v.d.Name]; v.refused > most {
					t.Errorf("transit %s seed %d: %s refused %d times, base met at most %d", tr.name, seed, v.d.Name, v.refused, most)
				}
			}
		}
	}
}

// TestVirtualRisingSilent runs the rising mix with its upstreams' quota
// fields removed, seeds 1 to 3 without transit: an upstream whose limit
// rises and says nothing, so the key finds the rise by probing alone
// (IncreasePerSecond, GrowthPerSecond, the hold after a refusal) and pays
// for it in refusals. It prints the figures (-v) and holds the mix to
// delivery in full, invariant 6, and the 2 % refusal target.
func TestVirtualRisingSilent(t *testing.T) {
	var m UpstreamsMix
	for _, x := range Upstreams(false).Mixes {
		if x.Name == "rising" {
			m = x
		}
	}
	m.Name = "rising-silent"
	dests := append([]UpstreamDestination(nil), m.Destinations...)
	for i := range dests {
		dests[i].Route.Headers = upstream.HeaderStyleNone
	}
	m.Destinations = dests
	for seed := uint64(1); seed <= 3; seed++ {
		r := runVirtualMix(t, m, seed, 60*time.Second, upstream.Latency{})
		checkVirtualMix(t, m, seed, r)
		if r.share > 0.02 {
			t.Errorf("seed %d: refused %.2f%% of attempts, want <= 2%%", seed, 100*r.share)
		}
	}
}

// TestVirtualCapOneOracle logs what holds the unforeseen mix's
// concurrent-1 (a sliding 20/s that takes one request at a time) at
// 10.3 s where River's sender, at exactly the declared 20/s, reaches
// 9.95 s (TestVirtualUnforeseenRiver): ratelane's key, the same key with
// no headroom (its ceiling the declared 20/s), the key whose windows log
// each start at the upstream's arrival instead of its answer (an oracle:
// no sender knows when the upstream counted a request), and both. Seeds
// 1 to 8, lag none and quiet; mean last accepted start and refusals over
// the eight. Set RATELANE_VIRTUAL_DECOMPOSE=1 to run it
// (docs/benchmarks.md, session 24, s24h2).
func TestVirtualCapOneOracle(t *testing.T) {
	if os.Getenv("RATELANE_VIRTUAL_DECOMPOSE") == "" {
		t.Skip("set RATELANE_VIRTUAL_DECOMPOSE=1 to log the oracle")
	}
	var m UpstreamsMix
	for _, x := range Upstreams(false).Mixes {
		if x.Name == "unforeseen" {
			m = x
		}
	}
	const dest, seeds = "concurrent-1", 8
	noHeadroom := admission.AdaptiveUpstreamWindow("subscriber:"+dest, 20, time.Second, 20, 0)
	var table strings.Builder
	for _, lag := range []virtualLag{{name: "none"}, lagQuiet} {
		for _, s := range []struct {
			how     string
			arrival bool
			limits  []admission.Config
		}{
			{"ratelane's key (19.4/s ceiling, windows log answers)", false, nil},
			{"no headroom (20/s ceiling)", false, []admission.Config{noHeadroom}},
			{"windows log arrivals (oracle)", true, nil},
			{"no headroom and windows log arrivals (oracle)", true, []admission.Config{noHeadroom}},
		} {
			virtualLogArrival = s.arrival
			finish, refused := 0.0, 0
			for seed := uint64(1); seed <= seeds; seed++ {
				v := pick(t, runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lag, s.limits...), dest)
				if v.accepted < v.d.Jobs {
					t.Errorf("%s, lag %s, seed %d: %d of %d delivered", s.how, lag.name, seed, v.accepted, v.d.Jobs)
				}
				finish += v.last.Sub(virtualEpoch).Seconds() / seeds
				refused += v.refused
			}
			fmt.Fprintf(&table, "lag %-5s %-55s finish %6.3fs, %d refused in %d runs\n", lag.name, s.how, finish, refused, seeds)
		}
	}
	virtualLogArrival = false
	t.Log("\n" + table.String())
}
