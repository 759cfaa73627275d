// Package admission decides whether a limit key admits one more start. It
// holds ratelane's own idea of pacing. A key has one or more shapes, all of
// which must admit a start: a GCRA token bucket (rate, burst), sliding
// windows (at most N cost units start in any window of length W, counted
// from a start log) and fixed windows (at most N in each window of length
// W aligned to the Unix epoch, counted per window). It also has a concurrency cap on leases in flight
// (configured, or learned by an adaptive key: see concurrency.go), a
// shared pause set from a 429 (or 503 + Retry-After), and, when adaptive, a
// learned limit discovered from what the upstream accepted just before it
// refused (see discover.go), instead of a blind multiplicative cut.
//
// Everything here is pure and time-explicit: every method takes now. The
// stores load a key's State inside their lease transaction, ask it, and write
// it back, so the decision is atomic with the lease on every driver. All
// arithmetic saturates: no cost, rate or time makes a duration wrap.
package admission

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// Tuning of adaptive keys. They are package constants rather than settings
// because they shape convergence, which the benchmarks measure; change them
// there, not per key.
const (
	// IncreasePerSecond is the additive part of an adaptive key's probe
	// upward, as a fraction of the configured ceiling per second of
	// successful traffic after a clean discovery window.
	IncreasePerSecond = 0.05
	// GrowthPerSecond is the multiplicative part of the probe, as a
	// fraction of the current rate per second; the larger of the two
	// applies.
	GrowthPerSecond = 0.5
	// AdaptiveBurst bounds the burst of an adaptive key, as the time its
	// learned rate takes to earn it (see State.burst).
	AdaptiveBurst = 100 * time.Millisecond
	// MinRateFraction is the floor of the learned rate as a fraction of the
	// ceiling, when Config.MinRate is zero.
	MinRateFraction = 0.02
	// CapRetry is how soon a key at its concurrency cap is looked at again.
	CapRetry = 20 * time.Millisecond
	// DefaultHeadroom is the fraction of an upstream's declared rate that
	// [Upstream] leaves unused.
	DefaultHeadroom = 0.03
	// WindowSpread is the rate, as a multiple of its window's limit per
	// period, of the bucket that spreads the starts of a key built by
	// [UpstreamWindow] with a burst of a whole window. It only spreads: the
	// window bounds the rate. 1.5 spreads the half of a window that its
	// bucket holds back over a third of the period; faster spreading
	// gained a little more against a sliding log and drew more refusals
	// from a two-window sliding counter under transit jitter (session 9,
	// docs/benchmarks.md).
	WindowSpread = 1.5
	// MinJitterGuard is the least guard [UpstreamFixedWindow] gives a
	// declared fixed window, whatever its length (see [JitterGuard]).
	MinJitterGuard = 20 * time.Millisecond
	// MaxCost bounds a job's cost and a shape's burst or window limit, in
	// cost units; admission arithmetic saturates beyond it.
	MaxCost = 1_000_000_000_000
	// MaxAhead is the furthest ahead of now any admission time is set (a
	// bucket's TAT, a refusal's next time). Saturating there keeps every
	// time representable as Unix nanoseconds in the stores.
	MaxAhead = 100 * 365 * 24 * time.Hour
)

// Upstream returns the configuration of a key that paces calls to an
// upstream declaring rate requests per second with the given burst. It is
// the shape that never overruns a sliding one-second window of the
// declared rate (the strictest reading of "rate per second") nor a token
// bucket of (rate, burst), with a margin for jitter:
//
//   - a window of floor(rate) starts per second (for rates under 1/s, one
//     start per 1/rate seconds), exactly: the window counts each start
//     until its finish and logs it then (see [State.End]), so no variation
//     in the delay between a lease and its request's arrival makes the
//     upstream see more, and it needs no margin of its own;
//   - a token bucket at the rate less headroom (a fraction, e.g.
//     DefaultHeadroom) with half the burst (rounded up), which spreads
//     starts out instead of firing a whole window at once: the burst left
//     unused stays in an upstream bucket to absorb the same jitter.
//
// Each arrival the upstream refuses is a 429 that costs a key its pause,
// so the margin costs a few percent of the allowance to save seconds. A
// zero rate means unpaced.
func Upstream(name string, rate, burst, headroom float64) Config {
	c := Config{Name: name}
	if rate > 0 && !math.IsInf(rate, 0) && !math.IsNaN(rate) {
		c.Rate = rate * (1 - headroom)
		c.Burst = math.Ceil(math.Max(1, burst) / 2)
		limit, period := math.Floor(rate), time.Second
		if rate < 1 {
			limit, period = 1, dur(1e9/rate)
		}
		c.Windows = []Window{{Limit: limit, Period: period}}
	}
	return c
}

