package admission

import (
	"testing"
	"time"
)

// evenKey returns an adaptive key declared 20/s (as a subscriber's) that
// started one request at a time at its learned rate's spacing from t0 for
// run, each accepted, and the time of its last start. A share below 1
// sets its learned rate to that share of its ceiling first.
func evenKey(t *testing.T, t0 time.Time, run time.Duration, share float64) (State, time.Time) {
	t.Helper()
	s := NewState(AdaptiveUpstreamWindow("k", 20, time.Second, 20, DefaultHeadroom))
	s.LearnedRate *= share
	if s.burst() != 2 {
		t.Fatalf("burst %v before any refusal, want 2", s.burst())
	}
	now, last := t0, t0
	for now.Before(t0.Add(run)) {
		if ok, _ := s.Check(now, 1); ok {
			s.Take(now, 1)
			s.End(now.Add(time.Millisecond), 1)
			if share == 1 { // below, it would probe back to its ceiling
				s.Succeeded(now.Add(time.Millisecond))
			}
			last = now
		}
		now = now.Add(time.Millisecond)
	}
	return s, last
}

// burstPair starts, after the key idled from last (its bucket refilled to
// its burst), one request that the upstream accepts and, gap after it,
// one it refuses with no retry delay, answered 30 ms later with nothing
// else in flight unless inFlight; it returns the refused start's time.
func burstPair(t *testing.T, s *State, last time.Time, gap time.Duration, inFlight bool) time.Time {
	t.Helper()
	a := last.Add(150 * time.Millisecond)
	s.Take(a, 1)
	s.End(a.Add(10*time.Millisecond), 1)
	s.Succeeded(a.Add(10 * time.Millisecond))
	b := a.Add(gap)
	if ok, _ := s.Check(b, 1); !ok {
		t.Fatalf("a burst of %v refused a start %v after the last", s.burst(), gap)
	}
	if inFlight {
		s.Take(b.Add(-time.Millisecond), 1)
	}
	s.Take(b, 1)
	s.End(b.Add(30*time.Millisecond), 1)
	s.Throttled(b.Add(30*time.Millisecond), b.Add(time.Second), 1)
	return b
}

// A refusal of a start that came closer to the one before than the key's
// rate allows, with nothing else in flight, at the ceiling, early in a
// run: the burst was refused (an upstream bucket with a burst of one), so
// the key keeps its rate and paces evenly; a refusal at even pacing is a
// rate refusal again and cuts as before. cap1-bucket-20 in the bench
// (TestVirtualCapOneShapes) is the receiver this reads.
func TestEvenRefusalKeepsRate(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s, last := evenKey(t, t0, time.Second, 1)
	ceiling := s.LearnedRate
	at := burstPair(t, &s, last, 20*time.Millisecond, false) // under the 51.5 ms spacing: the burst
	if s.LearnedRate != ceiling {
		t.Fatalf("learned rate %.2f after a refused burst, want %.2f kept", s.LearnedRate, ceiling)
	}
	if s.burst() != 1 || s.evenUntil == 0 {
		t.Fatalf("burst %v after a refused burst, want 1 (even)", s.burst())
	}
	// Through MarshalShapes, as through a store.
	var back State
	back.Config = s.Config
	if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil || back.evenUntil != s.evenUntil {
		t.Fatalf("evenUntil %d -> %d (%v) through MarshalShapes", s.evenUntil, back.evenUntil, err)
	}
	// Even: two starts at least one unit apart, however long the key idled.
	now := at.Add(300 * time.Millisecond)
	if ok, _ := s.Check(now, 1); !ok {
		t.Fatalf("even key refused its next start after idling")
	}
	s.Take(now, 1)
	s.End(now.Add(30*time.Millisecond), 1)
	unit := time.Duration(s.unitNS())
	if ok, _ := s.Check(now.Add(40*time.Millisecond), 1); ok {
		t.Fatalf("even key admitted a start 40 ms after the last (unit %v)", unit)
	}
	next := now.Add(unit)
	if ok, _ := s.Check(next, 1); !ok {
		t.Fatalf("even key refused a start one unit (%v) after the last", unit)
	}
	// A refusal of that evenly paced start is a rate refusal: it cuts.
	s.Take(next, 1)
	s.End(next.Add(30*time.Millisecond), 1)
	s.Throttled(next.Add(30*time.Millisecond), next.Add(time.Second), 1)
	if s.LearnedRate >= ceiling {
		t.Fatalf("learned rate %.2f after a refusal at even pacing, want a cut from %.2f", s.LearnedRate, ceiling)
	}
	// Even pacing runs out EvenHold after it was set, at the next start.
	s.Take(time.Unix(0, s.evenUntil), 1)
	if s.evenUntil != 0 || s.burst() != 2 {
		t.Fatalf("even pacing did not run out: evenUntil %d, burst %v", s.evenUntil, s.burst())
	}
}

