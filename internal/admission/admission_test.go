package admission

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// TestBucketBound is invariant 6 as a property: whatever the arrival
// pattern, admitted starts in any window t never exceed rate*t + burst.
func TestBucketBound(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		rate := 1 + rng.Float64()*100
		burst := float64(1 + rng.IntN(10))
		s := NewState(Config{Name: "k", Rate: rate, Burst: burst})
		now := t0
		var starts []time.Time
		for range 2000 {
			now = now.Add(time.Duration(rng.ExpFloat64() * float64(time.Second) / (rate * 10)))
			if started(&s, now) {
				starts = append(starts, now)
			}
		}
		for i := range starts {
			for k := i; k < len(starts); k++ {
				w := starts[k].Sub(starts[i]).Seconds()
				if n := float64(k - i + 1); n > rate*w+burst+1e-6 {
					t.Fatalf("trial %d: %v starts in %.3fs > rate*t+burst = %.3f (rate %.2f burst %v)", trial, n, w, rate*w+burst, rate, burst)
				}
			}
		}
		if elapsed := now.Sub(t0).Seconds(); float64(len(starts)) < rate*elapsed*0.85 {
			t.Fatalf("trial %d: %d starts in %.1fs at %.1f/s: the bucket under-admits", trial, len(starts), elapsed, rate)
		}
	}
}

func TestCheckRefusals(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 1, Burst: 1, Concurrency: 1})
	if ok, _ := s.Check(t0, 1); !ok {
		t.Fatal("a full bucket refused")
	}
	s.Take(t0, 1)
	if ok, next := s.Check(t0.Add(2*time.Second), 1); ok || next != t0.Add(2*time.Second).Add(CapRetry) {
		t.Fatalf("concurrency cap: ok=%v next=%v", ok, next)
	}
	s.Release()
	if ok, next := s.Check(t0.Add(500*time.Millisecond), 1); ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("empty bucket: ok=%v next=%v, want the next token at +1s", ok, next)
	}
	s.Pause(t0.Add(time.Minute))
	if ok, next := s.Check(t0.Add(30*time.Second), 1); ok || !next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("paused: ok=%v next=%v", ok, next)
	}
	s.Pause(t0.Add(time.Second)) // a shorter pause never shortens a longer one
	if !s.PausedUntil.Equal(t0.Add(time.Minute)) {
		t.Fatal("a shorter pause shortened the current one")
	}
}

// started reports whether s admits a start of cost 1 at now, and if it
// does takes it and ends it at once: a request that takes no time.
func started(s *State, now time.Time) bool {
	if ok, _ := s.Check(now, 1); !ok {
		return false
	}
	s.Take(now, 1)
	s.Release()
	return true
}

// inLastSecond is how many of the ascending times in accepted fall in the
// second before now: what a sliding-window upstream counts.
func inLastSecond(accepted []time.Time, now time.Time) int {
	in := 0
	for i := len(accepted) - 1; i >= 0 && now.Sub(accepted[i]) < time.Second; i-- {
		in++
	}
	return in
}

// TestDiscoverySetsLimitFromAccepted checks limit discovery: a key told
// 100/s whose upstream really allows 50 in any second learns about 50 from
// what the upstream accepted in the trailing window, within two refusal
// signals (about a second), not by x0.7 cuts after a dozen 429s, and then
// stays there with few refusals.
func TestDiscoverySetsLimitFromAccepted(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 100, Burst: 10, Adaptive: true})
	var accepted []time.Time
	now := t0
	learnedAt := time.Duration(-1)
	refusals := 0
	for step := range 5000 { // 5 s in 1 ms steps
		now = now.Add(time.Millisecond)
		if !started(&s, now) {
			continue
		}
		if inLastSecond(accepted, now) >= 50 {
			if step >= 2000 {
				refusals++ // after the learning second and the drain
			}
			s.Throttled(now, now.Add(4*time.Second), 1)
			if !s.PausedUntil.IsZero() {
				t.Fatalf("an adaptive key paused until %v on a 429 without Retry-After; its learned limit paces it", s.PausedUntil)
			}
			if learnedAt < 0 && s.LearnedRate <= 50 {
				learnedAt = time.Duration(step) * time.Millisecond
			}
			continue
		}
		accepted = append(accepted, now)
		s.Succeeded(now)
	}
	if learnedAt < 0 || learnedAt > 1500*time.Millisecond {
		t.Fatalf("learned a 50/s limit after %v (learned rate now %v), want within 1.5 s", learnedAt, s.LearnedRate)
	}
	if s.LearnedRate < 40 || s.LearnedRate > 60 {
		t.Fatalf("learned rate %v at the end, want about 50", s.LearnedRate)
	}
	if refusals > 5 {
		t.Fatalf("%d refusals in the 3 s after learning, want only the odd probe", refusals)
	}
}

