package admission

import (
	"testing"
	"time"
)

// TestLearnedWindowKeepsFractionalRate: an adaptive key declared at 10/s
// with a sliding window that learned 2.91/s (an upstream announcing 3 per
// second, less AnnouncedMargin) starts at its learned rate over four
// seconds, not at floor(2.91) = 2 a second, which a learned window of its
// rate's worth alone admits; its own window, scaled to the learned rate,
// still holds it to 3 starts in any second.
func TestLearnedWindowKeepsFractionalRate(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := NewState(AdaptiveUpstreamWindow("k", 10, time.Second, 0, DefaultHeadroom))
	s.LearnedRate = 3 * (1 - AnnouncedMargin)
	const latency = 20 * time.Millisecond
	var starts []time.Time
	var ends []time.Time
	for now := t0; now.Before(t0.Add(5 * time.Second)); now = now.Add(time.Millisecond) {
		for len(ends) > 0 && !ends[0].After(now) {
			s.End(ends[0], 1)
			ends = ends[1:]
		}
		if ok, _ := s.Check(now, 1); ok {
			s.Take(now, 1)
			starts = append(starts, now)
			ends = append(ends, now.Add(latency))
		}
	}
	var steady int
	for _, at := range starts {
		if !at.Before(t0.Add(time.Second)) {
			steady++
		}
	}
	// 2.91/s over the last four seconds is 11.6; floor(2.91) a second is 8.
	if steady < 11 {
		t.Errorf("%d starts in the last 4 s at a learned 2.91/s, want at least 11", steady)
	}
	for i := range starts {
		n := 0
		for _, at := range starts[i:] {
			if at.Sub(starts[i]) < time.Second {
				n++
			}
		}
		if n > 3 {
			t.Fatalf("%d starts within a second from %v, want at most 3 (the window scaled to 2.91/s)", n, starts[i].Sub(t0))
		}
	}
}