// The refusals even pacing does not read as the burst: one with another
// start in flight (which of them was refused is not known), one after
// SilentRun windows of clean bursts (the limit moved: a silent drop), one
// below the ceiling (the rate is itself a guess) and one of a start paced
// at the rate. Each cuts the learned rate as before.
func TestEvenRefusalNotTheBurst(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name     string
		run, gap time.Duration
		inFlight bool
		below    bool
	}{
		{name: "in flight", run: time.Second, gap: 20 * time.Millisecond, inFlight: true},
		{name: "silent run", run: 3 * time.Second, gap: 20 * time.Millisecond},
		{name: "below ceiling", run: time.Second, gap: 20 * time.Millisecond, below: true},
		{name: "paced", run: time.Second, gap: 60 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			share := 1.0
			if tc.below {
				share = 0.9
			}
			s, last := evenKey(t, t0, tc.run, share)
			before := s.LearnedRate
			burstPair(t, &s, last, tc.gap, tc.inFlight)
			if s.evenUntil != 0 || s.burst() == 1 {
				t.Fatalf("paces evenly (burst %v)", s.burst())
			}
			if s.LearnedRate >= before {
				t.Fatalf("learned rate %.2f, want a cut from %.2f", s.LearnedRate, before)
			}
		})
	}
}

// lateEvenStarts drives an adaptive key that paces evenly (a refused
// burst at its ceiling, as in TestEvenRefusalKeepsRate) through n starts,
// each taken the next of lates after the instant the key admitted it, as
// a real fetch loop wakes, and answered 20 ms later. It returns the
// starts.
func lateEvenStarts(t *testing.T, n int, lates []time.Duration) (*State, []time.Time) {
	t.Helper()
	t0 := time.Unix(1_700_000_000, 0)
	s, last := evenKey(t, t0, time.Second, 1)
	at := burstPair(t, &s, last, 20*time.Millisecond, false)
	if s.burst() != 1 {
		t.Fatalf("burst %v after a refused burst, want 1 (even)", s.burst())
	}
	now := at.Add(time.Second) // the refusal's pause
	var starts []time.Time
	for i := range n {
		ok, next := s.Check(now, 1)
		if !ok {
			now = next
			if ok, _ = s.Check(now, 1); !ok {
				t.Fatalf("start %d: not admitted at the instant it named", i)
			}
		}
		now = now.Add(lates[i%len(lates)])
		s.Take(now, 1)
		s.End(now.Add(20*time.Millisecond), 1)
		s.Succeeded(now.Add(20 * time.Millisecond))
		starts = append(starts, now)
	}
	if s.burst() != 1 {
		t.Fatalf("even pacing ran out within the run (burst %v)", s.burst())
	}
	return &s, starts
}

// TestEvenPacingKeepsWholeGapsWhenLate drives an evenly pacing adaptive
// key whose starts come late, as TestStrictKeepsItsGridWhenLate does a
// strict key, and pins that it does not catch up: every start follows the
// one before by at least a whole spacing of its learned rate. It loses the
// late time (17.4/s of its 19.4 here, as a strict key did before
// StrictCatchUp), but even pacing is the key's reading that the upstream
// counts the gap between arrivals (a bucket with a burst of one), and such
// an upstream loses a late arrival's time the same way: a start paced from
// a late one's instant reaches it early against that late arrival. Modelled
// as a 20/s bucket with a burst of one behind uniform transit jitter, the
// strict rule (half a spacing of catch-up) had 70-74 of these 150 starts
// refused, and even a catch-up of the learned rate's whole margin (3 %)
// 14 at 1 ms of jitter against none without it (docs/benchmarks.md,
// "Session 21 (s21r2)").
func TestEvenPacingKeepsWholeGapsWhenLate(t *testing.T) {
	t.Parallel()
	lates := []time.Duration{3 * time.Millisecond, 0, 7 * time.Millisecond, 1 * time.Millisecond, 20 * time.Millisecond, 5 * time.Millisecond}
	s, starts := lateEvenStarts(t, 150, lates)
	unit := time.Duration(s.unitNS())
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < unit {
			t.Fatalf("start %d only %v after the one before, want a whole spacing (%v)", i, gap, unit)
		}
	}
	span := starts[len(starts)-1].Sub(starts[0])
	t.Logf("achieved %.2f/s of its learned %.2f/s with starts late by 0-20 ms", float64(len(starts)-1)/span.Seconds(), s.LearnedRate)
}
