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
	starts, until, refusals := fillRunOn(t, rtt, pause, &fixedModel{limit: halving})
	if refusals > 1 {
		t.Fatalf("%d refusals, want the drop's one", refusals)
	}
	return starts, until
}

// fillDrop is when fillRun's upstream halves its limit.
var fillDrop = t0.Add(4*time.Second + 300*time.Millisecond)

// halving is fillRun's limit: 30 a second, 15 from fillDrop.
func halving(now time.Time) int {
	if now.Before(fillDrop) {
		return 30
	}
	return 15
}

// fillRunOn is fillRun against up, every refusal paused for pause; it
// returns the starts, the first pause's end and the refusals.
func fillRunOn(t *testing.T, rtt, pause time.Duration, up upstreamModel) ([]time.Time, time.Time, int) {
	t.Helper()
	s := NewState(AdaptiveUpstreamWindow("k", 30, time.Second, 30, DefaultHeadroom))
	refusals := 0
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
		refusals++
		if until.IsZero() {
			until = now.Add(pause)
		}
		s.RateLimited(now, now.Add(pause), 1)
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
	return starts, until, refusals
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

// TestGreedyAfterFullFill checks the starts after a fill the upstream took
// in full (fill.go, fillGreedy): against fixed windows and a sliding log
// that fall from 30 to 15, answered a round trip after each start, the key
// starts the next window's 15 as its sliding window frees the fill's
// slots, a window and a round trip after the fill, instead of pacing them
// over that window from an empty bucket (about 5 in the quarter second
// where it now starts 14 or more), never more than 15 in any second, and
// without another refusal. Against a bucket with a burst of 5, which
// refuses part of the fill, it stays paced: the fill's refusal ended it.
func TestGreedyAfterFullFill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		up   upstreamModel
	}{
		{"fixed", &fixedModel{limit: halving}},
		{"sliding", &slidingModel{limit: halving}},
	} {
		starts, until, refusals := fillRunOn(t, 30*time.Millisecond, time.Second, tc.up)
		if refusals != 1 {
			t.Errorf("%s: %d refusals, want the drop's one", tc.name, refusals)
		}
		from := until.Add(time.Second)
		if n := countIn(starts, from, from.Add(250*time.Millisecond)); n < 14 {
			t.Errorf("%s: %d starts in the quarter second a window after the fill, want its worth (15) again", tc.name, n)
		}
		for i := range starts {
			if !starts[i].Before(until) {
				if n := countIn(starts, starts[i], starts[i].Add(time.Second)); n > 15 {
					t.Fatalf("%s: %d starts in the second from %v, learned window 15", tc.name, n, starts[i].Sub(t0))
				}
			}
		}
	}
	bucket := &bucketModel{burst: 5, rate: func(now time.Time) float64 { return float64(halving(now)) }}
	starts, until, refusals := fillRunOn(t, 30*time.Millisecond, time.Second, bucket)
	if refusals < 2 {
		t.Fatalf("bucket, burst 5: %d refusals, want the fill's too", refusals)
	}
	for i := range starts {
		if starts[i].After(until.Add(2*time.Second)) && countIn(starts, starts[i], starts[i].Add(250*time.Millisecond)) > 6 {
			t.Fatalf("bucket, burst 5: %d starts in the quarter second from %v: a bunch after a fill it refused",
				countIn(starts, starts[i], starts[i].Add(250*time.Millisecond)), starts[i].Sub(t0))
		}
	}
}

// TestGreedyEnds checks what ends the starts past the pacing after a fill
// taken in full: a refusal, a pause, a learned rate above the level the fill
// was made at; and that they survive the store.
func TestGreedyEnds(t *testing.T) {
	t.Parallel()
	greedyKey := func() State {
		s := NewState(AdaptiveUpstreamWindow("k", 30, time.Second, 30, DefaultHeadroom))
		s.Take(t0, 1)
		s.End(t0, 1)
		s.LearnedRate, s.level = 14.55, 14.55
		s.capFlags |= fillGreedy
		s.TAT = t0.Add(time.Second) // a bucket owing a second: only greedy admits
		return s
	}
	now := t0.Add(2 * time.Second)
	s := greedyKey()
	if ok, _ := s.Check(now, 1); !ok {
		t.Fatal("greedy key held by its bucket")
	}
	back := NewState(s.Config)
	back.LearnedRate = s.LearnedRate // a column of its own in both stores
	if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil {
		t.Fatal(err)
	}
	if !back.greedy() {
		t.Fatal("greedy lost through the store")
	}
	for name, end := range map[string]func(s *State){
		"refusal":   func(s *State) { s.RateLimited(now, now.Add(10*time.Millisecond), 1) },
		"throttled": func(s *State) { s.Throttled(now, now, 1) },
		"pause":     func(s *State) { s.Pause(now.Add(time.Millisecond)) },
		"probe":     func(s *State) { s.LearnedRate = 16 },
	} {
		s := greedyKey()
		end(&s)
		if s.greedy() {
			t.Errorf("%s: still greedy", name)
		}
	}
}
