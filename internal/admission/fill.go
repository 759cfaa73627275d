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
// makespan (docs/benchmarks.md, session 21, s21h6). So the key may start
// its learned window's worth from the pause's end, as credit (see
// credit.go): starts on credit pass its bucket and learned window, never
// its windows, pause or concurrency cap, and the pacing resumes from the
// last of them.
//
// The credit is released as the upstream takes it, the way TCP's slow
// start opens its window: FillGrowth at the pause's end, and FillGrowth
// more for each answer accepted within a window of it, until the learned
// window's worth has started. Against a window upstream that is the whole
// allowance within a few round trips (four, for 15: 2, 4, 8, 1); against an
// upstream token bucket whose burst is under the learned allowance (which,
// refusing silently with a whole-second Retry-After, the key cannot tell
// from a window at the refusal) the first bunch the bucket cannot hold is
// refused after a few starts instead of the whole allowance at once.
//
// Only where a window of the key bounds such a burst: a sliding window of
// period D of its own (every subscriber key has one), which, scaled to the
// learned rate, counts each start until its answer and so never lets the
// upstream see more than the learned allowance in any window. Not on a key
// whose upstream announced its policy (announced keys have credit of their
// own: the upstream's remaining). Not after a shorter pause, after which a
// sliding upstream may still count the starts it took before refusing.

// After a fill the upstream accepted in full. A fill is a learned
// window's worth started within a window, in bunches; an upstream whose
// allowance is not a window's worth at once (a token bucket with a smaller
// burst, the one twin a silent drop's refusal cannot tell apart) refuses
// some of it, and any refusal ends the fill. A fill that went in whole is
// the evidence the refusal could not give: the upstream takes the learned
// window's worth at once. The key then need not pace evenly at its learned
// rate, which spreads the next window's worth over the whole window: against
// halving-503's clock-aligned windows the key's sliding window (counting the
// fill's starts until their answers) held its next start ~1.04 s after the
// fill, and even pacing from there put 8 of the next aligned window's 15 in
// before it rolled over (docs/benchmarks.md, session 22, s22h1). So, until
// its next refusal or pause, or until its learned rate moves (a probe above
// what the upstream was shown to take at once, or a cut), the key starts
// past its bucket and learned window, as on credit, and only its own
// windows, pause and concurrency cap hold it: its sliding window of period
// D, scaled to the learned rate, frees each slot a window after that
// start's answer, so it sends each window's worth in the bunches the
// upstream took the fill in, a window and a round trip later. That never
// puts more than the learned allowance in any window upstream, sliding or
// fixed, and a bucket that took the fill's bunches whole refills them in
// the window and round trip the key waits.

// fillGreedy is the bit of capFlags that says the upstream accepted a fill
// in full, and the key starts whatever its windows admit (see above and
// greedy). It travels through the store beside fillGrowing.
const fillGreedy = 1 << 34

// greedy reports whether the key starts past its bucket and learned window
// after a fill the upstream accepted in full (see fillGreedy): only while
// it holds the learned rate its last cut set (the level the fill was
// made at; a probe above it is a rate the upstream has not shown it takes
// at once) and no upstream announced its policy (announced keys have
// credit of their own).
func (s *State) greedy() bool {
	return s.capFlags&fillGreedy != 0 && s.Adaptive && s.LearnedRate == s.level && s.LearnedRate < s.Rate &&
		s.announcedAt == 0 && s.shown == 0
}

// endFill ends a fill and the greedy starts after one: a refusal, a pause or
// a learned rate that moved says the upstream's allowance is no longer what
// the fill showed.
func (s *State) endFill() { s.capFlags &^= fillGrowing | fillGreedy }

// FillGrowth is the credit a key gets at the end of a silent drop's pause,
// and again for each answer accepted while it fills the window after (see
// fillAfterPause).
const FillGrowth = 2

// fillGrowing is the bit of capFlags that says the key is filling the
// window after a silent drop's pause (see growFill). Like raisedCut it
// sits far above the cap's bits, so that it travels through the store
// without a new slot of MarshalShapes.
const fillGrowing = 1 << 33

// fillAfterPause gives an adaptive key paused at now until until, after a
// refusal read as a silent drop, FillGrowth of credit and starts its fill
// of the learned window's worth when a sliding window of its own bounds it
// (see above).
func (s *State) fillAfterPause(now, until time.Time) {
	d := s.discoveryWindow()
	if !s.Adaptive || s.Rate <= 0 || until.Sub(now) < d || s.shown > 0 || s.announcedAt != 0 || !s.slidingOver(d) {
		return
	}
	allowance := math.Floor(s.learnedWindowLimit(d) + 1e-9)
	s.credit = math.Min(allowance, FillGrowth)
	if allowance > s.credit {
		s.capFlags |= fillGrowing
	}
}

// growFill adds FillGrowth of credit for an answer accepted at now while
// the key fills the window after a silent drop's pause, never past the
// learned window's worth less what the key started since the pause, and
// ends the fill when that is reached or a window has passed since the
// pause ended. Answers before the pause's end are of starts sent before
// the refusal, and grow nothing.
func (s *State) growFill(now time.Time) {
	if s.capFlags&fillGrowing == 0 || now.Before(s.PausedUntil) || len(s.logs) != s.nLogs() {
		return
	}
	d := s.discoveryWindow()
	starts, _ := s.discoveryLogs()
	left := math.Floor(s.learnedWindowLimit(d)+1e-9) - float64(starts.since(s.PausedUntil.UnixNano()-1)) - s.credit
	if now.Sub(s.PausedUntil) >= d || left <= 0 {
		s.capFlags &^= fillGrowing
		if left <= 0 && now.Sub(s.PausedUntil) < d {
			// The learned window's worth given within a window and
			// nothing of it refused so far: greedy from here. A
			// refusal of the rest ends it, and the key's sliding
			// window holds every start past the fill until the
			// fill's answers are a window old (see fillGreedy).
			s.capFlags |= fillGreedy
		}
		return
	}
	s.credit += math.Min(FillGrowth, left)
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
