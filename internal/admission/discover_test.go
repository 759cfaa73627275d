package admission

import (
	"math"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// upstreamModel answers one request at now: accepted, or refused with the
// time the upstream says to retry at (zero: no Retry-After).
type upstreamModel interface {
	answer(now time.Time) (ok bool, retryAt time.Time)
}

// slidingModel admits at most limit(now) requests in any second.
type slidingModel struct {
	limit    func(time.Time) int
	accepted []time.Time
}

func (m *slidingModel) answer(now time.Time) (bool, time.Time) {
	in := 0
	for i := len(m.accepted) - 1; i >= 0 && now.Sub(m.accepted[i]) < time.Second; i-- {
		in++
	}
	if in >= m.limit(now) {
		return false, time.Time{}
	}
	m.accepted = append(m.accepted, now)
	return true, time.Time{}
}

// fixedModel admits limit(now) requests in each aligned second and
// answers a refusal with a Retry-After of exactly the window's end.
type fixedModel struct {
	limit func(time.Time) int
	start time.Time
	count int
}

func (m *fixedModel) answer(now time.Time) (bool, time.Time) {
	if ws := now.Truncate(time.Second); !ws.Equal(m.start) {
		m.start, m.count = ws, 0
	}
	if m.count >= m.limit(now) {
		return false, m.start.Add(time.Second)
	}
	m.count++
	return true, time.Time{}
}

// fixedDrop is a fixed-window upstream that admits 30 a second until
// drop and 15 from then on, dropping silently (no signal but refusals).
func fixedDrop(drop time.Time) *fixedModel {
	return &fixedModel{limit: func(now time.Time) int {
		if now.Before(drop) {
			return 30
		}
		return 15
	}}
}

// drive runs s against up from start for d in 1 ms steps, answering every
// start at once (a refusal with a retry time through RateLimited, one
// without through Throttled), and returns the refusal times.
func drive(s *State, up upstreamModel, start time.Time, d time.Duration) []time.Time {
	var refused []time.Time
	for now := start; now.Before(start.Add(d)); now = now.Add(time.Millisecond) {
		if ok, _ := s.Check(now, 1); !ok {
			continue
		}
		s.Take(now, 1)
		s.Release()
		ok, at := up.answer(now)
		switch {
		case ok:
			s.Succeeded(now)
		case at.IsZero():
			refused = append(refused, now)
			s.Throttled(now, now.Add(time.Second), 1)
		default:
			refused = append(refused, now)
			s.RateLimited(now, at, 1)
		}
	}
	return refused
}

func countIn(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// TestDiscoveryFromTrailingWindow checks the estimate on a sliding
// window: a key told 40/s whose upstream takes 25 in any second halves on
// its first refusal (no window yet to measure), then, probing after its
// hold, learns from the trailing window's acceptances just under 25 and
// stays there, with a handful of refusals in all.
func TestDiscoveryFromTrailingWindow(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 40, Burst: 10, Adaptive: true})
	up := &slidingModel{limit: func(time.Time) int { return 25 }}
	refused := drive(&s, up, t0, 10*time.Second)
	if s.LearnedRate < 23 || s.LearnedRate > 25 {
		t.Fatalf("learned %v/s after 10 s against a sliding 25/s, want just under 25 (refusals at %v)", s.LearnedRate, refused)
	}
	if len(refused) > 6 {
		t.Fatalf("%d refusals in 10 s, want a handful: %v", len(refused), refused)
	}
	if got := countIn(up.accepted, t0.Add(5*time.Second), t0.Add(10*time.Second)); got < 5*23 {
		t.Fatalf("%d accepted in the last 5 s at a 25/s limit, want at least %d", got, 5*23)
	}
}

