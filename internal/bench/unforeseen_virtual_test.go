package bench

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
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
		epoch := time.Date(2026, 1, 1, 0, 0, 0, 123_000_000, time.UTC)
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
