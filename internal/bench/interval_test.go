package bench

import (
	"math"
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
