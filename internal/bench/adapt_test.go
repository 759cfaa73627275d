package bench

import (
	"testing"

	"github.com/ratelane/ratelane/internal/upstream"
)

// TestConvergeBand scores synthetic per-second timelines of a 15 s phase
// at 30/s against an upstream bucket of burst 10, as runAdapt's drop
// phase: a last window that takes the bucket's burst (the case session
// 21's runs read as 15 s) is converged; accepting more than the upstream
// could admit (limit x span + burst), a 429 share over 10%, or a slow
// approach from below are not.
func TestConvergeBand(t *testing.T) {
	t.Parallel()
	const (
		from, to = 100, 115
		limit    = 30.0
		burst    = 10
	)
	// timeline returns a phase that refuses 40 in the second of the change
	// (the window from it is out of the band) and accepts 30 each second
	// after it, with edit applied: converged in 1 s unless edit says
	// otherwise.
	timeline := func(edit func(map[int64]upstream.TimelineSecond)) map[int64]upstream.TimelineSecond {
		m := map[int64]upstream.TimelineSecond{}
		for u := int64(from); u < to; u++ {
			m[u] = upstream.TimelineSecond{Unix: u, Accepted: 30}
		}
		m[from] = upstream.TimelineSecond{Unix: from, Accepted: 70, RateLimited: 40} // the change
		m[from+1] = upstream.TimelineSecond{Unix: from + 1, Accepted: 28, RateLimited: 2}
		edit(m)
		return m
	}
	set := func(u int64, a, l int64) func(map[int64]upstream.TimelineSecond) {
		return func(m map[int64]upstream.TimelineSecond) {
			m[u] = upstream.TimelineSecond{Unix: u, Accepted: a, RateLimited: l}
		}
	}
	both := func(fs ...func(map[int64]upstream.TimelineSecond)) func(map[int64]upstream.TimelineSecond) {
		return func(m map[int64]upstream.TimelineSecond) {
			for _, f := range fs {
				f(m)
			}
		}
	}
	for _, c := range []struct {
		name string
		edit func(map[int64]upstream.TimelineSecond)
		want float64
	}{
		{"steady", func(map[int64]upstream.TimelineSecond) {}, 1},
		// Session 21's failing window: 67 accepted in the last 2 s
		// (33.5/s > 1.1 x 30), one 429: the bucket's burst, converged.
		{"last window takes the burst", both(set(to-2, 30, 0), set(to-1, 37, 1)), 1},
		// 60 + 10 is all the bucket can admit in 2 s.
		{"burst to the bound", both(set(to-2, 35, 0), set(to-1, 35, 0)), 1},
		// 71 in 2 s is more than the bucket admits: not the upstream's
		// timeline, so not converged (the phase length).
		{"beyond limit and burst", both(set(to-2, 36, 0), set(to-1, 35, 0)), 15},
		{"overshoot refused", both(set(to-2, 30, 4), set(to-1, 30, 4)), 15},
		// Climbing from 15/s: every window up to [107, 108] (47) is
		// under 0.8 x 30 x 2 = 48; from 108 on they are in the band.
		{"slow approach", both(set(101, 15, 0), set(102, 15, 0), set(103, 16, 0), set(104, 18, 0),
			set(105, 20, 0), set(106, 22, 0), set(107, 23, 0), set(108, 24, 0)), 8},
		{"never reaches the band", func(m map[int64]upstream.TimelineSecond) {
			for u := int64(from + 1); u < to; u++ {
				m[u] = upstream.TimelineSecond{Unix: u, Accepted: 20}
			}
		}, 15},
	} {
		if got := converge(timeline(c.edit), from, to, limit, burst); got != c.want {
			t.Errorf("%s: converge = %v s, want %v", c.name, got, c.want)
		}
	}
}
