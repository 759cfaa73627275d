package admission

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// TestAnnouncedCredit: an adaptive key whose upstream announces its
// policy and a remaining quota spends that remaining at once, up to its
// window, instead of pacing it evenly (rising's rise-sliding ran 29.1/s
// evenly against an upstream that takes each window's 30 at once). Only
// an upstream that has shown it takes its whole quota at once (a window)
// gives credit: one whose remaining never comes near its quota (a bucket
// with a small burst, announcing its rate over a second) does not, and a
// refusal takes the credit away.
func TestAnnouncedCredit(t *testing.T) {
	t.Parallel()
	c := AdaptiveUpstreamWindow("k", 30, time.Second, 0, DefaultHeadroom)
	// burst counts the starts the key admits at at, one after another.
	burst := func(s *State, at time.Time) int {
		n := 0
		for ; n < 100; n++ {
			if ok, _ := s.Check(at, 1); !ok {
				break
			}
			s.Take(at, 1)
		}
		return n
	}
	// answered is one start at t0 answered at 20 ms with h.
	answered := func(h job.Hint) (*State, time.Time) {
		s := NewState(c)
		s.Take(t0, 1)
		at := t0.Add(20 * time.Millisecond)
		s.End(at, 1)
		s.Succeeded(at)
		s.Hint(at, h)
		return &s, at
	}

	s, at := answered(job.Hint{Limit: 30, Remaining: 29, Reset: time.Second, Window: time.Second})
	if n := burst(s, at); n != 29 {
		t.Fatalf("admitted %d at once on a remaining of 29 of 30, want 29 (the window's rest)", n)
	}
	s.End(at.Add(20*time.Millisecond), 1)
	s.Hint(at.Add(20*time.Millisecond), job.Hint{Limit: 30, Remaining: 0, Reset: time.Second, Window: time.Second})
	if ok, _ := s.Check(at.Add(time.Second/2), 1); ok {
		t.Fatalf("admitted a start half a second into a full window")
	}

	// A bucket of burst 5 announcing 15 per second: never credit.
	b, at := answered(job.Hint{Limit: 15, Remaining: 4, Reset: time.Second, Window: time.Second})
	if n := burst(b, at); n > 2 {
		t.Fatalf("admitted %d at once on a remaining of 4 of 15, want the key's own burst (2)", n)
	}

	// A refusal spends the credit.
	r, at := answered(job.Hint{Limit: 30, Remaining: 29, Reset: time.Second, Window: time.Second})
	r.Take(at, 1)
	r.End(at.Add(20*time.Millisecond), 1)
	r.Throttled(at.Add(20*time.Millisecond), time.Time{}, 1)
	if n := burst(r, at.Add(20*time.Millisecond)); n > 2 {
		t.Fatalf("admitted %d at once after a refusal, want the key's own pacing", n)
	}
}