// TestDiscoveryHalvedLimit drives a key against a simulated sliding
// window of 40/s that halves to 20/s: the key learns the new limit within
// the second of the change and converges with few refusals; then the limit
// rises to 40 again and is found within seconds.
func TestDiscoveryHalvedLimit(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 40, Burst: 1, Adaptive: true})
	var accepted []time.Time
	limit := 40
	now := t0
	refusals := map[int]int{}
	for step := range 30_000 { // 30 s in 1 ms steps
		now = now.Add(time.Millisecond)
		sec := step / 1000
		switch sec {
		case 5:
			limit = 20
		case 15:
			limit = 40
		}
		if !started(&s, now) {
			continue
		}
		if inLastSecond(accepted, now) >= limit {
			refusals[sec]++
			s.Throttled(now, now.Add(time.Second), 1)
			continue
		}
		accepted = append(accepted, now)
		s.Succeeded(now)
	}
	t.Logf("refusals per second: %v", refusals)
	after := 0
	for sec := 5; sec < 15; sec++ {
		after += refusals[sec]
	}
	// The trailing window straddles the change: the first second pays for
	// it (the upstream's window is full of starts accepted at 40/s); then
	// only the bounded probes upward are refused.
	if refusals[5] > 20 {
		t.Fatalf("%d refusals in the second the limit halved (%v)", refusals[5], refusals)
	}
	if r := after - refusals[5]; r > 8 {
		t.Fatalf("%d refusals in the 9 s after the second of the change (per second %v), want a few probes", r, refusals)
	}
	count := func(from, to int) int {
		n := 0
		for _, a := range accepted {
			if d := a.Sub(t0); d >= time.Duration(from)*time.Second && d < time.Duration(to)*time.Second {
				n++
			}
		}
		return n
	}
	if got := count(10, 15); got < 5*20*80/100 {
		t.Fatalf("%d accepted in 5 s at a 20/s limit, want at least 80%%", got)
	}
	if got := count(20, 30); got < 10*40*80/100 {
		t.Fatalf("%d accepted in the 10 s from 5 s after the limit rose back to 40/s, want at least 80%% (refusals %v)", got, refusals)
	}
}

// TestThrottled checks a 429 without a retry delay: an adaptive key slows
// down and empties its bucket but does not pause; a fixed-rate key pauses
// for the job's backoff. A refusal with a retry delay pauses to the
// nanosecond given.
func TestThrottled(t *testing.T) {
	t.Parallel()
	a := NewState(Config{Name: "a", Rate: 100, Burst: 10, Adaptive: true})
	a.Throttled(t0, t0.Add(4*time.Second), 1)
	if !a.PausedUntil.IsZero() || a.LearnedRate != 100*NoEstimateCut {
		t.Fatalf("adaptive: paused until %v, learned %v; want no pause and the rate halved (a first refusal with no history is no estimate)", a.PausedUntil, a.LearnedRate)
	}
	if got := a.Tokens(t0); got > 0.01 {
		t.Fatalf("adaptive: %v tokens left after a 429, want an empty bucket", got)
	}
	if ok, next := a.Check(t0.Add(25*time.Millisecond), 1); !ok && next.Sub(t0) > 25*time.Millisecond {
		t.Fatalf("adaptive: next start at +%v, want within one interval at 97/s", next.Sub(t0))
	}
	f := NewState(Config{Name: "f", Rate: 100, Burst: 10})
	f.Throttled(t0, t0.Add(4*time.Second), 1)
	if !f.PausedUntil.Equal(t0.Add(4 * time.Second)) {
		t.Fatalf("fixed: paused until %v, want +4s", f.PausedUntil)
	}
	r := NewState(Config{Name: "r", Rate: 100, Burst: 10, Adaptive: true})
	until := t0.Add(1234567 * time.Microsecond)
	r.RateLimited(t0, until, 1)
	if ok, next := r.Check(t0.Add(time.Second), 1); ok || !next.Equal(until) {
		t.Fatalf("Retry-After 1.234567 s: ok=%v next=%v, want refused until exactly +1.234567s", ok, next.Sub(t0))
	}
}

