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
// unit under its tightest sliding window's limit per period (and a little
// more: StrictJitter), which every reading of "limit per period" admits.
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
// limit − 1 per period and StrictJitter, and never above its configured
// rate.
func (s *State) strictRate() float64 {
	w, ok := s.strictWindow()
	if !ok {
		return s.Rate
	}
	r := strictUnits(w) / (w.Period + StrictJitter).Seconds()
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

// StrictCatchUp is how late, in units of its spacing, a strict key's start
// may come after the instant its bucket admitted it and still be paced from
// that instant rather than from its own time. With a burst of one a bucket
// paces from the later of the two, so every late start (a fetch loop that
// woke a few milliseconds after the key's instant, a lease behind another)
// moved every later start by as much: on the real clock counter-20 paced
// at 17.8–18.1 of its strict 19/s, its steady gaps 55–56 ms against 52.6
// (docs/benchmarks.md, "Session 21 (s21h1)"). Paced from its instant, a
// late start's successor keeps the even grid, so it follows at no less
// than half a spacing; no start comes before its grid point, so the key
// still starts at most limit − 1 per period plus the one a burst of one
// allows, and its windows bound it as declared whatever the bucket does.
// A start later than that (a stall, the first after a pause or an idle
// spell) starts a new grid from itself, as before.
const StrictCatchUp = 0.5

// StrictJitter is the spread of a strict key's starts that its rate
// leaves room for: it paces limit − 1 units per period plus StrictJitter,
// not per period. Against a two-window counter an even stream at exactly
// limit − 1 per period has no margin (its estimate reaches the limit at
// every start of a phase the pause's end decides), so a start that reaches
// the upstream a few milliseconds early against the others is refused and
// costs a whole Retry-After; on the real clock, once late starts no longer
// slowed the key (StrictCatchUp), 2 of 6 runs met that second refusal. The
// measured spread of counter-20's arrivals around its grid was p50 0.7 ms,
// p90 11 ms, p99 22 ms; 10 ms costs a 20/s key 0.2 of a start per second
// (18.8/s, not 19) and none of the pairs measured met a second refusal
// (docs/benchmarks.md, "Session 21 (s21h1)"). For periods of minutes it
// is nothing.
const StrictJitter = 10 * time.Millisecond

// paceFrom is the instant a start at now is paced from: the bucket's TAT
// when that is later, now otherwise, except that a strict key keeps its
// grid for a start at most StrictCatchUp of a spacing late (see there).
func (s *State) paceFrom(now time.Time) time.Time {
	if !now.After(s.TAT) {
		return s.TAT
	}
	if s.strict() && s.burst() <= 1 && now.Sub(s.TAT) <= dur(StrictCatchUp*s.unitNS()) {
		return s.TAT
	}
	return now
}

// strictStep is the bucket's step for a start of ns nanoseconds' worth of
// its rate: truncated to the nanosecond, except for a strict key, whose
// step rounds up, so that a grid kept by paceFrom never fits limit − 1
// steps into less than its period (1e9/19 truncated, 19 of them are 18 ns
// short of a second).
func (s *State) strictStep(ns float64) time.Duration {
	if s.strict() {
		ns = math.Ceil(ns)
	}
	return dur(ns)
}

// strictExpire ends strictness that ran out by now.
func (s *State) strictExpire(now time.Time) {
	if s.strictUntil != 0 && now.UnixNano() >= s.strictUntil {
		s.strictUntil = 0
	}
}
