// Package admission decides whether a limit key admits one more start. It
// holds ratelane's own idea of pacing: a GCRA token bucket per key that paces
// starts (not only concurrency), a concurrency cap on in-flight leases, a
// shared pause set from a 429, and an adaptive rate learned from 429s
// (multiplicative decrease) and successes (additive increase).
//
// Everything here is pure and time-explicit: every method takes now. The
// stores load a key's State inside their lease transaction, ask it, and write
// it back, so the decision is atomic with the lease on every driver.
package admission

import (
	"fmt"
	"math"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// Tuning of adaptive keys. They are package constants rather than settings
// because they shape convergence, which the benchmarks measure; change them
// there, not per key.
const (
	// DecreaseFactor multiplies the learned rate on a 429.
	DecreaseFactor = 0.7
	// DecreaseHoldoff is the minimum time between two decreases, so that a
	// burst of 429s from requests already in flight counts as one signal.
	DecreaseHoldoff = 500 * time.Millisecond
	// IncreasePerSecond is the additive increase, as a fraction of the
	// configured ceiling per second of successful traffic.
	IncreasePerSecond = 0.05
	// GrowthPerSecond is the multiplicative part of the increase, as a
	// fraction of the current rate per second; the larger of the two
	// applies.
	GrowthPerSecond = 0.2
	// MinRateFraction is the floor of the learned rate as a fraction of the
	// ceiling, when Config.MinRate is zero.
	MinRateFraction = 0.02
	// CapRetry is how soon a key at its concurrency cap is looked at again.
	CapRetry = 20 * time.Millisecond
	// DefaultHeadroom is the fraction of an upstream's declared rate that
	// [Upstream] leaves unused.
	DefaultHeadroom = 0.03
)

// Upstream returns the configuration of a key that paces calls to an
// upstream declaring rate requests per second with the given burst: the
// rate less headroom (a fraction, e.g. DefaultHeadroom) and half the burst,
// rounded up. Requests reach the upstream with network and scheduling
// jitter, and its bucket runs on its own clock, so starts spaced exactly at
// its rate can arrive closer together than it allows; each such arrival is
// a 429 that pauses the key for a whole Retry-After (often a second). The
// burst ratelane leaves unused stays in the upstream's bucket to absorb the
// jitter, and the rate headroom refills it. A zero rate means unpaced.
func Upstream(name string, rate, burst, headroom float64) Config {
	c := Config{Name: name}
	if rate > 0 {
		c.Rate = rate * (1 - headroom)
		c.Burst = math.Ceil(math.Max(1, burst) / 2)
	}
	return c
}

// Config is a limit key's configuration: what an operator sets.
type Config struct {
	// Name is the key, e.g. "openai:gpt-4o-mini" or "subscriber:store_17".
	Name string `json:"name"`
	// Rate is the sustained rate of starts, in cost units per second. Zero
	// means the key does not pace starts (only Concurrency applies).
	Rate float64 `json:"rate"`
	// Burst is how many cost units may start at once from a full bucket.
	// Zero means max(1, Rate) (one second's worth).
	Burst float64 `json:"burst"`
	// Concurrency caps the key's leases in flight. Zero means no cap.
	Concurrency int `json:"concurrency"`
	// Adaptive lets 429s lower the rate and successes raise it again, up to
	// Rate.
	Adaptive bool `json:"adaptive"`
	// MinRate is the floor of an adaptive key's learned rate. Zero means
	// MinRateFraction of Rate.
	MinRate float64 `json:"min_rate"`
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Burst == 0 {
		c.Burst = math.Max(1, c.Rate)
	}
	if c.Adaptive && c.MinRate == 0 {
		c.MinRate = c.Rate * MinRateFraction
	}
	return c
}

// Validate reports a configuration that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Name == "" || len(c.Name) > job.MaxNameLen:
		return fmt.Errorf("limit key name must be 1 to %d bytes", job.MaxNameLen)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate > 1e9:
		return fmt.Errorf("rate must be between 0 (unpaced) and 1e9 per second, got %v", c.Rate)
	case c.Burst < 0 || math.IsNaN(c.Burst) || c.Burst > 1e12:
		return fmt.Errorf("burst must be between 0 (default) and 1e12, got %v", c.Burst)
	case c.Concurrency < 0 || c.Concurrency > 1_000_000:
		return fmt.Errorf("concurrency must be between 0 (uncapped) and 1000000, got %d", c.Concurrency)
	case c.MinRate < 0 || c.MinRate > c.Rate:
		return fmt.Errorf("min_rate must be between 0 and rate (%v), got %v", c.Rate, c.MinRate)
	case c.Adaptive && c.Rate == 0:
		return fmt.Errorf("an adaptive key needs a rate ceiling greater than 0")
	}
	return nil
}

