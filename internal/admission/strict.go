package admission

import (
	"math"
	"time"
)

// Strict counting (non-adaptive keys). A key that keeps a declared sliding
// window never sends more than the window's limit in any period, so an
// upstream that counts the way it declared (a sliding log) never refuses
// it, apart from arrivals bunched by the network. A refusal therefore says
// that the upstream counts more strictly than the declaration reads: the
// two-window sliding counter of edge proxies (Cloudflare's, most Redis
// recipes), which weighs the previous aligned window as if its requests
// had been spread evenly, refuses a burst that opens a window after a full
// one, and admits an even stream only up to limit − 1 per window. A key
// with a fixed limit cannot learn a lower one (that is what Adaptive is
// for), but it can stop doing what such an upstream refuses, within what
// it declared: after a refusal it paces evenly (a burst of one) at one
// unit under its tightest sliding window's limit per period, which every
// reading of "limit per period" admits.
//
// Strictness costs one unit per window of the key's allowance; the
// refusal cost a pause, the Retry-After (or, with none, the job's
// backoff) times the window's limit per period. So the key stays strict
// for Limit pauses after the pause ends, the time strictness takes to cost
// what the refusal did (the ski-rental break-even), and each further
// refusal extends it: an upstream that keeps refusing keeps the key
// strict, a stray refusal (arrivals bunched by a loaded sender) costs at
// most one more refusal's worth of allowance. Strictness only ever
// tightens the declared shape, so invariant 6 holds; the learned rate of
// an adaptive key already reads such refusals (see refused).

// strictWindow returns the key's sliding window that strict pacing reads:
// the one with the lowest rate of limit − 1 units per period (at least one
// unit), and whether the key has a sliding window at all.
func (s *State) strictWindow() (Window, bool) {
	var best Window
	found := false
	for _, w := range s.Windows {
		if w.Fixed || w.Period <= 0 {
			continue
		}
		if !found || strictUnits(w)/w.Period.Seconds() < strictUnits(best)/best.Period.Seconds() {
			best, found = w, true
		}
	}
	return best, found
}

// strictUnits is what a strict key starts per period of w: one unit under
// its limit, at least one.
func strictUnits(w Window) float64 { return math.Max(1, w.Limit-1) }

// strict reports whether a fixed key paces strictly (see above). Check
// reads it until the next lease (Take) or success after it ran out clears
// it, which errs on the strict side by at most that one start.
func (s *State) strict() bool { return !s.Adaptive && s.strictUntil != 0 }

// strictRate is a strict key's bucket rate: its tightest sliding window's
// limit − 1 per period, and never above its configured rate.
func (s *State) strictRate() float64 {
	w, ok := s.strictWindow()
	if !ok {
		return s.Rate
	}
	r := strictUnits(w) / w.Period.Seconds()
	if s.Rate > 0 {
		r = math.Min(r, s.Rate)
	}
	return r
}

// strictRefusal makes a fixed key with a sliding window strict after a
// refusal at now that paused it until until (see above).
func (s *State) strictRefusal(now, until time.Time) {
	if s.Adaptive {
		return
	}
	w, ok := s.strictWindow()
	if !ok {
		return
	}
	pause := max(until.Sub(now), w.Period)
	end := addSat(maxTime(until, now), dur(float64(pause)*w.Limit)).UnixNano()
	s.strictUntil = max(s.strictUntil, end)
}

// StrictUntil reports whether the key counts strictly at now (a fixed key
// with a sliding window that an upstream refused: see strict.go) and
// until when. It is what operators see in GET /v1/limits: a key pacing
// one under its declared limit with no burst looks like a slow key unless
// it says why, and for how long.
func (s *State) StrictUntil(now time.Time) (time.Time, bool) {
	if !s.strict() || now.UnixNano() >= s.strictUntil {
		return time.Time{}, false
	}
	return time.Unix(0, s.strictUntil).UTC(), true
}

// strictExpire ends strictness that ran out by now.
func (s *State) strictExpire(now time.Time) {
	if s.strictUntil != 0 && now.UnixNano() >= s.strictUntil {
		s.strictUntil = 0
	}
}