// TestDiscoveryFixedWindowDrop drives a key against fixed one-second
// windows of 30 that drop silently to 15, answering with a Retry-After of
// the window's end: the estimate counts what the upstream accepted since
// the pause ended (a fixed window reset there), not the trailing window,
// which still holds the previous window's 30. The drop must be learned
// within two signals, not by 3% trims for seconds, and later probes above
// it must cost only a refusal each.
func TestDiscoveryFixedWindowDrop(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 30, Burst: 15, Adaptive: true})
	drop := t0.Add(4*time.Second + 300*time.Millisecond)
	up := fixedDrop(drop)
	refused := drive(&s, up, t0, drop.Add(2*time.Second).Sub(t0))
	if s.LearnedRate > 15 {
		t.Fatalf("learned %v/s 2 s after a drop to 15 per fixed second (refusals %v), want at most 15: the since-the-pause count is the new limit",
			s.LearnedRate, refused)
	}
	refused = append(refused, drive(&s, up, drop.Add(2*time.Second), 8*time.Second)...)
	if after := countIn(refused, drop, drop.Add(time.Hour)); after > 6 {
		t.Fatalf("%d refusals in the 10 s after the drop, want a few signals: %v", after, refused)
	}
	// Probes above 15 fail and bisect back; the key stays near the limit.
	if s.LearnedRate < 12 || s.LearnedRate > 17.5 {
		t.Fatalf("learned %v/s 10 s after a drop to 15 per fixed second, want about 15", s.LearnedRate)
	}
}

// TestDiscoveryRiseFound checks bounded probing finds a limit that rises:
// a key learned at 10/s whose upstream rises to 30 finds at least 27
// within 4 s.
func TestDiscoveryRiseFound(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 30, Burst: 15, Adaptive: true})
	rise := t0.Add(3 * time.Second)
	up := &slidingModel{limit: func(now time.Time) int {
		if now.Before(rise) {
			return 10
		}
		return 30
	}}
	drive(&s, up, t0, 3*time.Second)
	if s.LearnedRate > 11 {
		t.Fatalf("learned %v/s against a sliding 10/s, want about 10", s.LearnedRate)
	}
	drive(&s, up, rise, 4*time.Second)
	if s.LearnedRate < 27 {
		t.Fatalf("learned %v/s 4 s after the limit rose to 30, want at least 27", s.LearnedRate)
	}
}

// TestProbeHold checks the hold before probing: none while the key holds
// the rate a cut set (counted from the end of the refusal's pause), a
// probe after it, and a doubled hold after a probe failed at the same
// level, up to MaxHold.
func TestProbeHold(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 40, Burst: 10, Adaptive: true})
	now := t0
	s.RateLimited(now, now.Add(time.Second), 1) // first refusal: halved, paused 1 s
	if s.LearnedRate != 20 || time.Duration(s.hold) != ProbeHold {
		t.Fatalf("after a first refusal: learned %v hold %v, want 20 and %v", s.LearnedRate, time.Duration(s.hold), ProbeHold)
	}
	s.Succeeded(now.Add(1500 * time.Millisecond)) // clean only 0.5 s since the pause ended
	if s.LearnedRate != 20 {
		t.Fatalf("probed to %v within the hold after the pause", s.LearnedRate)
	}
	s.Succeeded(now.Add(2500 * time.Millisecond))
	if s.LearnedRate <= 20 {
		t.Fatalf("no probe after the hold (learned %v)", s.LearnedRate)
	}
	// Failed probes at the same level: the hold doubles each time.
	want := ProbeHold
	for i := range 5 {
		now = now.Add(time.Duration(i+3) * 10 * time.Second)
		s.LearnedRate = s.level * 1.1 // probing above the level
		s.Throttled(now, now.Add(time.Second), 1)
		want = min(MaxHold, 2*want)
		if got := time.Duration(s.hold); got != want || math.Abs(s.LearnedRate-s.level) > 1e-9 {
			t.Fatalf("failed probe %d: hold %v learned %v level %v, want hold %v and back at the level", i, got, s.LearnedRate, s.level, want)
		}
	}
	// The state round-trips through the store's encoding.
	var back State
	back.Config = s.Config
	if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil {
		t.Fatal(err)
	}
	if back.level != s.level || back.hold != s.hold || back.streak != s.streak || back.good != s.good {
		t.Fatalf("round trip: level %v hold %v streak %v good %v, want %v %v %v %v",
			back.level, back.hold, back.streak, back.good, s.level, s.hold, s.streak, s.good)
	}
}