// UpstreamBucket is the configuration [Upstream] returned before windows:
// a token bucket only, at the rate less headroom with half the burst. It
// can overrun a sliding window of the declared rate by up to half the
// burst; use it for an upstream that documents a token bucket.
func UpstreamBucket(name string, rate, burst, headroom float64) Config {
	c := Config{Name: name}
	if rate > 0 {
		c.Rate = rate * (1 - headroom)
		c.Burst = math.Ceil(math.Max(1, burst) / 2)
	}
	return c
}

// UpstreamWindow returns the configuration of a key that paces calls to
// an upstream declaring at most limit requests in any window of period: a
// window of limit per period (exact: see [Upstream]), and a token bucket
// with half the burst (at least 1), which spreads the window's starts
// instead of sending them at once. A burst of zero means one second's
// worth, at most limit.
//
// The bucket's rate depends on the burst. A burst below limit is a limit
// of its own (an upstream bucket with that burst), so the bucket runs at
// limit/period less headroom, as [Upstream]'s does. A burst of at least
// limit says a whole window may start at once: the window alone then
// bounds what any upstream counting a sliding log, a fixed window or a
// bucket of that burst sees, whatever the transit (it counts each start
// until its answer), and the bucket only spreads each window's starts, at
// WindowSpread times limit/period: half the window at once, the rest
// within the next third of the period. At the declared rate it would
// spread them over half the period, and a backlog's last window would end
// that much later than the upstream allows (session 9: 0.45 s of a
// sliding 10/s destination's 0.84 s loss in simulated time). For an
// adaptive key use [AdaptiveUpstreamWindow]: its bucket's rate is the
// ceiling that discovery probes up to and scales its windows by.
func UpstreamWindow(name string, limit float64, period time.Duration, burst, headroom float64) Config {
	return upstreamWindow(name, limit, period, burst, headroom, true)
}

// AdaptiveUpstreamWindow is [UpstreamWindow] for a key that discovers its
// upstream's real limit (Adaptive set): its bucket runs at limit/period
// less headroom whatever the burst, since an adaptive key's Rate is its
// ceiling (the learned rate probes up to it, and the learned fraction of
// it scales the windows).
func AdaptiveUpstreamWindow(name string, limit float64, period time.Duration, burst, headroom float64) Config {
	c := upstreamWindow(name, limit, period, burst, headroom, false)
	c.Adaptive = true
	return c
}

// upstreamWindow is the configuration UpstreamWindow and
// AdaptiveUpstreamWindow share: the window, and a bucket with half the
// burst at limit/period less headroom, or at WindowSpread times
// limit/period when spread is set and the burst is a whole window.
func upstreamWindow(name string, limit float64, period time.Duration, burst, headroom float64, spread bool) Config {
	c := Config{Name: name}
	if limit <= 0 || period <= 0 {
		return c
	}
	rate := limit / period.Seconds()
	if burst <= 0 {
		burst = math.Min(limit, math.Max(1, math.Ceil(rate)))
	}
	c.Rate = rate * (1 - headroom)
	if spread && burst >= limit {
		c.Rate = WindowSpread * rate
	}
	c.Burst = math.Ceil(math.Max(1, burst) / 2)
	c.Windows = []Window{{Limit: limit, Period: period}}
	return c
}

// UpstreamFixedWindow returns the configuration of a key that paces calls
// to an upstream declaring at most limit requests in each window of
// period aligned to the clock (a quota that resets at :00): a fixed
// window of limit per period, guarded by [JitterGuard] (a start within
// the guard of a window's end counts in the next window too), so that
// the sender may use each window's full allowance as it opens, as the
// upstream allows. A burst below limit adds a token bucket at exactly
// limit/period with that burst, which spreads each window's starts; a
// burst of zero or at least limit adds none, since a bucket's refill,
// phased by the key's first start rather than by the clock, would delay
// every window's allowance by that phase. Unlike [UpstreamWindow] there
// is no headroom on the rate: the fixed window alone bounds what the
// upstream counts, and the guard covers the jitter at its edges. An
// adaptive key needs a bucket as its ceiling: see [Config.Validate].
func UpstreamFixedWindow(name string, limit float64, period time.Duration, burst, headroom float64) Config {
	c := Config{Name: name}
	if limit <= 0 || period <= 0 {
		return c
	}
	if burst > 0 && burst < limit {
		c.Rate, c.Burst = limit/period.Seconds(), math.Max(1, burst)
	}
	c.Windows = []Window{{Limit: limit, Period: period, Fixed: true, Guard: min(JitterGuard(period, headroom), period/2)}}
	return c
}

// JitterGuard is the guard [UpstreamFixedWindow] gives a fixed window (it
// once also lengthened sliding windows, which now count each start until
// its finish instead): the larger of headroom x period and
// MinJitterGuard: 30 ms on a one-second window, against an upstream
// clock a little ahead of ours at the window's edges.
func JitterGuard(period time.Duration, headroom float64) time.Duration {
	return max(MinJitterGuard, dur(float64(period)*headroom))
}

