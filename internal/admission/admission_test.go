package admission

import (
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
			if ok, _ := s.Check(now, 1); ok {
				s.Take(now, 1)
				s.Release()
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

func TestAdaptive(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "k", Rate: 100, Adaptive: true})
	s.RateLimited(t0, t0.Add(time.Second))
	if s.LearnedRate != 70 {
		t.Fatalf("learned rate after a 429 = %v, want 70", s.LearnedRate)
	}
	s.RateLimited(t0.Add(100*time.Millisecond), t0.Add(time.Second))
	if s.LearnedRate != 70 {
		t.Fatal("a second 429 within the hold-off decreased again")
	}
	for range 70 { // one second of traffic at 70/s
		s.Succeeded()
	}
	// The larger of 5% of the ceiling and 20% of the current rate per
	// second: about 70 * 1.2 (compounding within the second, a little more).
	if s.LearnedRate < 83 || s.LearnedRate > 86 {
		t.Fatalf("after a second of successes the rate is %v, want about 70 + 20%%", s.LearnedRate)
	}
	low := NewState(Config{Name: "low", Rate: 100, Adaptive: true, MinRate: 1})
	low.LearnedRate = 10
	for range 10 { // one second at 10/s: the ceiling's 5% (5/s) dominates 20% of 10
		low.Succeeded()
	}
	if low.LearnedRate < 14 || low.LearnedRate > 15 { // a little under 15: the rate grows within the second
		t.Fatalf("a low rate grew to %v in a second, want 10 + 5%% of 100", low.LearnedRate)
	}
	for range 10000 {
		s.Succeeded()
	}
	if s.LearnedRate != 100 {
		t.Fatalf("learned rate exceeded or missed the ceiling: %v", s.LearnedRate)
	}
	for i := range 100 {
		s.RateLimited(t0.Add(time.Duration(i)*time.Second), t0)
	}
	if s.LearnedRate != s.MinRate {
		t.Fatalf("learned rate %v fell below or missed the floor %v", s.LearnedRate, s.MinRate)
	}
}

// TestThrottled checks a 429 without a retry delay: an adaptive key slows
// down and empties its bucket but does not pause; a fixed-rate key pauses
// for the job's backoff.
func TestThrottled(t *testing.T) {
	t.Parallel()
	a := NewState(Config{Name: "a", Rate: 100, Burst: 10, Adaptive: true})
	a.Throttled(t0, t0.Add(4*time.Second))
	if !a.PausedUntil.IsZero() || a.LearnedRate != 70 {
		t.Fatalf("adaptive: paused until %v, learned %v; want no pause, 70", a.PausedUntil, a.LearnedRate)
	}
	if got := a.Tokens(t0); got > 0.01 {
		t.Fatalf("adaptive: %v tokens left after a 429, want an empty bucket", got)
	}
	if ok, next := a.Check(t0.Add(20*time.Millisecond), 1); !ok && next.Sub(t0) > 20*time.Millisecond {
		t.Fatalf("adaptive: next start at +%v, want within one interval at 70/s", next.Sub(t0))
	}
	f := NewState(Config{Name: "f", Rate: 100, Burst: 10})
	f.Throttled(t0, t0.Add(4*time.Second))
	if !f.PausedUntil.Equal(t0.Add(4 * time.Second)) {
		t.Fatalf("fixed: paused until %v, want +4s", f.PausedUntil)
	}
}

func TestUpstream(t *testing.T) {
	t.Parallel()
	c := Upstream("u", 100, 25, DefaultHeadroom)
	if c.Rate != 97 || c.Burst != 13 || c.Name != "u" {
		t.Fatalf("Upstream(100/s, burst 25) = %+v, want 97/s burst 13", c)
	}
	if c := Upstream("u", 2, 1, 0.03); c.Burst != 1 {
		t.Fatalf("a burst of 1 must stay 1, got %v", c.Burst)
	}
	if c := Upstream("u", 0, 0, 0.03); c.Rate != 0 || c.Burst != 0 {
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