// State is a limit key's configuration plus its live, shared state. The zero
// times mean "never": a zero TAT is a full bucket, a zero PausedUntil is not
// paused.
type State struct {
	Config
	// LearnedRate is the rate in force for an adaptive key (<= Rate). For a
	// non-adaptive key it equals Rate.
	LearnedRate float64 `json:"learned_rate"`
	// TAT is the GCRA theoretical arrival time: the bucket is full when
	// TAT <= now, and each start of cost c moves it c/rate later.
	TAT time.Time `json:"-"`
	// PausedUntil is when a 429 pause ends. No job naming this key is leased
	// before it, by any node.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// InFlight counts the key's jobs currently leased.
	InFlight int `json:"in_flight"`
	// LastDecrease is when the learned rate was last decreased.
	LastDecrease time.Time `json:"-"`
}

// NewState returns the state of a freshly configured key: a full bucket,
// not paused, learned rate at the ceiling.
func NewState(c Config) State {
	c = c.WithDefaults()
	return State{Config: c, LearnedRate: c.Rate}
}

// Reconfigure applies a new configuration to a live key at now, keeping its
// pause, in-flight count and the tokens its bucket owes: a bucket that
// owes n units at the old rate owes n units at the new one, so raising a
// throttled key's rate takes effect at once instead of after the debt
// run up at the old, slower rate.
func (s *State) Reconfigure(c Config, now time.Time) {
	before := s.rate()
	owed := 0.0
	if before > 0 && s.TAT.After(now) {
		owed = s.TAT.Sub(now).Seconds() * before
	}
	c = c.WithDefaults()
	s.Config = c
	if !c.Adaptive || s.LearnedRate <= 0 || s.LearnedRate > c.Rate {
		s.LearnedRate = c.Rate
	}
	if after := s.rate(); owed > 0 && after > 0 && after != before {
		s.TAT = now.Add(time.Duration(owed / after * float64(time.Second)))
	}
}

func (s *State) rate() float64 {
	if s.Adaptive && s.LearnedRate > 0 {
		return s.LearnedRate
	}
	return s.Rate
}

// interval is the time one cost unit occupies in the bucket.
func (s *State) interval() time.Duration {
	return time.Duration(float64(time.Second) / s.rate())
}

// tolerance is how far TAT may run ahead of now: the burst.
func (s *State) tolerance() time.Duration {
	return time.Duration(s.Burst * float64(s.interval()))
}

// Check reports whether the key admits one start of the given cost at now.
// When it does not, next is the earliest time it might (for a concurrency
// cap, a short re-check interval, since a lease may end at any moment).
// Check does not change s; call Take after every key of the job admitted it.
func (s *State) Check(now time.Time, cost int64) (ok bool, next time.Time) {
	if now.Before(s.PausedUntil) {
		return false, s.PausedUntil
	}
	if s.Concurrency > 0 && s.InFlight >= s.Concurrency {
		return false, now.Add(CapRetry)
	}
	if s.rate() <= 0 {
		return true, now
	}
	tat := maxTime(s.TAT, now)
	if !tat.After(now) {
		return true, now // a full bucket admits even a cost above the burst
	}
	allowAt := tat.Add(time.Duration(cost) * s.interval()).Add(-s.tolerance())
	if allowAt.After(now) {
		return false, allowAt
	}
	return true, now
}

