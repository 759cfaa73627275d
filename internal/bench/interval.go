package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// The batch-isolation target is a ratio of two p99s, each over a few
// hundred to a thousand reviews: the p99 of 1,000 samples is decided by
// its ten slowest, so two runs of one binary differ by more than the 10 %
// the target allows (docs/benchmarks.md: 1.10-1.26 against 1.16-1.46 for
// two trees in one hour, session 30). A figure without its spread invites
// reading noise as progress. ratioInterval gives the ratio's percentile
// bootstrap interval: resample both phases' reviews with replacement,
// take the ratio of their quantiles, and report the middle level of those
// ratios. It says how far the same reviews could have moved the figure;
// it does not cover what differs between runs (the machine's load, the
// hour), which only more runs or interleaved pairs show.

// bootstrapResamples is how many resamples ratioInterval draws: enough
// that a 90 % interval's bounds move by well under a percent between
// seeds at a thousand samples a phase, and cheap beside a run
// (2 × 2,000 sorts of ~1,000 durations, tens of milliseconds).
const bootstrapResamples = 2000

// ratioInterval returns the central level (0.9: the 5th and 95th
// percentiles) bootstrap interval of Percentile(xs, q) ÷ Percentile(base,
// q) from n resamples drawn with seed: the same inputs give the same
// interval. Both slices are left as they were. It returns NaNs when
// either is empty.
func ratioInterval(base, xs []time.Duration, q, level float64, n int, seed uint64) (lo, hi float64) {
	if len(base) == 0 || len(xs) == 0 || n <= 0 {
		return math.NaN(), math.NaN()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	bs := make([]time.Duration, len(base))
	xb := make([]time.Duration, len(xs))
	ratios := make([]float64, n)
	for i := range ratios {
		for k := range bs {
			bs[k] = base[rng.IntN(len(base))]
		}
		for k := range xb {
			xb[k] = xs[rng.IntN(len(xs))]
		}
		ratios[i] = Percentile(xb, q) / Percentile(bs, q)
	}
	slices.Sort(ratios)
	tail := (1 - level) / 2
	return quantileOf(ratios, tail), quantileOf(ratios, 1-tail)
}

// quantileOf is the q quantile of sorted vs, nearest rank as Percentile.
func quantileOf(vs []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(vs)))) - 1
	return vs[max(0, min(len(vs)-1, i))]
}
