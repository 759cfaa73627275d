package admission

import (
	"math"
	"time"
)

// Limit discovery. An adaptive key keeps, besides its shapes' logs, a log
// of its own recent starts and of the refusals it met over a discovery
// window D (its longest window, or DiscoveryWindow). A refusal (a 429, or
// a 503 with Retry-After) is evidence of the upstream's real allowance:
// just before refusing, it accepted the starts of the trailing window less
// the ones it refused. The learned rate is set just under that at once
// (DiscoveryMargin), instead of a blind multiplicative cut that undershoots
// and oscillates. Refusals that come back together (requests already in
// flight) each lower the count of accepted starts by their cost, which is
// what they are evidence of; one run of refusals never cuts below
// MaxCutPerRun of the rate it began at, because a window that straddles a
// silent change of the upstream's limit holds starts it accepted under the
// old limit and refusals of the new one, and counting it would undershoot.
// The next run, a window later, sees only the new limit. See refused for
// a change the window cannot explain.
//
// The key probes upward only after a clean window (no refusal for D), by
// the larger of IncreasePerSecond of the ceiling and GrowthPerSecond of the
// current rate per second of successes, so that a limit that rose again is
// found within seconds; the learned rate that last went a clean window is
// remembered, and a refusal while probing above it falls back to it.
const (
	// DiscoveryWindow is the discovery window of a key with no window
	// shape.
	DiscoveryWindow = time.Second
	// DiscoveryMargin is how far under the estimated allowance the learned
	// rate is set, as a fraction.
	DiscoveryMargin = 0.03
	// MaxCutPerRun is the lowest fraction of its rate one run of refusals
	// may cut a key to.
	MaxCutPerRun = 0.5
	// MinMeasure is the least time since the last cut over which the
	// accepted rate is measured (unless three starts were made since).
	MinMeasure = 20 * time.Millisecond
)

// discoveryWindow is D: the key's longest window, or DiscoveryWindow.
func (s *State) discoveryWindow() time.Duration {
	d := DiscoveryWindow
	for _, w := range s.Windows {
		d = max(d, w.Period)
	}
	return d
}

// RateLimited records a refusal at now that named a retry delay (a 429, or
// a 503 with Retry-After): the key pauses until until, the upstream's own
// word, to the nanosecond it gave, and an adaptive key learns its limit
// from the refusal (see refused); its bucket restarts empty at the end of
// the pause rather than sending a burst into a window that just refused.
func (s *State) RateLimited(now, until time.Time, cost int64) {
	s.Pause(until)
	if s.refused(now, cost) && s.rate() > 0 {
		s.TAT = maxTime(s.TAT, addSat(until, s.tolerance()))
	}
}

// Throttled records a refusal that named no retry delay; until is the
// job's own backoff. An adaptive key needs no pause: its new learned limit
// paces it, and its bucket is emptied, because the upstream's is. Pausing
// it for one job's exponential backoff would idle the key far longer than
// the upstream asked — it asked for nothing — and cost seconds of its
// allowance on every 429. A key with a fixed limit has no other way to
// slow down, so it pauses until until.
func (s *State) Throttled(now, until time.Time, cost int64) {
	if !s.Adaptive {
		s.Pause(until)
		return
	}
	s.refused(now, cost)
	if s.rate() > 0 {
		s.TAT = maxTime(s.TAT, addSat(now, s.tolerance()))
	}
}

// refused learns an adaptive key's limit from one refusal of cost units at
// now and reports whether the key is adaptive.
//
// The estimate is the cost the upstream accepted in the trailing window:
// the key's starts there less its refusals. A refusal it explains (the key
// sent more than the estimate: it overshot) sets the learned rate just
// under it. A refusal it does not explain (the key was sending no faster
// than the upstream had been accepting) means the upstream's limit changed
// silently: it trims the rate by DiscoveryMargin. The next refusal of the
// run measures directly: the starts made since the last cut that the
// upstream accepted, over the time since (at least MinMeasure). That is
// the upstream's allowance now, whatever the trailing window, which still
// holds starts accepted under the old limit, says. The key's
// learned window (see Check) then holds new starts until the window has
// drained below the new limit, so the upstream's window drains too instead
// of refusing every start meanwhile.
func (s *State) refused(now time.Time, cost int64) bool {
	if !s.Adaptive || s.Rate <= 0 {
		return false
	}
	s.ensureLogs()
	d := s.discoveryWindow()
	t, dn := now.UnixNano(), int64(d)
	starts, refusals := &s.logs[len(s.Windows)], &s.logs[len(s.Windows)+1]
	refusals.add(t, cost, t-dn, dn/LogSlots)
	current := s.rate()
	sameRun := !s.LastRefusal.IsZero() && now.Sub(s.LastRefusal) < d
	if !sameRun && !s.LastRefusal.IsZero() && s.good > 0 && current > s.good {
		// A probe above the last good rate failed: go back to it.
		current = s.good
	}
	if s.episodeAt == 0 || t-s.episodeAt >= dn || t < s.episodeAt {
		s.episode, s.episodeAt = current, t // a new run of refusals
	}
	s.probe, s.probeAt = 0, 0
	accepted := float64(starts.since(t-dn) - refusals.since(t-dn))
	est := math.Max(0, accepted) / d.Seconds() * (1 - DiscoveryMargin)
	learned := math.Min(current, est)
	if est >= current*(1-2*DiscoveryMargin) {
		// Refused at the rate it had been accepting: trim, and let the
		// next refusal of the run measure.
		learned = current * (1 - DiscoveryMargin)
	}
	if sameRun {
		// Direct evidence: what the upstream accepted of the starts made
		// since the last cut, over the time since. Refusals beyond the
		// leases now in flight are of starts made after the cut.
		since := s.LastRefusal.UnixNano()
		span := now.Sub(s.LastRefusal)
		made := starts.since(since)
		if span >= MinMeasure || made >= 3 {
			ok := made - max(0, refusals.since(since)-int64(s.InFlight))
			r := math.Max(0, float64(ok)) / math.Max(span.Seconds(), 1e-3) * (1 - DiscoveryMargin)
			learned = math.Min(learned, r)
		}
	}
	learned = math.Max(learned, s.episode*MaxCutPerRun)
	s.LearnedRate = math.Min(s.Rate, math.Max(s.MinRate, learned))
	s.LastRefusal = now
	return true
}

// Succeeded records a successful start at now. An adaptive key that has
// gone a whole discovery window without a refusal remembers its learned
// rate as good and probes upward: by the larger of IncreasePerSecond of
// the ceiling and GrowthPerSecond of the current rate, per second of
// traffic, up to the ceiling.
func (s *State) Succeeded(now time.Time) {
	if !s.Adaptive || s.LearnedRate >= s.Rate || s.rate() <= 0 {
		return
	}
	if !s.LastRefusal.IsZero() && now.Sub(s.LastRefusal) < s.discoveryWindow() {
		return
	}
	// The rate probed a window ago survived a whole window: it is good.
	if at := time.Unix(0, s.probeAt); s.probeAt == 0 || now.Sub(at) >= s.discoveryWindow() {
		if s.probeAt != 0 {
			s.good = s.probe
		}
		s.probe, s.probeAt = s.LearnedRate, now.UnixNano()
	}
	step := math.Max(s.Rate*IncreasePerSecond, s.rate()*GrowthPerSecond) / s.rate()
	s.LearnedRate = math.Min(s.Rate, s.LearnedRate+step)
}