// TestSilentDropHalves checks the silent drop: a key that went seconds
// clean at its ceiling and is then refused with nearly all it sent in the
// window accepted does not trust that window (it counts the old limit):
// one refusal halves it to the new limit's neighbourhood, and it holds
// SilentHoldPerRun of the old limit's age (within SilentHold and
// MaxSilentHold) before probing. A key holding a learned rate below its
// ceiling is not treated so: a bucket's burst can hide a slightly high
// rate for seconds, and halving it would throw away what it learned.
func TestSilentDropHalves(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 30, Burst: 15, Adaptive: true})
	drop := t0.Add(4*time.Second + 300*time.Millisecond)
	up := fixedDrop(drop)
	refused := drive(&s, up, t0, drop.Add(time.Second).Sub(t0))
	if len(refused) != 1 {
		t.Fatalf("refusals %v in the second after a drop, want one signal", refused)
	}
	// The old limit held 4.3 s: the hold is SilentHoldPerRun of that,
	// bounded by MaxSilentHold (a probe into a limit that held that long
	// would cost a refusal and its pause).
	if s.LearnedRate != 15 || time.Duration(s.hold) != MaxSilentHold {
		t.Fatalf("after a silent drop from 30 to 15: learned %v hold %v, want 15 (halved) and %v",
			s.LearnedRate, time.Duration(s.hold), MaxSilentHold)
	}
	// A limit that held only 2.3 s is held after its drop for 1.5 times
	// that, not the 6 s of a long-lived one.
	short := NewState(Config{Name: "k", Rate: 30, Burst: 15, Adaptive: true})
	early := t0.Add(2*time.Second + 300*time.Millisecond)
	upShort := fixedDrop(early)
	if refused := drive(&short, upShort, t0, early.Add(time.Second).Sub(t0)); len(refused) != 1 {
		t.Fatalf("refusals %v in the second after an early drop, want one signal", refused)
	}
	if h := time.Duration(short.hold); short.LearnedRate != 15 || h <= SilentHold || h >= MaxSilentHold {
		t.Fatalf("after a silent drop ending a 2.3 s run: learned %v hold %v, want 15 and a hold within (%v, %v)",
			short.LearnedRate, h, SilentHold, MaxSilentHold)
	}
	// When the run began is kept with the logs, across nodes and restarts.
	var back State
	back.Config = s.Config
	if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil || back.active != s.active || s.active == 0 {
		t.Fatalf("round trip: active %v, want %v (err %v)", back.active, s.active, err)
	}

	// The same refusal on a key holding a learned 25 of its 40: trimmed
	// from the window, not halved.
	h := NewState(Config{Name: "k", Rate: 40, Burst: 10, Adaptive: true})
	h.LearnedRate, h.level, h.LastRefusal = 25, 25, t0.Add(-10*time.Second)
	now := t0
	for i := range 100 { // 4 s at 25/s, all accepted
		now = t0.Add(time.Duration(i) * 40 * time.Millisecond)
		h.Take(now, 1)
		h.Release()
	}
	h.Throttled(now.Add(time.Millisecond), now.Add(time.Second), 1)
	if h.LearnedRate < 23 || h.LearnedRate >= 25 {
		t.Fatalf("a key holding 25/s refused after 4 clean seconds learned %v, want a trim to just under 25", h.LearnedRate)
	}
}

// TestDiscoveryBoundOnFirstRefusal drives a key told 30/s against a
// sliding window of 10: its first refusal comes a quarter of a second
// into its run, with 10 accepted in the trailing window, which bounds the
// upstream at 10 however little of a window the key has measured. The
// key learns just under 10 at once, instead of halving to 15 and paying a
// second refusal and pause, and holds it (SilentHold) without probing
// back into the limit.
func TestDiscoveryBoundOnFirstRefusal(t *testing.T) {
	t.Parallel()
	s := NewState(AdaptiveUpstreamWindow("k", 30, time.Second, 0, DefaultHeadroom))
	s.Config = s.Config.WithDefaults()
	up := &slidingModel{limit: func(time.Time) int { return 10 }}
	refused := drive(&s, up, t0, 3*time.Second)
	if len(refused) == 0 {
		t.Fatal("no refusal at 30/s against a sliding 10/s")
	}
	if first := refused[0].Sub(t0); first < time.Duration(BoundRun*float64(time.Second)) {
		t.Fatalf("first refusal %v into the run: too early for the bound to apply, the test measures nothing", first)
	}
	if s.LearnedRate > 10 || s.LearnedRate < 9 {
		t.Fatalf("learned %.2f/s after the first refusal against a sliding 10/s, want just under 10 (refusals %v)", s.LearnedRate, refused)
	}
	if len(refused) != 1 {
		t.Fatalf("refusals %v in 3 s, want the first one only", refused)
	}
}

