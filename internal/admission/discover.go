package admission

import (
	"math"
	"time"
)

// Limit discovery. An adaptive key keeps, besides its shapes' logs, a log
// of its own recent starts and of the refusals it met over a discovery
// window D (its longest window, or DiscoveryWindow), and enforces a learned
// window of its learned rate's worth of starts per D besides its bucket. A
// refusal (a 429, or a 503 with Retry-After) is evidence of the upstream's
// real allowance: just before refusing, it accepted the starts of the
// trailing window less the ones it refused. The learned rate moves to just
// under that at once (see refused) instead of a blind multiplicative cut,
// bounded per signal so that one noisy window cannot collapse it.
//
// The key probes upward only after a clean window (no refusal for D), by
// the larger of IncreasePerSecond of the ceiling and GrowthPerSecond of the
// current rate per second of successes, faster the longer it stays clean
// (up to MaxProbeSpeedup x), so that a limit that rose again is found
// within seconds; the learned rate that last went a clean window is
// remembered, and a refusal while probing above it falls back to it (or to
// what the upstream accepted, if more).
const (
	// DiscoveryWindow is the discovery window of a key with no window
	// shape.
	DiscoveryWindow = time.Second
	// DiscoveryMargin is how far under the estimated allowance the learned
	// rate is set, as a fraction.
	DiscoveryMargin = 0.03
	// MaxCutPerSignal is the lowest fraction of its rate one refusal
	// signal may cut a key to.
	MaxCutPerSignal = 0.5
	// SentShare is the share of its learned rate's worth of starts a key
	// must have made in the trailing window for the window to estimate the
	// upstream's allowance: a key that sent less learned nothing of what
	// the upstream would have taken.
	SentShare = 0.8
	// CutHoldoff is how long after a cut further refusals count as the
	// same signal (requests that were already in flight).
	CutHoldoff = 500 * time.Millisecond
	// NoiseShare is the share of a window's starts that may be refused
	// before a refusal (not within a window of the last) teaches the key
	// anything.
	NoiseShare = 0.02
	// MaxProbeSpeedup bounds how much faster than GrowthPerSecond a key
	// that has gone several clean windows probes.
	MaxProbeSpeedup = 3
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
// the key's starts there less its refusals. The learned rate moves toward
// it at once, but by at least DiscoveryMargin (a refusal at the rate the
// upstream had been accepting means its limit changed silently) and at
// most to MaxCutPerSignal of the rate per signal: refusals within
// CutHoldoff of the last cut are requests already in flight then, or the
// echo of one event, and count once. A stray refusal among many
// acceptances (under NoiseShare of the window's starts) is jitter and
// teaches nothing. A trailing window the key sent in for less than three
// quarters of (it just started, or was paused) is no estimate: a key that
// started half a window ago accepted half a window's worth.
func (s *State) refused(now time.Time, cost int64) bool {
	if !s.Adaptive || s.Rate <= 0 {
		return false
	}
	s.ensureLogs()
	d := s.discoveryWindow()
	t, dn := now.UnixNano(), int64(d)
	starts, refusals := &s.logs[len(s.Windows)], &s.logs[len(s.Windows)+1]
	refusals.add(t, cost, t-dn, dn/LogSlots)
	inStarts, inRefusals := starts.since(t-dn), refusals.since(t-dn)
	recent := !s.LastRefusal.IsZero() && now.Sub(s.LastRefusal) < d
	if !recent && float64(inRefusals) <= NoiseShare*float64(inStarts) {
		return true // noise: counted, not learned from
	}
	current := s.rate()
	est, valid := math.Max(0, float64(inStarts-inRefusals))/d.Seconds()*(1-DiscoveryMargin), true
	if first, ok := starts.first(t - dn); !ok || t-first < dn*3/4 {
		est, valid = current, false
	} else if float64(inStarts) < current*d.Seconds()*SentShare {
		// The key sent slower than its learned rate: what it sent says
		// nothing of what the upstream would have taken.
		est, valid = current, false
	}
	if !s.LastRefusal.IsZero() && now.Sub(s.LastRefusal) < CutHoldoff && !now.Before(s.LastRefusal) {
		// The same signal: no further trim, but a window that says the
		// upstream accepted less than the key's rate still lowers it.
		if valid && est < current {
			s.LearnedRate = math.Max(s.MinRate, math.Max(est, current*MaxCutPerSignal))
		}
		return true
	}
	if !recent && s.good > 0 && current > s.good {
		// A probe above the last good rate failed: back to that rate, or
		// to what the upstream accepted over the window if that is more.
		current = math.Min(current, math.Max(s.good, est/(1-DiscoveryMargin)))
	}
	learned := math.Min(current*(1-DiscoveryMargin), est)
	learned = math.Max(learned, current*MaxCutPerSignal)
	s.LearnedRate = math.Min(s.Rate, math.Max(s.MinRate, learned))
	s.LastRefusal = now
	s.probe, s.probeAt = 0, 0
	return true
}

// Succeeded records a successful start at now. An adaptive key that has
// gone a whole discovery window without a refusal remembers its learned
// rate as good and probes upward: by the larger of IncreasePerSecond of
// the ceiling and GrowthPerSecond of the current rate, per second of
// traffic, up to the ceiling.
func (s *State) Succeeded(now time.Time) {
	if !s.Adaptive {
		return
	}
	if s.LearnedRate >= s.Rate || s.rate() <= 0 {
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
	// The longer the key has gone clean, the faster it probes (up to
	// MaxProbeSpeedup x), so a limit that rose far is found in seconds
	// while a probe just after a refusal stays gentle.
	speed := float64(MaxProbeSpeedup)
	if !s.LastRefusal.IsZero() {
		speed = min(speed, max(1, now.Sub(s.LastRefusal).Seconds()/s.discoveryWindow().Seconds()))
	}
	step := math.Max(s.Rate*IncreasePerSecond, s.rate()*GrowthPerSecond*speed) / s.rate()
	s.LearnedRate = math.Min(s.Rate, s.LearnedRate+step)
}
