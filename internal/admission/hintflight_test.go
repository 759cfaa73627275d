package admission

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// TestHintCountsStartsInFlight: an answer naming a remaining of one, with
// two of an adaptive key's later starts still in flight, admits nothing
// more at once (those starts may use that one); a key with no start in
// flight may spend the one at once, as before.
func TestHintCountsStartsInFlight(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	hint := job.Hint{Remaining: 1, Reset: time.Second}
	for _, inFlight := range []int{0, 2} {
		s := NewState(AdaptiveUpstreamWindow("k", 40, time.Second, 0, DefaultHeadroom))
		for range inFlight + 1 {
			s.Take(t0, 1)
		}
		at := t0.Add(30 * time.Millisecond)
		s.End(at, 1) // the first start's answer
		s.Succeeded(at)
		s.Hint(at, hint)
		ok, _ := s.Check(at.Add(time.Millisecond), 1) // past rounding at the boundary
		if want := inFlight == 0; ok != want {
			t.Errorf("remaining 1 with %d starts in flight: admitted %v at once, want %v", inFlight, ok, want)
		}
	}
}
