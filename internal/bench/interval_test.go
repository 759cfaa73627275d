package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRatioIntervalDegenerate: phases whose reviews all took one time
// each leave the ratio nothing to vary by.
func TestRatioIntervalDegenerate(t *testing.T) {
	t.Parallel()
	base := make([]time.Duration, 200)
	xs := make([]time.Duration, 300)
	for i := range base {
		base[i] = 10 * time.Millisecond
	}
	for i := range xs {
		xs[i] = 25 * time.Millisecond
	}
	lo, hi := ratioInterval(base, xs, 0.99, 0.9, 500, 1)
	if lo != 2.5 || hi != 2.5 {
		t.Errorf("interval = [%v, %v], want [2.5, 2.5]", lo, hi)
	}
	if lo, hi := ratioInterval(nil, xs, 0.99, 0.9, 500, 1); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("no baseline: [%v, %v], want NaNs", lo, hi)
	}
}

// spread returns n durations whose quantiles are known: 1..n ms, in an
// order that is not sorted (ratioInterval must not rely on order).
func spread(n int, scale float64) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		k := (i*7919)%n + 1
		out[i] = time.Duration(float64(k) * scale * float64(time.Millisecond))
	}
	return out
}

// TestRatioIntervalCoversAndNarrows: the interval holds the point ratio,
// is the same for the same seed, leaves its inputs as they were, and is
// narrower with ten times the reviews (what pooled runs buy).
func TestRatioIntervalCoversAndNarrows(t *testing.T) {
	t.Parallel()
	width := func(n int) float64 {
		base, xs := spread(n, 1), spread(n, 1.2)
		b0, x0 := slices.Clone(base), slices.Clone(xs)
		lo, hi := ratioInterval(base, xs, 0.99, 0.9, 400, 7)
		if !slices.Equal(base, b0) || !slices.Equal(xs, x0) {
			t.Fatalf("n=%d: ratioInterval changed its inputs", n)
		}
		point := Percentile(slices.Clone(xs), 0.99) / Percentile(slices.Clone(base), 0.99)
		if !(lo <= point && point <= hi) {
			t.Errorf("n=%d: point %v outside [%v, %v]", n, point, lo, hi)
		}
		if lo2, hi2 := ratioInterval(base, xs, 0.99, 0.9, 400, 7); lo2 != lo || hi2 != hi {
			t.Errorf("n=%d: same seed gave [%v, %v] then [%v, %v]", n, lo, hi, lo2, hi2)
		}
		if !(lo < 1.2 && 1.2 < hi) {
			t.Errorf("n=%d: [%v, %v] does not hold the true ratio 1.2", n, lo, hi)
		}
		return hi - lo
	}
	small, large := width(300), width(3000)
	if !(large < small/2) {
		t.Errorf("width at 3,000 reviews %v, at 300 %v: want less than half", large, small)
	}
}

// burstyPhase is a phase of blocks of 10 reviews, each block a burst of
// slow reviews with probability 0.1 (all ten 40-120 ms) and typical
// otherwise (5-15 ms): the shape of the baseline's tail in session 32,
// where slow reviews came together.
func burstyPhase(rng *rand.Rand, blocks int) [][]time.Duration {
	out := make([][]time.Duration, blocks)
	for b := range out {
		burst := rng.Float64() < 0.1
		level := 40 + 80*rng.Float64()
		for range 10 {
			ms := 5 + 10*rng.Float64()
			if burst {
				ms = level * (0.9 + 0.2*rng.Float64())
			}
			out[b] = append(out[b], time.Duration(ms*float64(time.Millisecond)))
		}
	}
	return out
}

// TestBlockIntervalCoversBursts: two phases drawn alike (their p99s'
// ratio is 1 in truth) whose slow reviews come in bursts. A bootstrap of
// single reviews keeps each burst's share of the tail in every
// resample, so its 90 % interval holds 1 far less often than 90 % of the
// time (18 of 60 trials here); the block bootstrap resamples the bursts
// and holds it far more often (43 of 60), still short of 90 %: a
// percentile bootstrap of a p99 decided by three or so bursts is rough,
// which is why the bounds are 2/3 and 1/2, not 90 %.
func TestBlockIntervalCoversBursts(t *testing.T) {
	t.Parallel()
	const trials = 60
	rng := rand.New(rand.NewPCG(3, 5))
	var single, block int
	for i := range trials {
		base, xs := burstyPhase(rng, 30), burstyPhase(rng, 30)
		if lo, hi := ratioInterval(slices.Concat(base...), slices.Concat(xs...), 0.99, 0.9, 300, uint64(i)); lo <= 1 && 1 <= hi {
			single++
		}
		if lo, hi := blockRatioInterval(base, xs, 0.99, 0.9, 300, uint64(i)); lo <= 1 && 1 <= hi {
			block++
		}
	}
	t.Logf("the interval held the true ratio in %d (single reviews) and %d (blocks) of %d trials", single, block, trials)
	if block < trials*2/3 {
		t.Errorf("the block bootstrap held the true ratio in %d of %d trials, want at least 2/3", block, trials)
	}
	if single >= trials/2 {
		t.Errorf("the bootstrap of single reviews held it in %d of %d trials, want under 1/2: the bursts should fool it", single, trials)
	}
}

