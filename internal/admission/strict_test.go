package admission

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
)

// answerAt is one answer of a virtual upstream, due at at.
type answerAt struct {
	at     time.Time
	status int
	retry  time.Duration // the Retry-After in seconds, 0 for none
}

// Due is when the answer arrives (testkit.Timed).
func (a answerAt) Due() time.Time { return a.at }

// driveVirtual runs s against v with an endless backlog from start for d
// in 1 ms steps, as the store applies outcomes: Take at the lease,
// End then Succeeded / RateLimited (with a Retry-After in seconds) /
// Throttled (a 1 s backoff) when the answer arrives after the route's
// latency (a refusal after 1 ms). It returns the accepted start times and
// the refusals.
func driveVirtual(t *testing.T, s *State, v *upstream.Virtual, start time.Time, d time.Duration) (accepted []time.Time, refused int) {
	t.Helper()
	var q testkit.TimeQueue[answerAt]
	for now := start; now.Before(start.Add(d)); now = now.Add(time.Millisecond) {
		for a, ok := q.PopDue(now); ok; a, ok = q.PopDue(now) {
			s.End(a.at, 1) // as the store's finish path ends a start
			switch {
			case a.status == http.StatusOK:
				s.Succeeded(a.at)
			case a.retry > 0:
				refused++
				s.RateLimited(a.at, a.at.Add(a.retry), 1)
			default:
				refused++
				s.Throttled(a.at, a.at.Add(time.Second), 1)
			}
		}
		for {
			if ok, _ := s.Check(now, 1); !ok {
				break
			}
			s.Take(now, 1)
			status, h, lat := v.Answer(now)
			a := answerAt{at: now.Add(max(lat, time.Millisecond)), status: status}
			if status != http.StatusOK {
				a.at = now.Add(time.Millisecond)
				if ra, err := strconv.Atoi(h.Get("Retry-After")); err == nil {
					a.retry = time.Duration(ra) * time.Second
				}
			} else {
				accepted = append(accepted, now)
			}
			q.Push(a)
		}
	}
	return accepted, refused
}

