package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// The sender's own lag, in simulated time. Simulated time's sender never
// falls behind: it leases the millisecond its key admits a start and
// applies each outcome the moment the answer is back. The real engine
// does neither: a lease commits, then a worker starts the handler (the
// start lag), and an answer waits in the finish queue until its batch is
// written (the finish delay), and on a loaded machine both have long
// tails. Rules that assume the key sent its learned rate's worth, or that
// a lease still counted in flight is still at the upstream, read such a
// sender wrongly; session 9 (s9h2) saw it only on the real clock. A
// virtualLag makes it deterministic.

// lagDist is a delay drawn from a log-normal distribution with the given
// median and 99th percentile, cut at max: most draws near the median,
// a few (a scheduler that did not run the goroutine, a GC pause, a slow
// commit) ten times longer. The zero lagDist is no delay.
type lagDist struct {
	median, p99, max time.Duration
}

// draw returns one delay from d using r; 0 for the zero lagDist.
func (d lagDist) draw(r *rand.Rand) time.Duration {
	if d.median <= 0 {
		return 0
	}
	sigma := 0.0
	if d.p99 > d.median {
		sigma = math.Log(float64(d.p99)/float64(d.median)) / 2.326 // z of the 99th percentile
	}
	x := time.Duration(float64(d.median) * math.Exp(sigma*r.NormFloat64()))
	if d.max > 0 {
		x = min(x, d.max)
	}
	return x
}

// virtualLag is the sender's lag in a virtual run: start between a lease
// (the key's Take) and its handler sending the request, drawn per
// request; finish is how long one write of the finish loop takes (see
// finishWriter), which decides when an answer that is back is applied to
// its key (End, then the refusal or success).
type virtualLag struct {
	name          string
	start, finish lagDist
}

// finishWriter is the engine's finish loop in simulated time, one per
// destination: it writes every answer of its key that is waiting when it
// becomes free in one batch (engine.finishLoop), each write taking a
// duration drawn from write. An answer that comes back while a write is
// under way waits for that write and the next: on a loaded machine that
// is where answers pile up, still counted in flight by their keys. The
// real engine has one loop for every key, but a write's duration as
// lagQuiet draws it is the delay per answer the real clock measured, its
// wait behind other keys' answers included; a writer shared by the
// simulated keys added that queueing a second time, and made each key's
// finishes depend on every other key's timing (docs/benchmarks.md,
// session 20, s20h2).
type finishWriter struct {
	write lagDist
	rng   *rand.Rand
	// busy is when the write under way ends; next, when not zero, when
	// the write of the answers waiting for it will end.
	busy, next time.Time
}

// apply returns when an answer that reached the engine at at is applied:
// answers must be given in time order.
func (w *finishWriter) apply(at time.Time) time.Time {
	if !w.next.IsZero() && !at.Before(w.busy) { // the waiting batch began at busy
		w.busy, w.next = w.next, time.Time{}
	}
	if !at.Before(w.busy) { // idle: a write of this answer starts now
		w.busy = at.Add(w.write.draw(w.rng))
		return w.busy
	}
	if w.next.IsZero() {
		w.next = w.busy.Add(w.write.draw(w.rng))
	}
	return w.next
}

// The lag profiles. lagQuiet is the engine's own lag as the real clock
// measured it on the unforeseen mix's cap-of-one path (docs/benchmarks.md,
// "Session 16 (s16h2)", load 21-22): a lease's start reaches the upstream
// 0.4-0.5 ms after it (p99 5-11 ms), and an answer is committed 1.3-2.7 ms
// after it is back (p99 25-170 ms). Until session 18 it was calibrated to
// sliding-date's start lag as ScoreUpstreams measures it (p50 40-60 ms,
// p99 about 400 ms on a quiet machine), which counts the upstream's
// latency and the paced wait as well as the engine's lag: that profile
// drew a start lag 15x the measured median and 18-36x its p99, and put
// concurrent-1, whose cap of one it lands on, 2 s later than the real
// clock does. lagLoaded, about five times the old quiet profile's lag
// (load 25-75 on 2 cores), keeps that calibration as the stress case.
// TestVirtualLag logs the measured start lag of each.
var (
	lagQuiet = virtualLag{name: "quiet",
		start:  lagDist{median: 500 * time.Microsecond, p99: 10 * time.Millisecond, max: 60 * time.Millisecond},
		finish: lagDist{median: 2 * time.Millisecond, p99: 60 * time.Millisecond, max: 200 * time.Millisecond}}
	lagLoaded = virtualLag{name: "loaded", start: lagDist{median: 30 * time.Millisecond, p99: 600 * time.Millisecond, max: 2 * time.Second}, finish: lagDist{median: 15 * time.Millisecond, p99: 250 * time.Millisecond, max: 2 * time.Second}}
)

