package bench

import (
	"cmp"
	"maps"
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
// interval. Each review is resampled on its own, as if every review were
// independent of its neighbours (blockRatioInterval is the interval for
// reviews that are not). Both slices are left as they were. It returns
// NaNs when either is empty.
func ratioInterval(base, xs []time.Duration, q, level float64, n int, seed uint64) (lo, hi float64) {
	return blockRatioInterval(singletons(base), singletons(xs), q, level, n, seed)
}

// singletons puts each of xs in a block of its own.
func singletons(xs []time.Duration) [][]time.Duration {
	out := make([][]time.Duration, len(xs))
	for i := range xs {
		out[i] = xs[i : i+1]
	}
	return out
}

// blockRatioInterval is ratioInterval over blocks of reviews: each
// resample draws as many whole blocks as each phase has, with
// replacement, and takes the ratio of the quantiles of the reviews they
// hold. Slow reviews come in bursts (a host stall, the phase's first
// second: docs/benchmarks.md, "Session 32 (s32h1)"), and a bootstrap of
// single reviews keeps a burst's share of the tail nearly constant in
// every resample, so its interval is too narrow; a block bootstrap of
// blocks at least a burst long resamples the bursts themselves. The
// blocks are left as they were; NaNs when either phase has no review.
func blockRatioInterval(base, xs [][]time.Duration, q, level float64, n int, seed uint64) (lo, hi float64) {
	return blockInterval(base, xs, q, level, n, seed, func(x, b float64) float64 { return x / b })
}

// blockDeltaInterval is blockRatioInterval for the difference of the
// quantiles, xs's less base's, in ms: the additive shift, which a fast
// baseline does not inflate as it does a ratio. The same seed draws the
// same resamples as blockRatioInterval.
func blockDeltaInterval(base, xs [][]time.Duration, q, level float64, n int, seed uint64) (lo, hi float64) {
	return blockInterval(base, xs, q, level, n, seed, func(x, b float64) float64 { return x - b })
}

// blockInterval is the block bootstrap under blockRatioInterval and
// blockDeltaInterval: of compares a resample's xs quantile (ms) with its
// base quantile.
func blockInterval(base, xs [][]time.Duration, q, level float64, n int, seed uint64, of func(x, b float64) float64) (lo, hi float64) {
	if countIn(base) == 0 || countIn(xs) == 0 || n <= 0 {
		return math.NaN(), math.NaN()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var bs, xb []time.Duration
	draw := func(buf []time.Duration, blocks [][]time.Duration) []time.Duration {
		buf = buf[:0]
		for range blocks {
			buf = append(buf, blocks[rng.IntN(len(blocks))]...)
		}
		return buf
	}
	stats := make([]float64, 0, n)
	for len(stats) < n {
		bs, xb = draw(bs, base), draw(xb, xs)
		if len(bs) == 0 || len(xb) == 0 {
			continue // only empty blocks drawn: nothing to compare
		}
		stats = append(stats, of(Percentile(xb, q), Percentile(bs, q)))
	}
	slices.Sort(stats)
	tail := (1 - level) / 2
	return quantileOf(stats, tail), quantileOf(stats, 1-tail)
}

// countIn is how many reviews blocks hold.
func countIn(blocks [][]time.Duration) int {
	n := 0
	for _, b := range blocks {
		n += len(b)
	}
	return n
}

// reviewBlock is how long a block of blockRatioInterval lasts: reviews
// submitted in one 2 s stretch of a phase (20 at 10/s) are one block.
// The baseline's slow reviews of session 32 came one to three within a
// second or two of each other, and a 20 s phase still gives ten blocks.
const reviewBlock = 2 * time.Second

// blocksOf groups lats by when they were submitted (ats, at the same
// index) into blocks of span, counted from the earliest; empty stretches
// give no block. lats is left as it was (the blocks are copies).
func blocksOf(lats []time.Duration, ats []time.Time, span time.Duration) [][]time.Duration {
	if len(lats) == 0 {
		return nil
	}
	first := slices.MinFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
	byBlock := map[int][]time.Duration{}
	for i, lat := range lats {
		k := int(ats[i].Sub(first) / span)
		byBlock[k] = append(byBlock[k], lat)
	}
	out := make([][]time.Duration, 0, len(byBlock))
	for _, k := range slices.Sorted(maps.Keys(byBlock)) {
		out = append(out, byBlock[k])
	}
	return out
}

// quantileOf is the q quantile of sorted vs, nearest rank as Percentile.
func quantileOf(vs []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(vs)))) - 1
	return vs[max(0, min(len(vs)-1, i))]
}

// trimBlockShare is the share of a phase's blocks of reviews (reviewBlock)
// blockTrimmedQuantile leaves out, the slowest first: one 2 s block in
// ten, so one stall episode in a 20 s window, which on a shared machine
// comes from outside the process (docs/benchmarks.md, "Session 40
// (s40h1)"), does not set the figure.
const trimBlockShare = 0.1

// blockTrimmedQuantile is the q quantile (nearest rank, as Percentile) of
// the reviews of blocks left once the ceil(share × len(blocks)) blocks
// with the slowest review are dropped: a figure a single stall episode,
// which hits a few consecutive reviews, does not set, where a slowdown
// spread over the phase still shows. 0 for no blocks; every block is
// kept when dropping would leave none.
func blockTrimmedQuantile(blocks [][]time.Duration, q, share float64) float64 {
	drop := int(math.Ceil(share * float64(len(blocks))))
	if drop >= len(blocks) {
		drop = 0
	}
	byMax := slices.Clone(blocks)
	slices.SortStableFunc(byMax, func(a, b []time.Duration) int { return cmp.Compare(slices.Max(b), slices.Max(a)) })
	var kept []time.Duration
	for _, b := range byMax[drop:] {
		kept = append(kept, b...)
	}
	if len(kept) == 0 {
		return 0
	}
	return Percentile(kept, q)
}

// overMedian counts the latencies above k times their median: the
// reviews a stall episode hit.
func overMedian(lats []time.Duration, k float64) int {
	if len(lats) == 0 {
		return 0
	}
	med := Percentile(slices.Clone(lats), 0.5)
	n := 0
	for _, l := range lats {
		if float64(l) > k*med*float64(time.Millisecond) {
			n++
		}
	}
	return n
}