func TestUpstream(t *testing.T) {
	t.Parallel()
	c := Upstream("u", 100, 25, DefaultHeadroom)
	if c.Rate != 97 || c.Burst != 13 || c.Name != "u" {
		t.Fatalf("Upstream(100/s, burst 25) = %+v, want 97/s burst 13", c)
	}
	// Exact windows: a window counts a start until its finish (End), so
	// it needs no jitter guard (it had 3%, at least 20 ms, before).
	if len(c.Windows) != 1 || c.Windows[0] != (Window{Limit: 100, Period: time.Second}) {
		t.Fatalf("Upstream(100/s) windows = %+v, want 100 per 1 s", c.Windows)
	}
	if c := Upstream("u", 0.5, 1, DefaultHeadroom); len(c.Windows) != 1 || c.Windows[0].Limit != 1 || c.Windows[0].Period != 2*time.Second {
		t.Fatalf("Upstream(0.5/s) windows = %+v, want 1 per 2 s", c.Windows)
	}
	if c := UpstreamBucket("u", 100, 25, DefaultHeadroom); c.Rate != 97 || c.Burst != 13 || len(c.Windows) != 0 {
		t.Fatalf("UpstreamBucket = %+v", c)
	}
	w := UpstreamWindow("u", 20, time.Second, 0, DefaultHeadroom)
	if w.Windows[0] != (Window{Limit: 20, Period: time.Second}) || w.Burst != 10 || w.Rate != 30 || w.Adaptive {
		t.Fatalf("UpstreamWindow(20/1s) = %+v, want a window of 20/s and a bucket spreading at 30/s with a burst of 10", w)
	}
	// A burst below the window is a limit of its own: the bucket stays at
	// the rate less headroom (97% of 20/s).
	if w := UpstreamWindow("u", 20, time.Second, 8, DefaultHeadroom); math.Abs(w.Rate-19.4) > 1e-9 || w.Burst != 4 {
		t.Fatalf("UpstreamWindow(20/1s, burst 8) = %+v, want a bucket of 19.4/s with a burst of 4", w)
	}
	// An adaptive key's rate is its ceiling, never the spreading rate.
	if a := AdaptiveUpstreamWindow("u", 20, time.Second, 0, DefaultHeadroom); math.Abs(a.Rate-19.4) > 1e-9 || a.Burst != 10 || !a.Adaptive || a.Windows[0] != w.Windows[0] {
		t.Fatalf("AdaptiveUpstreamWindow(20/1s) = %+v, want the window, a bucket of 19.4/s with a burst of 10, adaptive", a)
	}
	if c := Upstream("u", 2, 1, 0.03); c.Burst != 1 {
		t.Fatalf("a burst of 1 must stay 1, got %v", c.Burst)
	}
	if c := Upstream("u", 0, 0, 0.03); c.Rate != 0 || c.Burst != 0 || len(c.Windows) != 0 {
		t.Fatalf("an unpaced upstream stays unpaced, got %+v", c)
	}
	if err := Upstream("u", 10, 5, 0.03).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestHint(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 10, Burst: 10})
	s.Hint(t0, job.Hint{Limit: 100, Remaining: 2, Reset: time.Minute})
	if got := s.Tokens(t0); got < 1.99 || got > 2.01 {
		t.Fatalf("tokens after a remaining=2 hint = %v, want 2", got)
	}
	s.Hint(t0, job.Hint{Limit: 100, Remaining: 0, Reset: 5 * time.Second})
	if !s.PausedUntil.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("remaining=0 should pause until the reset, paused until %v", s.PausedUntil)
	}
	s2 := NewState(Config{Name: "k", Rate: 10, Burst: 10})
	s2.Hint(t0, job.Hint{Limit: -1, Remaining: -1})
	if s2.Tokens(t0) != 10 {
		t.Fatal("an unknown hint changed the bucket")
	}
}

func TestReconcile(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "tpm", Rate: 1000, Burst: 1000})
	s.Take(t0, 500)
	s.Reconcile(t0, 500, 100)
	if got := s.Tokens(t0); got < 899 || got > 901 {
		t.Fatalf("tokens after reconciling 500 estimated to 100 used = %v, want 900", got)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []Config{{}, {Name: "k", Rate: -1}, {Name: "k", Concurrency: -1}, {Name: "k", Adaptive: true}, {Name: "k", Rate: 1, MinRate: 2}}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (Config{Name: "k", Rate: 5, Burst: 2, Concurrency: 3, Adaptive: true}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestReconfigureRescalesDebt checks that raising a throttled key's rate
// takes effect at once: the units its bucket owes are repaid at the new
// rate, not the old one.
func TestReconfigureRescalesDebt(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 1, Burst: 1})
	for range 10 { // ten starts at 1/s: the bucket owes ten seconds
		s.Take(t0, 1)
	}
	if ok, next := s.Check(t0, 1); ok || next.Sub(t0) < 9*time.Second {
		t.Fatalf("before: ok=%v next=+%v, want refused for about 10 s", ok, next.Sub(t0))
	}
	s.Reconfigure(Config{Name: "k", Rate: 100, Burst: 1}, t0)
	if ok, next := s.Check(t0.Add(150*time.Millisecond), 1); !ok {
		t.Fatalf("after raising to 100/s: next start at +%v, want within 0.15 s", next.Sub(t0))
	}
	s.Reconfigure(Config{Name: "k", Rate: 100, Burst: 1}, t0) // same rate: unchanged
	u := NewState(Config{Name: "u", Rate: 10})
	u.Reconfigure(Config{Name: "u", Rate: 20}, t0) // a full bucket stays full
	if !u.TAT.IsZero() {
		t.Fatalf("full bucket TAT moved to %v", u.TAT)
	}
}

