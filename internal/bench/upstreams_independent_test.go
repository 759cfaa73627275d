package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// TestVirtualDestinationsIndependent holds the virtual harness to what
// makes its figures attributable: a mix's destinations share nothing but
// the run's clock. One key's declared limit is changed (halving-503 told
// a fixed 15/s instead of an adaptive 30; counter-20 told 19/s instead of
// 20) and every other destination of the mix must start, be refused and
// finish exactly as before, under the quiet lag, seeds 1 to 4. Until
// session 21 the destinations drew backoffs and lags from one generator,
// shared one finish writer and one event queue, and such a change moved
// most other keys' refusals and finishes (docs/benchmarks.md, session 20,
// s20h2: 31 of 32 lines on the issue mix), so a pacing change to one key
// read as a gain or loss on another.
func TestVirtualDestinationsIndependent(t *testing.T) {
	changes := map[string]func(d *UpstreamDestination){
		"halving-503": func(d *UpstreamDestination) { d.Declared, d.Adaptive = 15, false },
		"counter-20":  func(d *UpstreamDestination) { d.Declared = 19 },
	}
	for _, m := range Upstreams(false).Mixes {
		changed := slices.IndexFunc(m.Destinations, func(d UpstreamDestination) bool { return changes[d.Name] != nil })
		if changed < 0 {
			continue
		}
		alt := m
		alt.Destinations = slices.Clone(m.Destinations)
		changes[alt.Destinations[changed].Name](&alt.Destinations[changed])
		for seed := uint64(1); seed <= 4; seed++ {
			a := runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lagQuiet)
			b := runVirtualMixLag(t, alt, seed, 60*time.Second, upstream.Latency{}, lagQuiet)
			if slices.Equal(a.dests[changed].starts, b.dests[changed].starts) {
				t.Errorf("mix %s seed %d: changing %s's declared limit did not change its starts", m.Name, seed, m.Destinations[changed].Name)
			}
			for i, v := range a.dests {
				if i == changed {
					continue
				}
				w := b.dests[i]
				switch {
				case !slices.Equal(v.starts, w.starts):
					t.Errorf("mix %s seed %d: %s changed %s's starts (%d -> %d)", m.Name, seed, m.Destinations[changed].Name, v.d.Name, len(v.starts), len(w.starts))
				case !slices.Equal(v.refusedAt, w.refusedAt):
					t.Errorf("mix %s seed %d: %s changed %s's refusals (%d -> %d)", m.Name, seed, m.Destinations[changed].Name, v.d.Name, v.refused, w.refused)
				case !v.last.Equal(w.last):
					t.Errorf("mix %s seed %d: %s changed %s's finish (%v -> %v)", m.Name, seed, m.Destinations[changed].Name, v.d.Name, v.last.Sub(a.epoch), w.last.Sub(b.epoch))
				}
			}
		}
	}
}