// lagBounds are the makespans (of ideal) the issue mix reaches under
// each lag profile (session 10, seeds 1-3: quiet 1.151/1.230/1.195,
// loaded 1.521/1.365/1.450; before it, quiet 1.481 and loaded 1.666 and
// 1.608 on seeds 3 and 1, halving-503's silent drop trimmed instead of
// halved), so that a regression shows here, deterministically. Merged with
// s10h3's burst-refusal countdown (a cap learned from a burst refusal
// lowered by one per further refusal), loaded reads 1.563/1.372/1.450:
// half-none, refused with answered-but-unwritten leases in flight, learns
// a cap of 2 on seed 1; the loaded bound follows that. Since session 12
// (s12h7) a refusal without Retry-After on its adaptive key is retried as
// the key paces it, not after the job's backoff (store.PacedRetry):
// loaded reads 1.472/1.372/1.450, the bound follows. They are
// not the 1.15 target, which the issue mix misses under lag (see
// docs/benchmarks.md, s10h2). Since session 18 (s18h4) the quiet profile
// is the measured one (see lagQuiet): issue reads 1.123/1.135/1.132 and
// unforeseen 1.118/1.119/1.124 under it (1.151/1.230/1.195 and
// 1.278/1.351/1.336 under the old profile), and its bounds follow: issue
// at its 1.15 target, unforeseen just over what it reaches.
var lagBounds = map[string]float64{"quiet/issue": 1.15, "quiet/unforeseen": 1.13, "loaded/issue": 1.48}

// measuredStartLag is the p50 and p99 start lag (ms) of r's destinations
// that startLags measures (sliding windows at a fixed limit), pooled.
func measuredStartLag(r virtualMix) (p50, p99 float64, ok bool) {
	epoch := r.epoch
	var lags []time.Duration
	for _, v := range r.dests {
		arr := slices.Clone(v.arrivals)
		slices.SortFunc(arr, func(a, b time.Time) int { return a.Compare(b) })
		lags = append(lags, startLags(v.d.Route, epoch, arr)...)
	}
	if len(lags) == 0 {
		return 0, 0, false
	}
	return quantileMS(lags, 0.5), quantileMS(lags, 0.99), true
}

// TestVirtualLag runs every mix, seeds 1 to 3, under no lag and under
// each lag profile, logs the table of makespans (of ideal) and refusal
// shares with the measured start lag, and holds every run to delivery in
// full and invariant 6 at the upstream for the destinations declared as
// they count (which must also never be refused, whatever the lag: the
// window counts a start until its answer is applied).
// RATELANE_VIRTUAL_MIX selects mixes as in TestVirtualUpstreams.
func TestVirtualLag(t *testing.T) {
	var table strings.Builder
	eachVirtualMix(t, func(t *testing.T, m UpstreamsMix, seed uint64) {
		for _, lag := range []virtualLag{{name: "none"}, lagQuiet, lagLoaded} {
			r := runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lag)
			line := fmt.Sprintf("mix %-10s seed %d lag %-6s: makespan %.3f of ideal, refused %.2f%%", m.Name, seed, lag.name, r.ratio, 100*r.share)
			if p50, p99, ok := measuredStartLag(r); ok {
				line += fmt.Sprintf(", start lag p50 %.0f ms p99 %.0f ms", p50, p99)
			}
			t.Log(line)
			fmt.Fprintln(&table, line)
			logVirtualMix(t, m, seed, r)
			if bound, ok := lagBounds[lag.name+"/"+m.Name]; ok && r.ratio > bound {
				t.Errorf("mix %s seed %d: makespan %.3f of ideal under %s lag, want <= %.2f", m.Name, seed, r.ratio, lag.name, bound)
			}
			for _, v := range r.dests {
				if !declaredExactly(v.d) {
					continue
				}
				if v.refused > 0 {
					t.Errorf("lag %s: %s (declared %d, exactly as it counts): %d refusals", lag.name, v.d.Name, v.d.Declared, v.refused)
				}
				count, how := upstream.MaxInWindow(v.arrivals, time.Second), "one second"
				if v.d.Fixed {
					count, how = maxInAligned(v.arrivals, time.Second), "one aligned second"
				}
				if count > v.d.Declared {
					t.Errorf("lag %s: %s: %d accepted arrivals within %s, declared %d (invariant 6 at the upstream)", lag.name, v.d.Name, count, how, v.d.Declared)
				}
			}
		}
	})
	t.Log("\n" + table.String())
}