// Config is a limit key's configuration: what an operator sets. A key
// admits a start only when every shape it has admits it: the token bucket
// (Rate, Burst) when Rate > 0, and each of Windows.
type Config struct {
	// Name is the key, e.g. "openai:gpt-4o-mini" or "subscriber:store_17".
	Name string `json:"name"`
	// Rate is the token bucket's sustained rate of starts, in cost units
	// per second. Zero means the key has no bucket (Windows and
	// Concurrency still apply).
	Rate float64 `json:"rate"`
	// Burst is how many cost units may start at once from a full bucket.
	// Zero means max(1, Rate) (one second's worth).
	Burst float64 `json:"burst"`
	// Windows are window shapes: at most Limit cost units start in any
	// Period (sliding), or in each aligned Period (Fixed). Empty means
	// none.
	Windows []Window `json:"windows,omitempty"`
	// Concurrency caps the key's leases in flight. Zero means no cap.
	Concurrency int `json:"concurrency"`
	// Adaptive lets the key discover its upstream's real limit: a 429
	// sets the learned rate from what the upstream accepted just before
	// refusing, and clean windows probe back up to Rate. The learned
	// fraction of Rate scales every window too.
	Adaptive bool `json:"adaptive"`
	// MinRate is the floor of an adaptive key's learned rate. Zero means
	// MinRateFraction of Rate.
	MinRate float64 `json:"min_rate"`
	// PerStart makes the key count starts, not cost: every start takes one
	// unit from its shapes whatever the job's cost, and reported usage is
	// not reconciled on it. It is how one job names a requests-per-minute
	// key next to a tokens-per-minute key (an LLM call costs one request
	// and its estimated tokens).
	PerStart bool `json:"per_start,omitempty"`
}

// Charge is what one start of a job of the given cost takes from this
// key: 1 on a PerStart key, the cost otherwise.
func (c Config) Charge(cost int64) int64 {
	if c.PerStart {
		return 1
	}
	return cost
}

// Unpaced reports a key with no shape at all: no bucket, no window, no
// concurrency cap, not adaptive. A start changes nothing such a key's
// admission reads (only a pause, which a finish's outcome may set, can hold
// its jobs back), so the stores neither lock it exclusively nor write it
// when leasing or finishing; its in-flight count is then derived from the
// running jobs instead of kept in its row.
func (c Config) Unpaced() bool {
	return c.Rate == 0 && len(c.Windows) == 0 && c.Concurrency == 0 && !c.Adaptive
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	c.Burst = cmp.Or(c.Burst, math.Max(1, c.Rate))
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
	case c.Burst < 0 || math.IsNaN(c.Burst) || c.Burst > MaxCost:
		return fmt.Errorf("burst must be between 0 (default) and 1e12, got %v", c.Burst)
	case c.Concurrency < 0 || c.Concurrency > 1_000_000:
		return fmt.Errorf("concurrency must be between 0 (uncapped) and 1000000, got %d", c.Concurrency)
	case math.IsNaN(c.MinRate) || c.MinRate < 0 || c.MinRate > c.Rate:
		return fmt.Errorf("min_rate must be between 0 and rate (%v), got %v", c.Rate, c.MinRate)
	case c.Adaptive && c.Rate == 0:
		return fmt.Errorf("an adaptive key needs a rate ceiling greater than 0")
	case len(c.Windows) > MaxWindows:
		return fmt.Errorf("windows: at most %d per key, got %d", MaxWindows, len(c.Windows))
	}
	for i, w := range c.Windows {
		if err := w.validate(); err != nil {
			return fmt.Errorf("windows[%d]: %w", i, err)
		}
	}
	return nil
}

// MaxWindows bounds the windows of one key.
const MaxWindows = 4

// MaxCost returns the largest cost one start may have on this key: the
// bucket's burst and every window's limit bound it, since a start above
// them could never be admitted by a shape that is not empty. It is
// +Inf for a key with no shape (unpaced).
func (c Config) MaxCost() float64 {
	c = c.WithDefaults()
	m := math.Inf(1)
	if c.Rate > 0 {
		m = c.Burst
	}
	for _, w := range c.Windows {
		m = math.Min(m, w.Limit)
	}
	return m
}