// TestStrictAgainstSlidingCounter drives a fixed key declared as 20/s
// (UpstreamWindow, as a subscriber's default) against the two-window
// sliding counter of edge proxies at 20, which refuses the burst that
// opens each of the key's windows and admits an even stream only up to
// 19 per window. Read as declared, every window of the key costs a
// refusal and a whole-second pause; once refused, the key paces strictly
// (evenly, one under the limit) and the refusals stop.
func TestStrictAgainstSlidingCounter(t *testing.T) {
	t.Parallel()
	v, err := upstream.NewVirtual(upstream.RouteConfig{Algorithm: upstream.AlgorithmSlidingCounter, Window: time.Second, Limit: 20,
		OverLimit: upstream.OverLimit429Seconds, Latency: upstream.Latency{Fixed: 20 * time.Millisecond, Jitter: 30 * time.Millisecond}}, t0, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := NewState(UpstreamWindow("k", 20, time.Second, 20, DefaultHeadroom))
	accepted, refused := driveVirtual(t, &s, v, t0, 20*time.Second)
	if !s.strict() {
		t.Fatalf("not strict after %d refusals from a sliding counter", refused)
	}
	// The first refusal is a burst's (the requests already sent with it
	// are refused too); after it, none.
	if refused > 10 {
		t.Fatalf("%d refusals in 20 s from a sliding counter of 20, want those of the first burst only", refused)
	}
	if n := countIn(accepted, t0.Add(10*time.Second), t0.Add(20*time.Second)); n < 180 {
		t.Fatalf("%d accepted in the last 10 s, want at least 180 (strict pacing is one under the limit, evenly)", n)
	}
}

// TestStrictOnlyTightens checks strict pacing's bounds: it starts only on
// a refusal of a fixed key with a sliding window (never for an adaptive
// key, nor one with fixed windows only), paces at one under the tightest
// window's limit per period (and StrictJitter) with a burst of one, lasts the window's limit
// times the pause past the pause, is extended by each refusal, survives
// the store's encoding and ends at the first success after it ran out.
func TestStrictOnlyTightens(t *testing.T) {
	t.Parallel()
	s := NewState(UpstreamWindow("k", 20, time.Second, 20, DefaultHeadroom))
	period := s.Windows[0].Period
	if s.strict() || s.rate() != s.Rate || s.burst() != s.Burst {
		t.Fatalf("strict before any refusal: rate %v burst %v", s.rate(), s.burst())
	}
	s.RateLimited(t0, t0.Add(time.Second), 1)
	if !s.strict() {
		t.Fatal("not strict after a refusal")
	}
	if want := 19 / (period + StrictJitter).Seconds(); s.rate() != want || s.burst() != 1 {
		t.Fatalf("strict rate %v burst %v, want %v and 1", s.rate(), s.burst(), want)
	}
	// The pause is 1 s, shorter than the window: a window's worth.
	if want := t0.Add(time.Second).Add(20 * period).UnixNano(); s.strictUntil != want {
		t.Fatalf("strict until %v, want 20 windows after the pause", time.Unix(0, s.strictUntil).Sub(t0))
	}
	// Over any window, strict starts stay at one under the limit.
	var starts []time.Time
	for now := t0.Add(time.Second); now.Before(t0.Add(5 * time.Second)); now = now.Add(time.Millisecond) {
		if ok, _ := s.Check(now, 1); ok {
			s.Take(now, 1)
			s.Release()
			starts = append(starts, now)
		}
	}
	for i := range starts {
		if n := countIn(starts, starts[i], starts[i].Add(period)); n > 19 {
			t.Fatalf("%d strict starts within %v from %v, want at most 19", n, period, starts[i].Sub(t0))
		}
	}
	var back State
	back.Config = s.Config
	if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil || back.strictUntil != s.strictUntil {
		t.Fatalf("round trip: strict until %v, want %v (err %v)", back.strictUntil, s.strictUntil, err)
	}
	later := t0.Add(10 * time.Second)
	s.Throttled(later, later.Add(2*time.Second), 1)
	if want := later.Add(2 * time.Second).Add(40 * time.Second).UnixNano(); s.strictUntil != want {
		t.Fatalf("a second refusal set strict until %v, want %v", time.Unix(0, s.strictUntil).Sub(t0), time.Unix(0, want).Sub(t0))
	}
	s.Succeeded(time.Unix(0, s.strictUntil-1))
	if !s.strict() {
		t.Fatal("strictness ended before it ran out")
	}
	s.Succeeded(time.Unix(0, s.strictUntil))
	if s.strict() || s.rate() != s.Rate || s.burst() != s.Burst {
		t.Fatalf("still strict after it ran out: rate %v burst %v", s.rate(), s.burst())
	}

	for _, c := range []Config{
		func() Config {
			c := UpstreamWindow("a", 20, time.Second, 20, DefaultHeadroom)
			c.Adaptive = true
			return c
		}(),
		UpstreamFixedWindow("f", 20, time.Second, 5, DefaultHeadroom),
		UpstreamBucket("b", 20, 20, DefaultHeadroom),
	} {
		o := NewState(c)
		o.RateLimited(t0, t0.Add(time.Second), 1)
		if o.strict() || o.strictUntil != 0 {
			t.Errorf("%s: strict after a refusal; only a fixed key with a sliding window paces strictly", c.Name)
		}
	}
}

// TestStrictEndsAfterItsPeriod drives a fixed key declared as 20/s in
// simulated time (explicit instants, a start whenever the key admits one,
// each answered 20 ms later with a success): after one refusal it counts
// strictly, and says so through StrictUntil, until the pause plus 20
// windows has passed; then it says it no longer does, and paces at its
// declared shape again (20 starts in a second, which strict counting
// never allows), with no success needed to end it.
func TestStrictEndsAfterItsPeriod(t *testing.T) {
	t.Parallel()
	s := NewState(UpstreamWindow("k", 20, time.Second, 0, DefaultHeadroom))
	s.Take(t0, 1)
	s.End(t0.Add(time.Millisecond), 1)
	s.RateLimited(t0.Add(time.Millisecond), t0.Add(time.Second), 1)
	end := t0.Add(time.Second).Add(20 * time.Second)
	if until, on := s.StrictUntil(t0.Add(2 * time.Second)); !on || !until.Equal(end) {
		t.Fatalf("after a refusal: strict %v until %v, want on until %v", on, until, end)
	}
	var strictStarts, after []time.Time
	var ends []time.Time // answers in flight, in order
	for now := t0.Add(time.Second); now.Before(end.Add(5 * time.Second)); now = now.Add(time.Millisecond) {
		for len(ends) > 0 && !ends[0].After(now) {
			s.End(ends[0], 1)
			s.Succeeded(ends[0])
			ends = ends[1:]
		}
		if ok, _ := s.Check(now, 1); !ok {
			continue
		}
		s.Take(now, 1)
		ends = append(ends, now.Add(20*time.Millisecond))
		_, on := s.StrictUntil(now)
		switch {
		case now.Before(end) && !on:
			t.Fatalf("strict counting off at %v, before it ran out at %v", now.Sub(t0), end.Sub(t0))
		case !now.Before(end) && on:
			t.Fatalf("strict counting still on at %v, after it ran out at %v", now.Sub(t0), end.Sub(t0))
		case now.Before(end):
			strictStarts = append(strictStarts, now)
		default:
			after = append(after, now)
		}
	}
	if n := upstream.MaxInWindow(strictStarts, time.Second); n > 19 {
		t.Fatalf("%d starts within one second while strict, want at most 19", n)
	}
	if n := upstream.MaxInWindow(after, time.Second); n < 20 {
		t.Fatalf("at most %d starts within one second after strict counting ended, want the declared 20", n)
	}
}

// TestStrictKeepsItsGridWhenLate drives a strict key (20/s declared, so
// 19 per second and StrictJitter strict) whose every start is taken a few milliseconds after the
// instant the key admitted it, as a real fetch loop wakes: each start is
// paced from its instant, not from its late self, so the key keeps its
// strict rate (paced from each late start it fell to ~17/s),
// no start comes before its point on the even grid, and none follows
// another by less than half a spacing. A start later
// than StrictCatchUp of a spacing begins a new grid from itself.
func TestStrictKeepsItsGridWhenLate(t *testing.T) {
	t.Parallel()
	s := NewState(UpstreamWindow("k", 20, time.Second, 20, DefaultHeadroom))
	s.RateLimited(t0, t0.Add(time.Second), 1)
	if !s.strict() {
		t.Fatal("not strict after a refusal")
	}
	lates := []time.Duration{3 * time.Millisecond, 0, 7 * time.Millisecond, 1 * time.Millisecond, 20 * time.Millisecond, 5 * time.Millisecond}
	var starts []time.Time
	now := t0.Add(time.Second)
	for i := range 190 {
		ok, next := s.Check(now, 1)
		if !ok {
			now = next
			if ok, _ = s.Check(now, 1); !ok {
				t.Fatalf("start %d: not admitted at the instant it named", i)
			}
		}
		now = now.Add(lates[i%len(lates)]) // the fetch loop comes late
		s.Take(now, 1)
		s.End(now.Add(20*time.Millisecond), 1)
		starts = append(starts, now)
	}
	// No start before its point on the grid (the first start's, a
	// spacing apart): so no more than limit − 1 a period plus the one a
	// burst of one allows, the declared limit, which the key's window
	// holds in any case.
	unit := time.Duration(math.Ceil(1e9 / s.strictRate()))
	for i, st := range starts {
		if st.Before(starts[0].Add(time.Duration(i) * unit)) {
			t.Fatalf("start %d at %v, before its grid point %v", i, st.Sub(starts[0]), time.Duration(i)*unit)
		}
	}
	if n := upstream.MaxInWindow(starts, time.Second); n > 20 {
		t.Fatalf("%d strict starts within one second, want at most the declared 20", n)
	}
	span := starts[len(starts)-1].Sub(starts[0])
	if rate, want := float64(len(starts)-1)/span.Seconds(), s.strictRate(); rate < want*0.995 {
		t.Fatalf("strict key paced at %.2f/s when its starts came late, want its %.2f/s", rate, want)
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < unit/2 {
			t.Fatalf("start %d only %v after the one before, want at least half a spacing", i, gap)
		}
	}

	// A stall of more than StrictCatchUp of a spacing: the grid restarts
	// at the late start, the next a whole spacing after it.
	ok, next := s.Check(now, 1)
	if ok {
		t.Fatal("admitted right after a start")
	}
	late := next.Add(40 * time.Millisecond)
	s.Take(late, 1)
	if ok, at := s.Check(late, 1); ok || at.Sub(late) < unit {
		t.Fatalf("after a stalled start, the next admitted %v after it, want a whole spacing", at.Sub(late))
	}
}