// TestDiscoveryBoundNeedsARun checks that a refusal within BoundRun of
// the key's first start, against a bucket that took only its burst,
// halves rather than reading the burst as the rate.
func TestDiscoveryBoundNeedsARun(t *testing.T) {
	t.Parallel()
	s := NewState(AdaptiveUpstreamWindow("k", 40, time.Second, 0, DefaultHeadroom))
	s.Config = s.Config.WithDefaults()
	now := t0
	for range 5 {
		s.Take(now, 1)
		s.Release()
		s.Succeeded(now)
	}
	s.Take(now, 1)
	s.Release()
	s.RateLimited(now.Add(10*time.Millisecond), now.Add(time.Second), 1)
	if want := s.Rate * NoEstimateCut; math.Abs(s.LearnedRate-want) > 0.01 {
		t.Fatalf("learned %.2f after a refusal 10 ms into the run with 5 accepted, want the halving %.2f", s.LearnedRate, want)
	}
}

// TestHintAnnouncedPolicy checks that an adaptive key believes an
// announced policy (IETF RateLimit-Policy q over w): down at once, up at
// once once a discovery window passed without a refusal, never above its
// ceiling; a fixed key's rate does not move.
func TestHintAnnouncedPolicy(t *testing.T) {
	t.Parallel()
	c := AdaptiveUpstreamWindow("k", 30, time.Second, 0, DefaultHeadroom)
	s := NewState(c)
	policy := func(q int64) job.Hint { return job.Hint{Limit: q, Remaining: q / 2, Window: time.Second} }
	s.Hint(t0, policy(10))
	if want := 10 * (1 - AnnouncedMargin); math.Abs(s.LearnedRate-want) > 1e-9 {
		t.Fatalf("learned %.3f after announcing 10/s, want %.3f", s.LearnedRate, want)
	}
	// A refusal at 10/s, then the upstream announces 30/s: believed only
	// a discovery window after the refusal.
	s.Throttled(t0.Add(100*time.Millisecond), time.Time{}, 1)
	before := s.LearnedRate
	s.Hint(t0.Add(500*time.Millisecond), policy(30))
	if s.LearnedRate != before {
		t.Fatalf("learned %.3f -> %.3f half a window after a refusal, want it held", before, s.LearnedRate)
	}
	s.Hint(t0.Add(1200*time.Millisecond), policy(30))
	if want := math.Min(c.Rate, 30*(1-AnnouncedMargin)); math.Abs(s.LearnedRate-want) > 1e-9 {
		t.Fatalf("learned %.3f after announcing 30/s clean, want %.3f", s.LearnedRate, want)
	}
	s.Hint(t0.Add(1300*time.Millisecond), policy(1000))
	if s.LearnedRate > c.Rate {
		t.Fatalf("learned %.3f above the ceiling %.3f", s.LearnedRate, c.Rate)
	}
	f := NewState(UpstreamWindow("f", 30, time.Second, 0, DefaultHeadroom))
	learned := f.LearnedRate
	f.Hint(t0, policy(10))
	if f.LearnedRate != learned || f.rate() != f.Rate {
		t.Fatalf("a fixed key's rate moved on an announcement: learned %v rate %v", f.LearnedRate, f.rate())
	}
}