// issueMix is the upstreams plan's issue mix.
func issueMix(t *testing.T) UpstreamsMix {
	t.Helper()
	for _, m := range Upstreams(false).Mixes {
		if m.Name == "issue" {
			return m
		}
	}
	t.Fatal("no issue mix")
	return UpstreamsMix{}
}

// TestVirtualLagSilentDrop is session 9's item 2 (s9h2) made
// deterministic: halving-503's limit halves silently 4 s into the run,
// and its first refusal after that must be read as a silent drop and cut
// the key's rate by about half, whatever the sender's lag. A sender
// whose windows count each start until its answer is applied sends
// under its learned rate's worth by the share its round trip takes; read
// against the learned rate, the refusal looked like a key that had not
// been sending its rate, and was trimmed (29.1 -> 24.2 or 25.2) instead,
// each further refusal then costing a 1 s pause.
func TestVirtualLagSilentDrop(t *testing.T) {
	m := issueMix(t)
	for _, lag := range []virtualLag{{name: "none"}, lagQuiet, lagLoaded} {
		for seed := uint64(1); seed <= 8; seed++ {
			r := runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lag)
			checkSilentDropHalved(t, fmt.Sprintf("lag %s seed %d", lag.name, seed), r)
		}
	}
}

// checkSilentDropHalved fails the test unless halving-503's first refusal
// after its silent drop (4 s into r) cut its rate to about half; label
// names the run.
func checkSilentDropHalved(t *testing.T, label string, r virtualMix) {
	t.Helper()
	for _, v := range r.dests {
		if v.d.Name != "halving-503" {
			continue
		}
		i := slices.IndexFunc(v.refusals, func(x virtualRefusal) bool { return x.at > 4*time.Second })
		if i < 0 {
			t.Errorf("%s: halving-503 never refused after its drop", label)
			continue
		}
		f := v.refusals[i]
		t.Logf("%s: drop refused at %v, learned %.1f -> %.1f, makespan %.3f", label, f.at, f.rateBefore, f.rateAfter, r.ratio)
		if f.rateAfter > 0.7*f.rateBefore {
			t.Errorf("%s: halving-503's silent drop (refused at %v) cut its rate %.1f -> %.1f, want about half",
				label, f.at, f.rateBefore, f.rateAfter)
		}
	}
}

// TestVirtualLagSilentDropHeld is TestVirtualLagSilentDrop on the loaded
// lag's seeds where the key's own window held it for part of the second
// before the drop's refusal (seeds 25 and 44 of 48: it sent 19 and 17
// starts of its 29.1, its window full of answers logged together after a
// late batch of finish writes, then idle for 0.4-0.5 s with jobs
// waiting). Read over the whole second that was a key not sending its
// rate, and the drop was trimmed 29.1 -> 28.2; read over the part it
// was sending in (admission's busy), it is halved.
func TestVirtualLagSilentDropHeld(t *testing.T) {
	m := issueMix(t)
	for _, seed := range []uint64{25, 44} {
		r := runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lagLoaded)
		checkSilentDropHalved(t, fmt.Sprintf("lag loaded seed %d", seed), r)
	}
}
