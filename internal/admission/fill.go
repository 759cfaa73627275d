package admission

import (
	"math"
	"time"
)

// The window after a silent drop's pause. A refusal that reads as a silent
// drop (see refused) on a key the upstream then paused for at least its
// discovery window D is the one moment the key knows that no window upstream
// still counts any of its accepted starts: every start the upstream took
// arrived before it refused, and the pause outlasts a window from there.
// Pacing evenly from the pause's end at the new learned rate, as the key
// otherwise does (its bucket restarts empty), spreads what any window there
// allows over a whole window. Against the issue mix's halving-503 (fixed,
// clock-aligned windows of 30 that fall silently to 15, 503 + a whole
// second of Retry-After) the pause ends half-way into an aligned window,
// and even pacing sent 7 of that window's 15 before it rolled over: a
// loss of about half a second on the destination that set the mix's
// makespan (docs/benchmarks.md, session 21, s21h6). So the key gets its
// learned window's worth as credit (see credit.go) for the start of the
// pause's end: starts on credit pass its bucket and learned window, never
// its windows, pause or concurrency cap, and the pacing resumes from the
// last of them.
//
// Only where a window of the key bounds such a burst: a sliding window of
// period D of its own (every subscriber key has one), which, scaled to the
// learned rate, counts each start until its answer and so never lets the
// upstream see more than the learned allowance in any window. Not on a key
// whose upstream announced its policy (announced keys have credit of their
// own: the upstream's remaining). Not after a shorter pause, after which a
// sliding upstream may still count the starts it took before refusing. The
// burst an upstream token bucket with a burst under the learned allowance
// would refuse: such an upstream, refusing silently with a Retry-After, is
// not told apart from a window here (no mix has one; adapt's bucket names
// no delay and goes through Throttled).

// fillAfterPause gives an adaptive key paused at now until until, after a
// refusal read as a silent drop, its learned window's worth of credit
// when a sliding window of its own bounds it (see above).
func (s *State) fillAfterPause(now, until time.Time) {
	d := s.discoveryWindow()
	if !s.Adaptive || s.Rate <= 0 || until.Sub(now) < d || s.shown > 0 || s.announcedAt != 0 || !s.slidingOver(d) {
		return
	}
	s.credit = math.Floor(s.learnedWindowLimit(d) + 1e-9)
}

// slidingOver reports whether the key has a sliding window of period d.
func (s *State) slidingOver(d time.Duration) bool {
	for _, w := range s.Windows {
		if !w.Fixed && w.Period == d {
			return true
		}
	}
	return false
}
