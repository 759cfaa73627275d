package bench

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/ratelimit"
	"github.com/ratelane/ratelane/internal/upstream"
)

// TestVirtualHalvingTwins logs, over ten start offsets and seeds 1-8, the
// issue mix with halving-503 as the matrix has it (clock-aligned fixed
// windows of 30 falling silently to 15, 503 + whole-second Retry-After)
// and as twins the sender cannot tell from it at the refusal that teaches
// it the drop: a sliding log, a token bucket with a burst of a whole
// second and one with a burst of 5, each falling to half at the same
// instant. It also logs a River-like sender on the matrix's halving-503
// (riverLike). Set RATELANE_VIRTUAL_HALVING=1 to run it (docs/benchmarks.md,
// session 21, s21h6): a measurement, no bound.
func TestVirtualHalvingTwins(t *testing.T) {
	if os.Getenv("RATELANE_VIRTUAL_HALVING") == "" {
		t.Skip("set RATELANE_VIRTUAL_HALVING=1 to log halving-503's twins")
	}
	var b strings.Builder
	for _, kind := range []string{"fixed", "sliding", "bucket", "bucket5"} {
		m := issueVariant(0.4)
		for i, d := range m.Destinations {
			if d.Name != "halving-503" {
				continue
			}
			switch kind {
			case "sliding":
				d.Route.Algorithm = upstream.AlgorithmSlidingWindow
			case "bucket", "bucket5":
				burst := 30
				if kind == "bucket5" {
					burst = 5
				}
				d.Route = upstream.RouteConfig{Rate: 30, Burst: burst, OverLimit: upstream.OverLimit503, Latency: latency,
					Changes: []upstream.LimitChange{{After: 4 * time.Second, Rate: 15, Burst: min(burst, 15)}}}
			}
			m.Destinations[i] = d
		}
		for _, lag := range []virtualLag{{name: "none"}, lagQuiet} {
			var sum, finish float64
			refused := 0
			for ms := 0; ms < 1000; ms += 100 {
				epoch := time.Date(2026, 1, 1, 0, 0, 0, ms*int(time.Millisecond), time.UTC)
				for seed := uint64(1); seed <= 8; seed++ {
					r := runVirtualMixFrom(t, m, seed, 60*time.Second, upstream.Latency{}, lag, epoch)
					sum += r.ratio
					v := pick(t, r, "halving-503")
					refused += v.refused
					finish += v.last.Sub(epoch).Seconds()
				}
			}
			fmt.Fprintf(&b, "%-8s %-5s mix mean %.4f, halving-503 finish %.3f s, refused %.2f per run\n",
				kind, lag.name, sum/80, finish/80, float64(refused)/80)
		}
	}
	for _, m := range Upstreams(false).Mixes {
		if m.Name != "issue" {
			continue
		}
		for _, d := range m.Destinations {
			if d.Name != "halving-503" {
				continue
			}
			for ms := 0; ms < 1000; ms += 100 {
				epoch := time.Date(2026, 1, 1, 0, 0, 0, ms*int(time.Millisecond), time.UTC)
				last, refused, attempts := riverLike(t, d, epoch, 1)
				times, err := upstream.IdealSchedule(d.Route, d.Jobs, epoch)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "river-like, offset %d ms: halving-503 finish %.3f s (ideal %.3f), refused %d of %d attempts\n",
					ms, last.Seconds(), times[len(times)-1].Sub(epoch).Seconds(), refused, attempts)
			}
		}
	}
	t.Log("\n" + b.String())
}

// riverLike delivers d's jobs from epoch the way bench/peers configures
// River: a limiter at the declared rate with a second's burst, every
// refused job snoozed for the Retry-After its answer named while the
// limiter goes on with the others (no pause of the destination). It
// returns the last accepted start (since epoch), the refusals and the
// attempts.
func riverLike(t *testing.T, d UpstreamDestination, epoch time.Time, seed uint64) (time.Duration, int, int) {
	t.Helper()
	up, err := upstream.NewVirtual(d.Route, epoch, seed)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		at time.Time
		h  http.Header
		ok bool
	}
	rate, tokens := float64(d.Declared), float64(d.Declared)
	pending, accepted, refused := d.Jobs, 0, 0
	var retries []time.Time
	var inflight []answer
	var last time.Time
	for now := epoch; accepted < d.Jobs && now.Before(epoch.Add(time.Minute)); now = now.Add(time.Millisecond) {
		tokens = min(rate, tokens+rate/1000)
		kept := inflight[:0]
		for _, a := range inflight {
			switch {
			case a.at.After(now):
				kept = append(kept, a)
			case !a.ok:
				delay, _, _ := ratelimit.Parse(a.h, a.at).Delay()
				retries = append(retries, a.at.Add(delay))
			}
		}
		inflight = kept
		for tokens >= 1 {
			ri := -1
			for i, r := range retries {
				if !r.After(now) {
					ri = i
					break
				}
			}
			if ri < 0 && pending == 0 {
				break
			}
			if ri >= 0 {
				retries = append(retries[:ri], retries[ri+1:]...)
			} else {
				pending--
			}
			tokens--
			status, h, lat := up.Answer(now)
			ok := status/100 == 2
			if ok {
				accepted, last = accepted+1, now
			} else {
				refused++
			}
			inflight = append(inflight, answer{at: now.Add(lat), h: h, ok: ok})
		}
	}
	return last.Sub(epoch), refused, d.Jobs + refused
}
