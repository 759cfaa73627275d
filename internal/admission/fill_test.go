package admission

import (
	"testing"
	"time"
)

// TestFillAfterSilentPause checks the window after a silent drop's pause
// (fill.go): a key told 30/s (a sliding window of 30 and its ceiling)
// whose upstream, fixed windows of 30, falls to 15 and refuses with a
// retry a whole second after the refusal, starts its learned window's
// worth (15) at the pause's end instead of pacing it out from an empty
// bucket, and never more than that in any second after; a pause shorter
// than the window leaves the bucket empty, as before.
func TestFillAfterSilentPause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		pause time.Duration
		want  func(n int) bool
	}{
		{"whole-second pause", time.Second, func(n int) bool { return n >= 14 }},
		{"shorter pause", 500 * time.Millisecond, func(n int) bool { return n <= 2 }},
	} {
		s := NewState(AdaptiveUpstreamWindow("k", 30, time.Second, 30, DefaultHeadroom))
		drop := t0.Add(4*time.Second + 300*time.Millisecond)
		up := &fixedModel{limit: func(now time.Time) int {
			if now.Before(drop) {
				return 30
			}
			return 15
		}}
		var starts []time.Time
		var until time.Time
		for now := t0; now.Before(t0.Add(8 * time.Second)); now = now.Add(time.Millisecond) {
			for { // every start the key admits at now, answered at once
				if ok, _ := s.Check(now, 1); !ok {
					break
				}
				s.Take(now, 1)
				starts = append(starts, now)
				ok, _ := up.answer(now)
				s.End(now, 1)
				if ok {
					s.Succeeded(now)
					continue
				}
				if !until.IsZero() {
					t.Fatalf("%s: a second refusal at %v", tc.name, now.Sub(t0))
				}
				until = now.Add(tc.pause)
				s.RateLimited(now, until, 1)
			}
		}
		if until.IsZero() || s.LearnedRate >= 29 {
			t.Fatalf("%s: no silent drop learned (learned %v)", tc.name, s.LearnedRate)
		}
		if n := countIn(starts, until, until.Add(10*time.Millisecond)); !tc.want(n) {
			t.Errorf("%s: %d starts in the 10 ms after the pause", tc.name, n)
		}
		for i := range starts {
			if starts[i].Before(until) {
				continue
			}
			if n := countIn(starts, starts[i], starts[i].Add(time.Second)); n > 15 {
				t.Fatalf("%s: %d starts in the second from %v, learned window 15", tc.name, n, starts[i].Sub(t0))
			}
		}
	}
}