// CheckCost reports a cost the key can never admit, naming the field:
// cost must be at least 1, at most MaxCost, and within [Config.MaxCost].
func (c Config) CheckCost(cost int64) error {
	if c.PerStart && cost >= 1 && cost <= MaxCost {
		cost = 1 // a start, whatever it costs elsewhere
	}
	switch {
	case cost < 1:
		return fmt.Errorf("cost must be at least 1, got %d", cost)
	case cost > MaxCost:
		return fmt.Errorf("cost must be at most %d, got %d", int64(MaxCost), cost)
	case float64(cost) > c.MaxCost():
		return fmt.Errorf("cost %d can never start on limit key %q: its largest admissible start is %g (burst or window limit)",
			cost, c.Name, c.MaxCost())
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
	// LastRefusal is when an adaptive key last met a 429 (or 503 with
	// Retry-After); discovery probes upward only after a clean window
	// since.
	LastRefusal time.Time `json:"last_refusal,omitzero"`

	// logs are the start logs: one per window, then (adaptive keys) the
	// starts and the refusals of the discovery window. Encoded together
	// with good and episode by MarshalShapes.
	logs []startLog
	// good is the last learned rate that went a whole discovery window
	// without a refusal: a failed probe falls back to it.
	good float64
	// probe is the learned rate at probeAt (Unix ns), when the current
	// probe step began; it becomes good once a window passed without a
	// refusal.
	probe   float64
	probeAt int64
	// level is the learned rate the last cut set, and hold (ns) how long
	// the key holds it before probing above it (see refused).
	level float64
	hold  int64
	// streak counts refusal signals in a row that each came while the
	// key still held the rate the one before set.
	streak int64
	// active is when the key's current run of starts began (Unix ns): its
	// first start ever, or the first after a discovery window without
	// any. A refusal long after it (and after the last refusal and pause)
	// at the rate the upstream had been accepting is a silent drop (see
	// refused).
	active int64

	// LearnedConcurrency is the in-flight cap an adaptive key learned
	// from refusals that its rate cannot explain (see concurrency.go);
	// 0 when it learned none. The cap in force is the smaller of it and
	// Concurrency (see InFlightCap).
	LearnedConcurrency int `json:"learned_concurrency,omitempty"`
	// capAt (Unix ns) is when the learned cap last changed, capHold (ns)
	// how long it holds before a probe, capFlags its bits (capHit,
	// capProbing, capBound, capRaised, capFull; see concurrency.go).
	capAt, capHold, capFlags int64
	// strictUntil (Unix ns) is when a fixed key's strict pacing, set by
	// a refusal its declared sliding window did not predict, runs out
	// (see strict.go); 0 when it is not strict.
	strictUntil int64
	// announcedAt (Unix ns) is when an announced policy last lowered an
	// adaptive key's learned rate (see announced); 0 for never. A
	// refusal within CutHoldoff of it is that cut's echo (see refused).
	announcedAt int64
	// evenUntil (Unix ns) is when an adaptive key's even pacing (a burst
	// of one), set by a refusal its rate did not cause, runs out (see
	// even.go); 0 when it paces with its burst.
	evenUntil int64
	// credit is the cost an adaptive key may start past its bucket and
	// learned window on the upstream's announced remaining quota (see
	// credit.go); 0 when it has none.
	credit float64
	// shown is the largest share of its announced quota the upstream
	// has shown room for at once: (remaining + 1) / quota over its
	// announced answers (see creditGuarded); 0 for never.
	shown float64
}

// NewState returns the state of a freshly configured key: a full bucket,
// not paused, learned rate at the ceiling.
func NewState(c Config) State {
	c = c.WithDefaults()
	return State{Config: c, LearnedRate: c.Rate}
}

// MarshalShapes returns the live state of the key's windows and discovery
// (start logs and learned-limit bookkeeping) as a compact byte string for
// the store; nil when there is none, that is when there are no logs and
// every slot it would write is zero: deciding "none" from the slots
// themselves, not from a list of fields, means a bit or field added to a
// slot (raisedCut and fillGrowing ride in the cap's flags) cannot be
// dropped by the store because nobody added it to the list. dst is reused
// when it has room.
func (s *State) MarshalShapes(dst []byte) []byte {
	c := s.capExtra()
	extra := [16]int64{int64(math.Float64bits(s.good)), int64(math.Float64bits(s.probe)), s.probeAt,
		int64(math.Float64bits(s.level)), s.hold, s.streak, s.active, c[0], c[1], c[2], c[3], s.strictUntil, s.announcedAt, s.evenUntil, int64(math.Float64bits(s.credit)), int64(math.Float64bits(s.shown))}
	if len(s.logs) == 0 && extra == ([16]int64{}) {
		return nil
	}
	return encodeLogs(dst[:0], s.logs, extra[:])
}

// UnmarshalShapes restores what MarshalShapes wrote. Logs that do not
// match the configuration (a window added or removed since) are dropped
// by the next Take, conservatively kept until then.
func (s *State) UnmarshalShapes(b []byte) error {
	logs, extra, err := decodeLogs(b)
	if err != nil {
		return err
	}
	s.logs = logs
	s.good, s.probe, s.probeAt, s.level, s.hold, s.streak, s.active = 0, 0, 0, 0, 0, 0, 0
	if len(extra) >= 3 {
		s.good, s.probe, s.probeAt = math.Float64frombits(uint64(extra[0])), math.Float64frombits(uint64(extra[1])), extra[2]
		if !finite(s.good) || !finite(s.probe) {
			s.good, s.probe, s.probeAt = 0, 0, 0
		}
	}
	if len(extra) >= 5 { // written since probe holds
		s.level, s.hold = math.Float64frombits(uint64(extra[3])), min(max(extra[4], 0), int64(max(MaxHold, SilentHold, MaxSilentHold)))
		if !finite(s.level) || s.level < 0 {
			s.level = 0
		}
	}
	if len(extra) >= 6 {
		s.streak = min(max(extra[5], 0), 4)
	}
	if len(extra) >= 7 {
		s.active = max(extra[6], 0)
	}
	s.setCapExtra(extra[min(7, len(extra)):]) // written since concurrency discovery
	s.strictUntil = 0
	if len(extra) >= 12 { // written since strict counting
		s.strictUntil = max(extra[11], 0)
	}
	s.announcedAt = 0
	if len(extra) >= 13 { // written since announced cuts have echoes
		s.announcedAt = max(extra[12], 0)
	}
	s.evenUntil = 0
	if len(extra) >= 14 { // written since even pacing
		s.evenUntil = max(extra[13], 0)
	}
	s.credit, s.shown = 0, 0
	if len(extra) >= 16 { // written since announced credit
		s.credit, s.shown = math.Float64frombits(uint64(extra[14])), math.Float64frombits(uint64(extra[15]))
		if !finite(s.credit) || !finite(s.shown) || s.credit < 0 || s.shown < 0 {
			s.credit, s.shown = 0, 0
		}
		s.credit, s.shown = min(s.credit, MaxCost), min(s.shown, MaxCost)
	}
	return nil
}

// Reconfigure applies a new configuration to a live key at now, keeping its
// pause, in-flight count and the tokens its bucket owes: a bucket that
// owes n units at the old rate owes n units at the new one, so raising a
// throttled key's rate takes effect at once instead of after the debt
// run up at the old, slower rate. A window whose period and kind (sliding
// or fixed) are unchanged keeps its log (the starts really happened; the
// two kinds' logs hold different things); other windows start empty.
func (s *State) Reconfigure(c Config, now time.Time) {
	before := s.rate()
	owed := 0.0
	if before > 0 && s.TAT.After(now) {
		owed = s.TAT.Sub(now).Seconds() * before
	}
	oldWindows, oldLogs := s.Windows, s.logs
	c = c.WithDefaults()
	s.Config = c
	if !c.Adaptive || s.LearnedRate <= 0 || s.LearnedRate > c.Rate {
		s.LearnedRate = c.Rate
	}
	if !c.Adaptive {
		s.good, s.probe, s.probeAt, s.LastRefusal, s.level, s.hold, s.streak, s.active, s.announcedAt, s.evenUntil, s.credit, s.shown = 0, 0, 0, time.Time{}, 0, 0, 0, 0, 0, 0, 0, 0
		s.setCapExtra(nil) // a fixed key learns no cap
	}
	if c.Adaptive {
		s.strictUntil = 0 // its learned rate reads refusals instead (see strict.go)
	}
	s.logs = nil
	for i, w := range c.Windows {
		for k, o := range oldWindows {
			if o.sameLog(w) && k < len(oldLogs) {
				s.ensureLogs()
				s.logs[i] = oldLogs[k]
				break
			}
		}
	}
	if c.Adaptive && len(oldLogs) == len(oldWindows)+2 && len(oldWindows) == len(c.Windows) {
		s.ensureLogs()
		copy(s.logs[len(c.Windows):], oldLogs[len(oldWindows):])
	}
	if after := s.rate(); owed > 0 && after > 0 && after != before {
		s.TAT = addSat(now, dur(owed/after*1e9))
	}
}

// nLogs is how many start logs the configuration needs.
func (s *State) nLogs() int {
	n := len(s.Windows)
	if s.Adaptive {
		n += 2
	}
	return n
}

// ensureLogs sizes s.logs to the configuration, keeping what matches.
func (s *State) ensureLogs() {
	if n := s.nLogs(); len(s.logs) != n {
		logs := make([]startLog, n)
		copy(logs, s.logs)
		s.logs = logs
	}
}

func (s *State) rate() float64 {
	if s.Adaptive && s.LearnedRate > 0 {
		return s.LearnedRate
	}
	if s.strict() {
		return s.strictRate() // see strict.go
	}
	return s.Rate
}

// scale is the fraction of its configured windows an adaptive key may use:
// its learned rate over its ceiling.
func (s *State) scale() float64 {
	if !s.Adaptive || s.Rate <= 0 || s.LearnedRate <= 0 {
		return 1
	}
	return math.Min(1, s.LearnedRate/s.Rate)
}

// unitNS is the time one cost unit occupies in the bucket, in ns.
func (s *State) unitNS() float64 { return 1e9 / s.rate() }

// burst is the bucket's burst in force. For a fixed key it is Burst. An
// adaptive key bursts at most AdaptiveBurst's worth of its learned rate
// (at least two units, never more than Burst): its ceiling may not hold,
// and a burst at a limit the upstream does not have is refused whole, all
// at once, before the first answer can teach the key anything; once it
// learned a limit, its own bursts would make an upstream bucket with a
// smaller burst refuse at an average below its rate, which the next
// estimate would take for the limit. Nearly even, it meets the upstream's
// limit one refusal at a time, and a refusal that empties its bucket idles
// it a tenth of a second, not Burst/LearnedRate; a burst of one unit would
// lose a start whenever the lease loop came late.
func (s *State) burst() float64 {
	if s.strict() {
		return 1 // even pacing: see strict.go
	}
	if !s.Adaptive {
		return s.Burst
	}
	if s.evenUntil != 0 {
		return 1 // even pacing: see even.go
	}
	return math.Min(s.Burst, math.Max(2, s.rate()*AdaptiveBurst.Seconds()))
}

// tolerance is how far TAT may run ahead of now: the burst.
func (s *State) tolerance() time.Duration { return dur(s.burst() * s.unitNS()) }

// units is the time cost units occupy in the bucket, saturated.
func (s *State) units(cost float64) time.Duration { return dur(cost * s.unitNS()) }

// Check reports whether the key admits one start of the given cost at now.
// When it does not, next is the earliest time it might (for a concurrency
// cap, a short re-check interval, since a lease may end at any moment);
// next is never before now. Check does not change s; call Take after every
// key of the job admitted it.
func (s *State) Check(now time.Time, cost int64) (ok bool, next time.Time) {
	cost = s.Charge(cost)
	if now.Before(s.PausedUntil) {
		return false, s.PausedUntil
	}
	if c := s.InFlightCap(); c > 0 && s.InFlight >= c {
		return false, now.Add(CapRetry)
	}
	next = now
	// The upstream's remaining quota admits past the pacing (see
	// credit.go), as does a fill it took in full (see fill.go).
	credited := s.credited(cost) || s.greedy()
	if rate := s.rate(); rate > 0 && s.TAT.After(now) && !credited { // a full bucket admits even a cost above the burst
		// One saturating conversion: (cost - burst) units after TAT.
		if at := s.TAT.Add(dur((float64(cost) - s.burst()) * 1e9 / rate)); at.After(next) {
			next = at
		}
	}
	if len(s.Windows) > 0 && len(s.logs) >= len(s.Windows) {
		t, sc := now.UnixNano(), s.scale()
		for i, w := range s.Windows {
			if ok, at := w.admitAt(&s.logs[i], t, cost, math.Max(1, w.Limit*sc)); !ok && at > next.UnixNano() {
				next = time.Unix(0, at)
			}
		}
	}
	if s.Adaptive && len(s.logs) == s.nLogs() && s.Rate > 0 && !credited {
		// The learned window: no more than the learned rate's worth of
		// starts in any discovery window (see discover.go).
		d := s.discoveryWindow()
		if ok, at := s.logs[len(s.Windows)].admitAt(now.UnixNano(), cost, s.learnedWindowLimit(d), int64(d)); !ok && at > next.UnixNano() {
			next = time.Unix(0, at)
		}
	}
	if next.After(now) {
		if next.Sub(now) > MaxAhead {
			next = now.Add(MaxAhead)
		}
		return false, next
	}
	return true, now
}

// learnedWindowLimit is the limit of an adaptive key's learned window over
// its discovery window d: its learned rate's worth, or, when one of its
// sliding windows of period d admits more as scaled now, that window's
// limit. Starts are whole, so a learned window of rate*d admits
// floor(rate*d) per d: a whole start under the rate, 7 % at rise-bucket's
// 14.55/s (announced 15), on top of DiscoveryMargin. A sliding window of
// the key's own over the same period, scaled to the learned rate (its
// declared limit times LearnedRate/Rate: the measured or announced limit
// with the ceiling's headroom put back), already bounds every window of
// the upstream's more strictly than a learned window of the same limit
// could (it counts each start until its answer, then from the answer: see
// window.go), so the learned window need not undercut it; the bucket at
// the learned rate still paces, DiscoveryMargin under the limit.
func (s *State) learnedWindowLimit(d time.Duration) float64 {
	limit := math.Max(1, s.rate()*d.Seconds())
	sc := s.scale()
	for _, w := range s.Windows {
		if !w.Fixed && w.Period == d {
			limit = math.Max(limit, w.Limit*sc)
		}
	}
	return limit
}

// Take records one start of the given cost at now: it spends tokens,
// counts the start in every window as in flight until its End (a fixed
// window also counts it in its aligned window at once), logs it in an
// adaptive key's discovery log and counts a lease in flight.
func (s *State) Take(now time.Time, cost int64) {
	cost = s.Charge(cost)
	s.strictExpire(now) // strict counting that ran out ends at its next start, not only at a success
	s.evenExpire(now)
	s.InFlight++
	defer s.noteCap(now, cost) // once this start is counted everywhere
	credited := s.credited(cost) || s.greedy()
	s.spendCredit(cost)
	if rate := s.rate(); rate > 0 {
		s.TAT = s.paceFrom(now).Add(s.strictStep(float64(cost) * 1e9 / rate))
		if s.TAT.Sub(now) > MaxAhead { // saturate: TAT stays representable
			s.TAT = now.Add(MaxAhead)
		}
		if credited {
			// A start on credit empties the bucket at most: the
			// pacing resumes from there when the credit runs out,
			// owing nothing for what the upstream said it takes.
			s.TAT = minTime(s.TAT, addSat(now, s.tolerance()))
		}
	}
	if s.nLogs() == 0 {
		return
	}
	s.ensureLogs()
	t := now.UnixNano()
	for i, w := range s.Windows {
		w.add(&s.logs[i], t, cost)
	}
	if s.Adaptive {
		d := int64(s.discoveryWindow())
		l := &s.logs[len(s.Windows)]
		if s.active == 0 || l.since(t-d) == 0 {
			s.active = t // the first start, or the first after an idle window
		}
		l.add(t, cost, t-d, d/LogSlots)
	}
}

// Release ends one lease in flight, and nothing else: a window keeps
// counting the lease's start as in flight. It suits a key without windows
// or a caller that does not know when the start ended; the finish path
// calls End.
func (s *State) Release() {
	if s.InFlight > 0 {
		s.InFlight--
	}
}

// End ends one lease in flight whose start of the given cost was taken
// earlier, at now, the time its outcome was reported: the lease is
// released, and every window moves the start from in flight to its log at
// now, the latest time the upstream can have counted it (its answer had
// come back by then). Until then a window counts it as in flight, so that
// no delay between the lease and the request's arrival lets the upstream
// see more than a window's limit (see window.go). A lease that ends
// without an answer (expired, cancelled) ends the same way: its request
// may have been sent.
func (s *State) End(now time.Time, cost int64) {
	s.Release()
	if len(s.Windows) == 0 {
		return
	}
	s.ensureLogs()
	t, cost := now.UnixNano(), s.Charge(cost)
	for i, w := range s.Windows {
		w.land(&s.logs[i], t, cost)
	}
}

// Reconcile corrects the bucket once the real cost of a start is known:
// usage above the estimate moves TAT later, usage below gives tokens back.
// Windows keep the estimate: their log cannot be rewritten in place, and
// counting the estimate is what the start was admitted on.
func (s *State) Reconcile(now time.Time, estimated, actual int64) {
	if s.PerStart || actual <= 0 || actual == estimated || s.rate() <= 0 {
		return // a start is one start, whatever it used
	}
	s.TAT = addSat(s.TAT, s.units(float64(actual)-float64(estimated)))
	if floor := now.Add(-s.tolerance()); s.TAT.Before(floor) {
		s.TAT = floor
	}
	s.TAT = minTime(s.TAT, now.Add(MaxAhead))
}

// Pause stops admissions until until, unless the key is already paused
// longer.
func (s *State) Pause(until time.Time) {
	if until.After(s.PausedUntil) {
		s.PausedUntil = until
		s.credit = 0 // the upstream's word now is the pause (see credit.go)
		s.endFill()
	}
}

// Hint applies what an upstream said about its remaining quota: with
// nothing remaining the key pauses until the reset; otherwise the bucket is
// emptied to the remaining quota, so that it slows down before a 429. An
// adaptive key told its policy (a quota over a window, as IETF
// RateLimit-Policy says it) learns that allowance (see announced);
// otherwise, with a known reset, it paces the remaining quota over the
// rest of the reset (its learned rate drops to remaining/reset when that
// is lower), so that it does not spend the quota in a burst and meet the
// 429.
//
// An announced policy that one of the key's sliding windows already
// enforces (see windowEnforces) makes a zero remaining's pause
// redundant: the window holds every start until a slot is free at an
// upstream that counts a window, so the key only empties its bucket, as
// for any low remaining (an upstream bucket, which announces its rate
// over a window too, refills a token at a time). Such a key meets a zero
// remaining whenever it sends at the announced quota, and the reset it
// came with (a sliding window's newest start leaving, rounded up to a
// whole second) idled it for a second each time. When that window also
// bounds the upstream's count, the remaining is credit the key may start
// at once, past its bucket (see credit.go).
func (s *State) Hint(now time.Time, h job.Hint) {
	if h.Remaining < 0 {
		return
	}
	announced := s.announced(now, h)
	if announced {
		s.setCredit(h)
	}
	if h.Remaining == 0 && h.Reset > 0 && !(announced && s.windowEnforces(h)) {
		s.Pause(addSat(now, min(h.Reset, MaxAhead)))
		return
	}
	if s.rate() <= 0 {
		return
	}
	if announced {
		// The upstream said what it allows; remaining/reset below is a
		// cruder reading of the same thing (a sliding window's reset is
		// when its newest start leaves, which would idle the key).
	} else if s.Adaptive && h.Reset > 0 && h.Limit > 0 && h.Remaining < h.Limit/4 {
		if r := float64(h.Remaining) / h.Reset.Seconds(); r < s.LearnedRate {
			s.LearnedRate = math.Max(s.MinRate, r)
		}
	}
	// At most Remaining units may start before the reset, less, on an
	// adaptive key, its starts still in flight (after End: the answered
	// one is no longer counted), which may reach the upstream after the
	// answered one and use some of it, as setCredit reads them. Without
	// it the remaining of an answer that left before the key's later
	// starts arrived let one more through at once: the rising mix's
	// rise-bucket (declared 40/s, really 15/s with a burst of 5) was
	// refused at 62 ms on 2 of 8 virtual seeds, a second of Retry-After
	// each (docs/benchmarks.md, session 18, s18h5). A declared key keeps
	// the plain reading: its windows already count its starts in flight.
	left := float64(h.Remaining)
	if s.Adaptive {
		left = max(0, left-float64(s.InFlight))
	}
	floor := addSat(now, s.tolerance()-s.units(left))
	if floor.After(s.TAT) {
		s.TAT = floor
	}
}

// windowEnforces reports whether one of the key's sliding windows, as
// scaled now, admits no more than the policy h announced (h.Limit per
// h.Window) over a period at least h.Window long. Such a window bounds
// what the upstream counts of this key's requests in any of its windows:
// it counts each start until its answer and then logs it no earlier than
// its arrival (see End), so the start after a full window waits for a
// slot to be free at the upstream, which a zero remaining only repeats.
// A fixed window does not: across its boundary the upstream may count
// up to twice its limit in one sliding window.
func (s *State) windowEnforces(h job.Hint) bool {
	if h.Limit <= 0 || h.Window <= 0 {
		return false
	}
	sc := s.scale()
	for _, w := range s.Windows {
		if !w.Fixed && w.Period >= h.Window && math.Max(1, w.Limit*sc) <= float64(h.Limit)+1e-9 {
			return true
		}
	}
	return false
}

// Tokens returns the cost units the key could admit at now: the smallest
// free room of its bucket and windows (the burst for an unpaced key).
func (s *State) Tokens(now time.Time) float64 {
	free := math.Inf(1)
	if s.rate() > 0 {
		room := s.tolerance() - maxTime(s.TAT, now).Sub(now)
		free = math.Max(0, float64(room)/s.unitNS())
	}
	if len(s.logs) >= len(s.Windows) {
		t, sc := now.UnixNano(), s.scale()
		for i, w := range s.Windows {
			free = math.Min(free, math.Max(0, w.Limit*sc-float64(w.used(&s.logs[i], t))))
		}
	} else {
		for _, w := range s.Windows {
			free = math.Min(free, w.Limit*s.scale())
		}
	}
	if math.IsInf(free, 1) {
		return s.burst()
	}
	return free
}

// Wait estimates how long until cost units, queued on the key from now
// on, have all been admitted: the rest of a pause, then the cost less the
// free room of the slowest shape, at that shape's sustained rate. It
// saturates at MaxAhead and ignores the concurrency cap, whose wait
// depends on how long jobs run.
func (s *State) Wait(now time.Time, cost int64) time.Duration {
	var wait time.Duration
	start := now
	if s.PausedUntil.After(now) {
		wait, start = s.PausedUntil.Sub(now), s.PausedUntil
	}
	ahead := float64(cost) - s.Tokens(start)
	if ahead <= 0 {
		return wait
	}
	rate := math.Inf(1)
	if s.rate() > 0 {
		rate = s.rate()
	}
	for _, w := range s.Windows {
		rate = math.Min(rate, w.Limit*s.scale()/w.Period.Seconds())
	}
	if math.IsInf(rate, 1) || rate <= 0 {
		return wait
	}
	return min(MaxAhead, wait+dur(ahead/rate*1e9))
}

// dur converts nanoseconds to a Duration, saturating at ±MaxAhead (NaN is
// zero), so that no cost or rate makes a duration wrap.
func dur(ns float64) time.Duration {
	switch {
	case math.IsNaN(ns):
		return 0
	case ns >= float64(MaxAhead):
		return MaxAhead
	case ns <= -float64(MaxAhead):
		return -MaxAhead
	}
	return time.Duration(ns)
}

// addSat is t.Add(d) for the bounded durations dur returns; it exists to
// name the intent at call sites.
func addSat(t time.Time, d time.Duration) time.Time { return t.Add(max(-MaxAhead, min(d, MaxAhead))) }

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