// TestZeroRemainingWindowEnforced checks that a zero remaining under an
// announced policy does not pause an adaptive key whose sliding window
// already enforces that policy (its window counts every start until its
// answer, so the next start waits for a slot at the upstream anyway): it
// only empties the bucket. Before, rising's rise-sliding, sending at its
// announced quota, met a zero remaining once or more a run and idled a
// whole rounded-up second each time, with no refusal (1.29-1.62 of its
// ideal under transit). A key with no such window still pauses.
func TestZeroRemainingWindowEnforced(t *testing.T) {
	t.Parallel()
	zero := job.Hint{Limit: 10, Remaining: 0, Reset: time.Second, Window: time.Second}
	c := AdaptiveUpstreamWindow("k", 30, time.Second, 0, DefaultHeadroom)
	s := NewState(c)
	s.Hint(t0, zero)
	if s.PausedUntil.After(t0) {
		t.Fatalf("paused until %v by a zero remaining that its window enforces", s.PausedUntil.Sub(t0))
	}
	if want := 10 * (1 - AnnouncedMargin); math.Abs(s.LearnedRate-want) > 1e-9 {
		t.Fatalf("learned %.3f from the zero remaining's policy, want %.3f", s.LearnedRate, want)
	}
	if ok, next := s.Check(t0, 1); ok || next.Sub(t0) > s.tolerance() {
		t.Fatalf("Check right after a zero remaining: %v, next in %v; want the bucket emptied (next within %v)", ok, next.Sub(t0), s.tolerance())
	}
	for _, k := range []struct {
		name string
		c    Config
	}{
		{"a bucket alone", Config{Name: "b", Rate: 30, Burst: 5, Adaptive: true}},
		{"a fixed window", UpstreamFixedWindow("f", 30, time.Second, 0, DefaultHeadroom)},
		{"a window above the policy", UpstreamWindow("w", 30, time.Second, 0, DefaultHeadroom)}, // not adaptive: announcements do not scale it
	} {
		s := NewState(k.c)
		if k.c.Name == "f" {
			s.Rate, s.Burst, s.Adaptive = 30, 30, true
			s.LearnedRate = 30
		}
		s.Hint(t0, zero)
		if !s.PausedUntil.Equal(t0.Add(time.Second)) {
			t.Errorf("%s: paused until %v by a zero remaining, want the reset (1s)", k.name, s.PausedUntil.Sub(t0))
		}
	}
}

// TestFailedProbeKeepsItsLevel: a key that held its level for a long hold
// but could send only part of it (on a loaded machine its window admits
// its limit per period plus a round trip) and then has a probe refused
// falls back to the level, not under it to what its own window managed
// to send (the issue mix's halving-503 on the real clock: 14.5/s held,
// 12/s sent, 11.6 learned). A key that did send its level and had less
// accepted still learns the lower estimate, and so does one whose hold
// was short.
func TestFailedProbeKeepsItsLevel(t *testing.T) {
	t.Parallel()
	// run drives a key holding level 14.5 for the given hold after a
	// pause that ended at t0, sending perSecond until 600 ms past the
	// hold (probing by then), the last refusedLast starts refused, then
	// refuses a probe with a 1 s Retry-After.
	run := func(hold time.Duration, perSecond int, refusedLast int) State {
		s := NewState(Config{Name: "k", Rate: 30, Burst: 15, Adaptive: true})
		s.LearnedRate, s.level, s.hold = 14.5, 14.5, int64(hold)
		s.LastRefusal, s.PausedUntil = t0.Add(-time.Second), t0
		s.ensureLogs()
		now := t0
		n := int((hold + 600*time.Millisecond).Seconds() * float64(perSecond))
		for i := range n {
			now = t0.Add(time.Duration(i) * time.Second / time.Duration(perSecond))
			s.Take(now, 1)
			s.Release()
			if i >= n-refusedLast {
				// Refused as noise would be: logged, not learned from.
				s.logs[len(s.Windows)+1].add(now.UnixNano(), 1, now.UnixNano()-int64(time.Second), int64(time.Second)/LogSlots)
				continue
			}
			s.Succeeded(now)
		}
		if s.LearnedRate <= 14.5 || s.LearnedRate >= 29 {
			t.Fatalf("hold %v, %d/s: learned %v 600 ms after the hold, want a probe above the level and under twice it", hold, perSecond, s.LearnedRate)
		}
		s.RateLimited(now.Add(time.Millisecond), now.Add(time.Second), 1)
		return s
	}
	if s := run(MaxSilentHold, 12, 0); s.LearnedRate != 14.5 {
		t.Fatalf("after a 6 s hold at 14.5 sending 12/s, a failed probe learned %v, want the level 14.5", s.LearnedRate)
	}
	// Sent more than its level, and the upstream took less: the estimate.
	if s := run(MaxSilentHold, 16, 4); s.LearnedRate >= 14.5 {
		t.Fatalf("a failed probe whose window sent 16/s and had 12 accepted learned %v, want under the level", s.LearnedRate)
	}
	// A short hold's level is a guess: the window's count stands.
	if s := run(ProbeHold, 12, 0); s.LearnedRate >= 14.5 {
		t.Fatalf("after a 1 s hold, a failed probe sending 12/s learned %v, want under the level", s.LearnedRate)
	}
}

