package admission

import (
	"testing"
	"time"
)

// fillRun drives a key told 30/s (a sliding window of 30 and its ceiling)
// against fixed windows of 30 that fall to 15 at 4.3 s, answering each
// start rtt after it (at once when 0), the refusal with a retry pause
// after it. It returns the starts and the pause's end.
func fillRun(t *testing.T, rtt, pause time.Duration) ([]time.Time, time.Time) {
	t.Helper()
	s := NewState(AdaptiveUpstreamWindow("k", 30, time.Second, 30, DefaultHeadroom))
	drop := t0.Add(4*time.Second + 300*time.Millisecond)
	up := &fixedModel{limit: func(now time.Time) int {
		if now.Before(drop) {
			return 30
		}
		return 15
	}}
	type answer struct {
		at time.Time
		ok bool
	}
	var (
		starts  []time.Time
		pending []answer
		until   time.Time
	)
	land := func(now time.Time, a answer) {
		s.End(now, 1)
		if a.ok {
			s.Succeeded(now)
			return
		}
		if !until.IsZero() {
			t.Fatalf("a second refusal at %v", now.Sub(t0))
		}
		until = now.Add(pause)
		s.RateLimited(now, until, 1)
	}
	for now := t0; now.Before(t0.Add(8 * time.Second)); now = now.Add(time.Millisecond) {
		kept := pending[:0]
		for _, a := range pending {
			if a.at.After(now) {
				kept = append(kept, a)
				continue
			}
			land(now, a)
		}
		pending = kept
		for { // every start the key admits at now
			if ok, _ := s.Check(now, 1); !ok {
				break
			}
			s.Take(now, 1)
			starts = append(starts, now)
			ok, _ := up.answer(now)
			if rtt == 0 {
				land(now, answer{at: now, ok: ok})
				continue
			}
			pending = append(pending, answer{at: now.Add(rtt), ok: ok})
		}
	}
	if until.IsZero() || s.LearnedRate >= 29 {
		t.Fatalf("no silent drop learned (learned %v)", s.LearnedRate)
	}
	return starts, until
}

// TestFillAfterSilentPause checks the window after a silent drop's pause
// (fill.go): the key starts its learned window's worth (15) from the
// pause's end instead of pacing it out from an empty bucket, and never
// more than that in any second after; with answers a round trip later it
// opens that worth as they come back accepted (2, then 2 more per answer),
// not all at once; a pause shorter than the window leaves the bucket empty,
// as before.
func TestFillAfterSilentPause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rtt, pause time.Duration
		within     time.Duration
		want       func(n int) bool
	}{
		{"whole-second pause", 0, time.Second, 10 * time.Millisecond, func(n int) bool { return n >= 14 }},
		{"round trip, first bunch", 30 * time.Millisecond, time.Second, 10 * time.Millisecond, func(n int) bool { return n == FillGrowth }},
		{"round trip, whole window", 30 * time.Millisecond, time.Second, 150 * time.Millisecond, func(n int) bool { return n >= 14 }},
		{"shorter pause", 0, 500 * time.Millisecond, 10 * time.Millisecond, func(n int) bool { return n <= 2 }},
	} {
		starts, until := fillRun(t, tc.rtt, tc.pause)
		if n := countIn(starts, until, until.Add(tc.within)); !tc.want(n) {
			t.Errorf("%s: %d starts in the %v after the pause", tc.name, n, tc.within)
		}
		for i := range starts {
			if starts[i].Before(until) {
				continue
			}
			if n := countIn(starts, starts[i], starts[i].Add(time.Second)); n > 15 {
				t.Fatalf("%s: %d starts in the second from %v, learned window 15", tc.name, n, starts[i].Sub(t0))
			}
		}
	}
}

// TestFillSurvivesStore checks that a key filling the window after a
// silent drop's pause keeps filling after its state went through the
// store (MarshalShapes, UnmarshalShapes), as every lease and finish does.
func TestFillSurvivesStore(t *testing.T) {
	t.Parallel()
	s := NewState(AdaptiveUpstreamWindow("k", 30, time.Second, 30, DefaultHeadroom))
	s.Take(t0, 1) // a key that fills has started and been cut: it has logs
	s.capFlags |= fillGrowing | raisedCut
	back := NewState(s.Config)
	if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil {
		t.Fatal(err)
	}
	if back.capFlags&(fillGrowing|raisedCut) != fillGrowing|raisedCut {
		t.Fatalf("flags after the store: %b, want the fill's and the raised cut's", back.capFlags)
	}
}