// Take records one start of the given cost at now: it spends tokens and
// counts a lease in flight.
func (s *State) Take(now time.Time, cost int64) {
	s.InFlight++
	if s.rate() <= 0 {
		return
	}
	s.TAT = maxTime(s.TAT, now).Add(time.Duration(cost) * s.interval())
}

// Release ends one lease in flight.
func (s *State) Release() {
	if s.InFlight > 0 {
		s.InFlight--
	}
}

// Reconcile corrects the bucket once the real cost of a start is known:
// usage above the estimate moves TAT later, usage below gives tokens back.
func (s *State) Reconcile(now time.Time, estimated, actual int64) {
	if actual <= 0 || actual == estimated || s.rate() <= 0 {
		return
	}
	s.TAT = s.TAT.Add(time.Duration(actual-estimated) * s.interval())
	if floor := now.Add(-s.tolerance()); s.TAT.Before(floor) {
		s.TAT = floor
	}
}

// Pause stops admissions until until, unless the key is already paused
// longer.
func (s *State) Pause(until time.Time) {
	if until.After(s.PausedUntil) {
		s.PausedUntil = until
	}
}

// RateLimited records a 429 at now: the key pauses until until and, when
// adaptive, its learned rate drops multiplicatively (at most once per
// DecreaseHoldoff).
func (s *State) RateLimited(now, until time.Time) {
	s.Pause(until)
	if s.decrease(now) {
		// Restart the bucket at the new rate when the pause ends.
		s.TAT = maxTime(s.TAT, until)
	}
}

// decrease lowers an adaptive key's learned rate, at most once per
// DecreaseHoldoff, and reports whether it did.
func (s *State) decrease(now time.Time) bool {
	if !s.Adaptive || now.Sub(s.LastDecrease) < DecreaseHoldoff {
		return false
	}
	s.LastDecrease = now
	s.LearnedRate = math.Max(s.MinRate, s.rate()*DecreaseFactor)
	return true
}

// Throttled records a 429 that named no retry delay; until is the job's
// own backoff. An adaptive key slows down rather than pausing: its learned
// rate drops (at most once per DecreaseHoldoff) and its bucket is emptied,
// because the upstream's is. Pausing it for one job's exponential backoff
// would idle the key far longer than the upstream asked — it asked for
// nothing — and cost seconds of its allowance on every 429. A key with a
// fixed rate has no other way to slow down, so it pauses until until.
func (s *State) Throttled(now, until time.Time) {
	if !s.Adaptive {
		s.RateLimited(now, until)
		return
	}
	s.decrease(now)
	if s.rate() > 0 {
		s.TAT = maxTime(s.TAT, now.Add(s.tolerance()))
	}
}

// Succeeded records a successful start: an adaptive key's learned rate
// grows by the larger of IncreasePerSecond of the ceiling and
// GrowthPerSecond of the current rate, per second of traffic.
func (s *State) Succeeded() {
	if !s.Adaptive || s.LearnedRate >= s.Rate {
		return
	}
	step := math.Max(s.Rate*IncreasePerSecond, s.rate()*GrowthPerSecond) / s.rate()
	s.LearnedRate = math.Min(s.Rate, s.LearnedRate+step)
}

// Hint applies what an upstream said about its remaining quota: with
// nothing remaining the key pauses until the reset; otherwise the bucket is
// emptied to the remaining quota, so that it slows down before a 429.
func (s *State) Hint(now time.Time, h job.Hint) {
	if h.Remaining < 0 {
		return
	}
	if h.Remaining == 0 && h.Reset > 0 {
		s.Pause(now.Add(h.Reset))
		return
	}
	if s.rate() <= 0 {
		return
	}
	// At most Remaining units may start before the reset.
	floor := now.Add(s.tolerance()).Add(-time.Duration(h.Remaining) * s.interval())
	if floor.After(s.TAT) {
		s.TAT = floor
	}
}

// Tokens returns the cost units the bucket could admit at now (the burst for
// an unpaced key).
func (s *State) Tokens(now time.Time) float64 {
	if s.rate() <= 0 {
		return s.Burst
	}
	free := s.tolerance() - maxTime(s.TAT, now).Sub(now)
	return math.Max(0, float64(free)/float64(s.interval()))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