// TestAnnouncedCutEcho checks a refusal within CutHoldoff of a cut an
// announced policy made (an upstream bucket announcing 15/s to a key told
// 40/s, a request sent before the first answer refused 150 ms later): it
// pauses the key for the Retry-After but does not halve the announced
// rate, and an announced raise still waits a discovery window after it. A
// refusal past CutHoldoff is learned from, as before. The cut's time
// travels through MarshalShapes, as through a store.
func TestAnnouncedCutEcho(t *testing.T) {
	t.Parallel()
	c := UpstreamWindow("k", 40, time.Second, 0, DefaultHeadroom)
	c.Adaptive = true
	s := NewState(c)
	for i := range 6 {
		s.Take(t0.Add(time.Duration(i)*20*time.Millisecond), 1)
	}
	policy := func(q int64) job.Hint { return job.Hint{Limit: q, Remaining: 1, Window: time.Second} }
	s.End(t0.Add(40*time.Millisecond), 1)
	s.Succeeded(t0.Add(40 * time.Millisecond))
	s.Hint(t0.Add(40*time.Millisecond), policy(15))
	announced := s.LearnedRate
	if want := 15 * (1 - AnnouncedMargin); math.Abs(announced-want) > 1e-9 {
		t.Fatalf("learned %.3f after announcing 15/s, want %.3f", announced, want)
	}
	var back State
	if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil || back.announcedAt != s.announcedAt || s.announcedAt == 0 {
		t.Fatalf("announced cut at %d restored as %d (%v)", s.announcedAt, back.announcedAt, err)
	}
	at := t0.Add(190 * time.Millisecond)
	s.End(at, 1)
	s.RateLimited(at, at.Add(time.Second), 1)
	if s.LearnedRate != announced || !s.PausedUntil.Equal(at.Add(time.Second)) {
		t.Fatalf("refused 150 ms after the announced cut: learned %.3f, paused to %v; want %.3f and the Retry-After",
			s.LearnedRate, s.PausedUntil.Sub(t0), announced)
	}
	s.Hint(at.Add(100*time.Millisecond), policy(40))
	if s.LearnedRate != announced {
		t.Fatalf("learned %.3f on a raise announced 100 ms after a refusal, want it held at %.3f", s.LearnedRate, announced)
	}
	late := t0.Add(40*time.Millisecond + CutHoldoff + time.Millisecond)
	s.End(late, 1)
	s.Throttled(late, time.Time{}, 1)
	if s.LearnedRate >= announced {
		t.Fatalf("refused past CutHoldoff of the announced cut: learned %.3f, want under %.3f", s.LearnedRate, announced)
	}
}

// bucketModel is a token bucket of rate(now) per second and the given
// burst, answering a refusal with no Retry-After (a 429 with no headers).
type bucketModel struct {
	rate     func(time.Time) float64
	burst    float64
	tokens   float64
	at       time.Time
	accepted []time.Time
}