// TestLearnedBurst checks that an adaptive key bursts at most a tenth of
// a second of its learned rate (at least two units), never its declared
// burst: an upstream whose real limit is below the declared one does not
// take the declared burst either, and refuses it whole. A refusal with no
// retry delay then idles the key about that tenth of a second, not
// Burst/LearnedRate.
func TestLearnedBurst(t *testing.T) {
	t.Parallel()
	burstAt := func(learned float64) int {
		s := NewState(Config{Name: "k", Rate: 400, Burst: 200, Adaptive: true})
		s.LearnedRate = learned
		n := 0
		for n < 1000 { // bounded: a bucket that never refused fails the test, not hangs it
			ok, _ := s.Check(t0, 1)
			if !ok {
				return n
			}
			s.Take(t0, 1)
			s.Release()
			n++
		}
		return n
	}
	for _, c := range []struct {
		learned float64
		want    int
	}{{400, 40}, {100, 10}, {10, 2}, {2, 2}} {
		if got := burstAt(c.learned); got != c.want {
			t.Errorf("learned %v/s (ceiling 400, burst 200): a full bucket admitted %d at once, want %d", c.learned, got, c.want)
		}
	}
	fixed := NewState(Config{Name: "k", Rate: 40, Burst: 20})
	if got := fixed.Tokens(t0); got != 20 {
		t.Fatalf("a fixed key's full bucket holds %v, want its burst of 20", got)
	}
	s := NewState(Config{Name: "k", Rate: 40, Burst: 20, Adaptive: true})
	s.LearnedRate = 2
	now := t0
	s.Throttled(now, now.Add(time.Minute), 1)
	_, next := s.Check(now, 1)
	if wait := next.Sub(now); wait > 2*time.Second {
		t.Fatalf("after a 429 at a learned 2/s of 40/s (burst 20), next start in %v, want about 1/rate (not burst/learned = 10 s)", wait)
	}
}

// TestPerStart: a PerStart key counts starts whatever the job's cost: a
// start of 5000 takes one unit of a bucket of burst 1 and one of a window
// of 2, the cost check sees one unit, and usage is not reconciled on it.
func TestPerStart(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	c := Config{Name: "openai:m", Rate: 1, Burst: 1, Windows: []Window{{Limit: 2, Period: time.Minute}}, PerStart: true}
	if err := c.CheckCost(5000); err != nil {
		t.Fatalf("CheckCost(5000) on a per-start key: %v", err)
	}
	if err := (Config{Name: "tokens", Rate: 1, Burst: 1}).CheckCost(5000); err == nil {
		t.Fatal("CheckCost(5000) on a cost key of burst 1 passed")
	}
	s := NewState(c)
	if ok, _ := s.Check(t0, 5000); !ok {
		t.Fatal("a full per-start key refused its first start")
	}
	s.Take(t0, 5000)
	if ok, next := s.Check(t0, 5000); ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("second start at once: ok %v next %v, want refused until one second later", ok, next)
	}
	tat := s.TAT
	s.Reconcile(t0, 5000, 300)
	if !s.TAT.Equal(tat) {
		t.Errorf("Reconcile moved a per-start key's bucket from %v to %v", tat, s.TAT)
	}
	s.End(t0, 5000)
	s.Take(t0.Add(time.Second), 9000)
	if ok, next := s.Check(t0.Add(2*time.Second), 1); ok || next.Before(t0.Add(time.Minute)) {
		t.Fatalf("third start within the minute: ok %v next %v, want the window of 2 to refuse it", ok, next)
	}
	if got := s.Wait(t0, 3+s.Charge(5000)); got <= 0 {
		t.Errorf("Wait for 4 starts = %v", got)
	}
}