// TestBlockDeltaInterval: the difference's interval is in ms, exact when
// every review of a phase took one time, NaNs without a baseline, and
// holds the point difference of spread phases.
func TestBlockDeltaInterval(t *testing.T) {
	t.Parallel()
	flat := func(n int, d time.Duration) [][]time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return singletons(out)
	}
	if lo, hi := blockDeltaInterval(flat(200, 8*time.Millisecond), flat(300, 11*time.Millisecond), 0.99, 0.9, 300, 1); lo != 3 || hi != 3 {
		t.Errorf("flat phases: [%v, %v], want [3, 3] ms", lo, hi)
	}
	if lo, hi := blockDeltaInterval(nil, flat(3, time.Millisecond), 0.99, 0.9, 300, 1); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("no baseline: [%v, %v], want NaNs", lo, hi)
	}
	base, xs := spread(500, 1), spread(500, 1.2)
	point := Percentile(slices.Clone(xs), 0.99) - Percentile(slices.Clone(base), 0.99)
	lo, hi := blockDeltaInterval(singletons(base), singletons(xs), 0.99, 0.9, 400, 7)
	if !(lo <= point && point <= hi) || !(lo < hi) {
		t.Errorf("point %v ms outside [%v, %v] or a zero-width interval", point, lo, hi)
	}
	// xs is base × 1.2 (p99s 495 and 594 ms): the difference is near
	// 99 ms, not a ratio near 1.2.
	if lo < 50 || hi > 150 {
		t.Errorf("delta interval [%v, %v] ms, want around 0.2 × 495 ms ≈ 99 ms ± its spread", lo, hi)
	}
}

// TestBlocksOf: reviews group by the 2 s stretch they were submitted in,
// counted from the earliest, in time order, as copies.
func TestBlocksOf(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	lats := ms(1, 2, 3, 4, 5)
	ats := []time.Time{t0.Add(4500 * time.Millisecond), t0, t0.Add(1999 * time.Millisecond), t0.Add(2 * time.Second), t0.Add(4 * time.Second)}
	got := blocksOf(lats, ats, 2*time.Second)
	want := [][]time.Duration{ms(2, 3), ms(4), ms(1, 5)}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("blocksOf = %v, want %v", got, want)
	}
	got[0][0] = 99
	if lats[1] != 2*time.Millisecond {
		t.Error("blocksOf shares its blocks with lats")
	}
	if blocksOf(nil, nil, time.Second) != nil {
		t.Error("no reviews: want no blocks")
	}
}

// TestBlockTrimmedQuantile: one stall episode (a few consecutive slow
// reviews in one block) sets a window's p99 but not the block-trimmed
// one, while a slowdown spread over every block still moves it.
func TestBlockTrimmedQuantile(t *testing.T) {
	t.Parallel()
	ms := func(n int, d float64) []time.Duration {
		b := make([]time.Duration, n)
		for i := range b {
			b[i] = time.Duration(d * float64(time.Millisecond))
		}
		return b
	}
	window := func(slow float64) [][]time.Duration {
		var bs [][]time.Duration
		for i := range 10 {
			b := ms(20, 6)
			b[i] = time.Duration(8 * float64(time.Millisecond)) // one a little slower in every block
			bs = append(bs, b)
		}
		if slow > 0 {
			copy(bs[4][5:9], ms(4, slow)) // the episode: four in a row
		}
		return bs
	}
	pooled := func(bs [][]time.Duration) []time.Duration {
		var all []time.Duration
		for _, b := range bs {
			all = append(all, b...)
		}
		return all
	}
	for _, tc := range []struct {
		name        string
		blocks      [][]time.Duration
		p99, trimmd float64
	}{
		{"quiet", window(0), 8, 8},
		{"one episode", window(45), 45, 8},
		{"slower everywhere", func() [][]time.Duration {
			bs := window(0)
			for _, b := range bs {
				b[(len(b)-1)/2] = 12 * time.Millisecond
				b[len(b)-1] = 12 * time.Millisecond
			}
			return bs
		}(), 12, 12},
	} {
		if got := Percentile(pooled(tc.blocks), 0.99); got != tc.p99 {
			t.Errorf("%s: p99 %v ms, want %v", tc.name, got, tc.p99)
		}
		if got := blockTrimmedQuantile(tc.blocks, 0.99, trimBlockShare); got != tc.trimmd {
			t.Errorf("%s: block-trimmed p99 %v ms, want %v", tc.name, got, tc.trimmd)
		}
	}
	if got := blockTrimmedQuantile(nil, 0.99, trimBlockShare); got != 0 {
		t.Errorf("no blocks: %v, want 0", got)
	}
	if got := blockTrimmedQuantile([][]time.Duration{ms(3, 5)}, 0.99, trimBlockShare); got != 5 {
		t.Errorf("one block is kept: %v, want 5", got)
	}
}

// TestOverMedian counts the reviews over twice the median, and leaves
// its input in submit order.
func TestOverMedian(t *testing.T) {
	t.Parallel()
	lats := []time.Duration{30, 6, 6, 13, 6, 12, 6, 7}
	for i := range lats {
		lats[i] *= time.Millisecond
	}
	in := slices.Clone(lats)
	if got := overMedian(lats, 2); got != 2 { // 30 and 13; 12 is exactly twice the median
		t.Errorf("over 2x median: %d, want 2", got)
	}
	if !slices.Equal(lats, in) {
		t.Errorf("overMedian reordered its input: %v", lats)
	}
	if got := overMedian(nil, 2); got != 0 {
		t.Errorf("none: %d, want 0", got)
	}
}