func (m *bucketModel) answer(now time.Time) (bool, time.Time) {
	if m.at.IsZero() {
		m.tokens = m.burst
	} else {
		m.tokens = math.Min(m.burst, m.tokens+now.Sub(m.at).Seconds()*m.rate(now))
	}
	m.at = now
	if m.tokens < 1 {
		return false, time.Time{}
	}
	m.tokens--
	m.accepted = append(m.accepted, now)
	return true, time.Time{}
}

// TestBucketDropMeasuredBetweenRefusals drives adapt's key (ceiling 120,
// burst 10) against a bucket of burst 10 that drops silently from 100/s to
// 30/s. The second refusal signal, with no pause since the first, reads
// the limit from what the bucket accepted between the two (its refill:
// empty at both), not from the trailing window, which still counts the
// old 100/s: the key learns about 30 within a second of the drop
// instead of halving to ~22 and probing back past 30.
func TestBucketDropMeasuredBetweenRefusals(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 120, Burst: 10, Adaptive: true})
	drop := t0.Add(8 * time.Second)
	up := &bucketModel{burst: 10, rate: func(now time.Time) float64 {
		if now.Before(drop) {
			return 100
		}
		return 30
	}}
	drive(&s, up, t0, drop.Sub(t0))
	refused := drive(&s, up, drop, 1500*time.Millisecond)
	// Near the refill (a halving per signal at most, so two signals
	// after the first): 25 to 31.5, not the ~22 the trailing window's
	// halvings reached.
	if s.LearnedRate < 25 || s.LearnedRate > 31.5 {
		t.Fatalf("learned %.1f/s 1.5 s after a bucket dropped from 100 to 30/s, want about 30 (%d refusals)", s.LearnedRate, len(refused))
	}
	more := drive(&s, up, drop.Add(1500*time.Millisecond), 5*time.Second)
	if s.LearnedRate < 25 || len(more) > 4 {
		t.Fatalf("5 s later: learned %.1f/s after %d refusals, want >= 25 and at most 4 refusals", s.LearnedRate, len(more))
	}
}

// TestSilentDropAfterHeldGap: a key at its ceiling whose own window held
// it for half of the second before a silent drop's refusal (on a loaded
// machine, answers written late in one batch keep the window full with
// jobs waiting) sent 17 starts of its 29.1 in that second, all it could.
// Read over the part of the second it was sending in (busy), the refusal
// is the silent drop it is, and halves the key, as TestSilentDropHalves;
// read over the whole second it looked like a key that had not sent its
// rate and was trimmed (session 21, s21h2). A key that sent the same 17
// evenly over the whole second did not send its rate, and is trimmed.
func TestSilentDropAfterHeldGap(t *testing.T) {
	t.Parallel()
	run := func(gap bool) State {
		s := NewState(AdaptiveUpstreamWindow("k", 30, time.Second, 0, DefaultHeadroom))
		step := time.Duration(float64(time.Second) / s.Rate)
		now := t0
		for now.Before(t0.Add(4 * time.Second)) { // 4 s at the ceiling, all accepted
			s.Take(now, 1)
			s.End(now.Add(20*time.Millisecond), 1)
			s.Succeeded(now.Add(20 * time.Millisecond))
			now = now.Add(step)
		}
		next, every := t0.Add(4*time.Second+500*time.Millisecond), step
		if !gap {
			next, every = t0.Add(4*time.Second+30*time.Millisecond), time.Second/17
		}
		for range 16 {
			s.Take(next, 1)
			s.End(next.Add(20*time.Millisecond), 1)
			s.Succeeded(next.Add(20 * time.Millisecond))
			next = next.Add(every)
		}
		s.Take(next, 1) // the 17th, refused
		at := next.Add(20 * time.Millisecond)
		s.End(at, 1)
		s.RateLimited(at, at.Add(time.Second), 1)
		return s
	}
	if s := run(true); s.LearnedRate > 0.55*s.Rate {
		t.Fatalf("held half a second, then refused after 17 starts at its pace: learned %.1f of %.1f, want about half", s.LearnedRate, s.Rate)
	}
	if s := run(false); s.LearnedRate < 0.7*s.Rate {
		t.Fatalf("17 starts spread over the second, then refused: learned %.1f of %.1f, want a trim, not a halving", s.LearnedRate, s.Rate)
	}
}
