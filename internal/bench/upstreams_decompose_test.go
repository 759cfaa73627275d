package bench

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/ratelimit"
	"github.com/ratelane/ratelane/internal/upstream"
)

// The decomposition of a destination's seconds above its ideal (session
// 15, s15h6). A destination's lateness at t is how far its progress (the
// requests the upstream has counted: accepted ones and faults, as
// IdealSchedule plans them) stands behind the ideal's: D(t) = t − I(A(t)),
// where A(t) is its progress by t and I(k) the ideal's time of the k-th.
// D grows by one millisecond per millisecond and shrinks by the ideal's
// time each counted request is worth, and ends at finish − ideal. Each
// millisecond's change of D is charged to what the sender's key was doing
// in it, so that the charges add up to the destination's whole excess.

// decompCause is what a destination's key was doing in one millisecond.
type decompCause int

const (
	causePaused  decompCause = iota // paused (a Retry-After or a hold)
	causeBackoff                    // nothing to send but retries waiting out a backoff
	causeCap                        // at its concurrency cap (learned or declared)
	causeAbove                      // learned rate above the truth: a drop not yet found
	causeUnder                      // learned rate under the truth less the headroom
	causeAtLimit                    // pacing at its limit: margin, rounding, evenness, lag
	nCauses
)

var causeNames = [nCauses]string{"paused", "backoff", "cap", "above", "under", "at-limit"}

// trueLimit is the limit rc enforces at t (a window's count or a bucket's
// rate per second), after its scheduled changes.
func trueLimit(rc upstream.RouteConfig, epoch, t time.Time) float64 {
	l := float64(rc.Limit)
	if rc.Algorithm == "" || rc.Algorithm == upstream.AlgorithmTokenBucket {
		l = rc.Rate
	}
	for _, c := range rc.Changes {
		if !t.Before(epoch.Add(c.After)) {
			if c.Limit > 0 {
				l = float64(c.Limit)
			}
			if c.Rate > 0 {
				l = c.Rate
			}
		}
	}
	return l
}

// rateAdmits reports whether st would admit a start at now but for its
// concurrency cap: its pacing (bucket, windows, learned window) allows it.
func rateAdmits(st *admission.State, now time.Time) bool {
	c := *st // Check does not change the state; a copy keeps InFlight
	c.InFlight = 0
	ok, _ := c.Check(now, 1)
	return ok
}

// decomposition is one destination's excess over its own ideal, charged
// to causes (seconds), with the figures the run logged.
type decomposition struct {
	name                    string
	finish, ideal, mixIdeal float64
	by                      [nCauses]float64
	refused, faults         int
	paused                  float64
	startLag                float64 // mean, ms
}

// decomposeRun runs m with lag and charges each destination's lateness.
func decomposeRun(t *testing.T, m UpstreamsMix, seed uint64, lag virtualLag) (virtualMix, []decomposition) {
	t.Helper()
	causes := make([][]decompCause, len(m.Destinations))
	virtualObserve = func(now time.Time, ds []*virtualDest) {
		for i, v := range ds {
			c := causeAtLimit
			st := &v.st
			waiting := v.pending == 0 && len(v.retries) > 0 && !slices.ContainsFunc(v.retries, func(r time.Time) bool { return !r.After(now) })
			truth := trueLimit(v.d.Route, virtualEpoch, now) * st.Rate / float64(v.d.Declared)
			switch {
			case now.Before(st.PausedUntil):
				c = causePaused
			case waiting:
				c = causeBackoff
			case st.InFlightCap() > 0 && st.InFlight >= st.InFlightCap() && rateAdmits(st, now):
				c = causeCap
			case st.Adaptive && st.LearnedRate > truth+0.05:
				c = causeAbove
			case st.Adaptive && st.LearnedRate < truth-0.05:
				c = causeUnder
			}
			causes[i] = append(causes[i], c)
		}
	}
	defer func() { virtualObserve = nil }()
	r := runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lag)
	var mixIdeal time.Duration
	for _, d := range r.ideal {
		mixIdeal = max(mixIdeal, d)
	}
	var out []decomposition
	for i, v := range r.dests {
		ideal, err := upstream.IdealSchedule(v.d.Route, v.d.Jobs+v.faults, r.epoch)
		if err != nil {
			t.Fatal(err)
		}
		progress := slices.Concat(v.arrivals, v.faultAt)
		slices.SortFunc(progress, func(a, b time.Time) int { return a.Compare(b) })
		dc := decomposition{name: v.d.Name, finish: v.last.Sub(r.epoch).Seconds(), ideal: r.ideal[i].Seconds(),
			mixIdeal: mixIdeal.Seconds(), refused: v.refused, faults: v.faults, paused: v.paused.Seconds()}
		var lagSum time.Duration
		for _, l := range v.startLag {
			lagSum += l
		}
		dc.startLag = float64(lagSum.Milliseconds()) / float64(max(1, len(v.startLag)))
		// Each interval between two counted requests adds its length
		// less the ideal's gap between them to D; it is charged to the
		// causes of its milliseconds, in proportion.
		end := progress[len(progress)-1]
		// The excess runs to the last request counted, which under lag
		// may have been answered before the one the run logged last.
		dc.finish = end.Sub(r.epoch).Seconds()
		cs := causes[i]
		at := func(t time.Time) int { // the observed millisecond at or after t
			return min(len(cs)-1, int((t.Sub(r.epoch)+time.Millisecond-1)/time.Millisecond))
		}
		prevT, prevI := r.epoch, r.epoch
		for k, p := range progress {
			add := (p.Sub(prevT) - ideal[k].Sub(prevI)).Seconds()
			lo, hi := at(prevT), at(p)
			if hi <= lo {
				dc.by[cs[hi]] += add
			} else {
				n := float64(hi - lo)
				for m := lo + 1; m <= hi; m++ {
					dc.by[cs[m]] += add / n
				}
			}
			prevT, prevI = p, ideal[k]
		}
		out = append(out, dc)
	}
	return r, out
}

// TestVirtualDecompose logs, for the issue and unforeseen mixes, seeds 1
// to 8, without lag and under the quiet lag profile, each destination's
// seconds above its own ideal charged to causes (see decompCause), and
// checks that the charges add up to the excess. It only logs figures
// (docs/benchmarks.md, session 15, s15h6): set RATELANE_VIRTUAL_DECOMPOSE=1
// to run it.
func TestVirtualDecompose(t *testing.T) {
	if os.Getenv("RATELANE_VIRTUAL_DECOMPOSE") == "" {
		t.Skip("set RATELANE_VIRTUAL_DECOMPOSE=1 to log the decomposition")
	}
	seeds := uint64(8)
	var table strings.Builder
	for _, m := range Upstreams(false).Mixes {
		if m.Name != "issue" && m.Name != "unforeseen" {
			continue
		}
		for _, lag := range []virtualLag{{name: "none"}, lagQuiet} {
			sum := map[string]*decomposition{}
			var order []string
			for seed := uint64(1); seed <= seeds; seed++ {
				r, ds := decomposeRun(t, m, seed, lag)
				fmt.Fprintf(&table, "mix %s lag %s seed %d: makespan %.3f of ideal, refused %.2f%%\n", m.Name, lag.name, seed, r.ratio, 100*r.share)
				for _, d := range ds {
					var total float64
					var parts strings.Builder
					for c, s := range d.by {
						total += s
						fmt.Fprintf(&parts, " %s %+.3f", causeNames[c], s)
					}
					excess := d.finish - d.ideal
					if diff := total - excess; diff > 0.002 || diff < -0.002 {
						t.Errorf("%s %s seed %d: charges add to %.3f s, excess %.3f s", m.Name, d.name, seed, total, excess)
					}
					fmt.Fprintf(&table, "  %-13s finish %6.3f ideal %6.3f (mix %6.3f) excess %+.3f =%s | refused %d faults %d paused %.2f lag %.0fms\n",
						d.name, d.finish, d.ideal, d.mixIdeal, excess, parts.String(), d.refused, d.faults, d.paused, d.startLag)
					s, ok := sum[d.name]
					if !ok {
						s = &decomposition{name: d.name}
						sum[d.name] = s
						order = append(order, d.name)
					}
					s.finish += d.finish / float64(seeds)
					s.ideal += d.ideal / float64(seeds)
					s.mixIdeal += d.mixIdeal / float64(seeds)
					for c := range d.by {
						s.by[c] += d.by[c] / float64(seeds)
					}
					s.refused += d.refused
					s.paused += d.paused / float64(seeds)
				}
			}
			fmt.Fprintf(&table, "mix %s lag %s, mean of seeds 1-%d:\n", m.Name, lag.name, seeds)
			for _, n := range order {
				d := sum[n]
				var parts strings.Builder
				for c, s := range d.by {
					fmt.Fprintf(&parts, " %s %+.3f", causeNames[c], s)
				}
				fmt.Fprintf(&table, "  %-13s finish %6.3f ideal %6.3f (mix %6.3f) excess %+.3f =%s | refused %d in all, paused %.2f\n",
					n, d.finish, d.ideal, d.mixIdeal, d.finish-d.ideal, parts.String(), d.refused, d.paused)
			}
		}
	}
	// concurrent-1's floor under each lag: a key told its cap of one and
	// its sliding 20 (as TestVirtualConcurrencyFloor tells it, there under
	// transit), which never discovers anything.
	truth := admission.UpstreamWindow("subscriber:concurrent-1", 20, time.Second, 20, admission.DefaultHeadroom)
	truth.Concurrency = 1
	for _, m := range Upstreams(false).Mixes {
		if m.Name != "unforeseen" {
			continue
		}
		for _, lag := range []virtualLag{{name: "none"}, lagQuiet} {
			fmt.Fprintf(&table, "concurrent-1 told its cap, lag %s:", lag.name)
			for seed := uint64(1); seed <= seeds; seed++ {
				told := pick(t, runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lag, truth), "concurrent-1")
				got := pick(t, runVirtualMixLag(t, m, seed, 60*time.Second, upstream.Latency{}, lag), "concurrent-1")
				fmt.Fprintf(&table, " %.2f (%d) / %.2f (%d)", told.last.Sub(virtualEpoch).Seconds(), told.refused,
					got.last.Sub(virtualEpoch).Seconds(), got.refused)
			}
			fmt.Fprintln(&table, "  [told (refused) / discovering (refused), seeds 1-8]")
		}
	}
	t.Log("\n" + table.String())
}

// oracleSend is how an oracle sender of TestVirtualOracleFloors decides to
// start a request at now, given its past starts and the limit it knows.
type oracleSend func(now time.Time, starts []time.Time, limit float64) bool

// alignedBurst starts up to limit per window aligned to the clock: a sender
// that knows its upstream counts fixed windows.
func alignedBurst(now time.Time, starts []time.Time, limit float64) bool {
	n := 0
	for i := len(starts) - 1; i >= 0 && starts[i].Truncate(time.Second).Equal(now.Truncate(time.Second)); i-- {
		n++
	}
	return float64(n) < limit
}

// slidingBurst starts up to limit in any trailing second: a sender that
// knows the limit but not how the upstream aligns its windows.
func slidingBurst(now time.Time, starts []time.Time, limit float64) bool {
	n := 0
	for i := len(starts) - 1; i >= 0 && now.Sub(starts[i]) < time.Second; i-- {
		n++
	}
	return float64(n) < limit
}

// counterSend starts whenever a two-window counter of limit per second
// aligned to the clock (upstream.AlgorithmSlidingCounter) would admit one
// more, counting every past start: a sender that knows its upstream is
// such a counter.
func counterSend(now time.Time, starts []time.Time, limit float64) bool {
	cur := now.Truncate(time.Second)
	prevN, curN := 0, 0
	for i := len(starts) - 1; i >= 0 && !starts[i].Before(cur.Add(-time.Second)); i-- {
		if starts[i].Before(cur) {
			prevN++
		} else {
			curN++
		}
	}
	f := float64(now.Sub(cur)) / float64(time.Second)
	return float64(prevN)*(1-f)+float64(curN)+1 <= limit
}

// even starts one request per 1/limit seconds.
func even(now time.Time, starts []time.Time, limit float64) bool {
	return len(starts) == 0 || now.Sub(starts[len(starts)-1]) >= time.Duration(float64(time.Second)/limit)
}

// oracleRun delivers jobs to rc from epoch with send, no sender lag, at
// limits[0] until the first refusal and limits[1] after it, sending by
// send and then by then (the oracle
// knows the shape and the new limit, not the moment of the change), every
// refusal pausing it for the Retry-After the upstream names (or, with
// none, not at all: the job is retried as the oracle paces). It returns
// the last accepted start (since epoch) and the refusals.
func oracleRun(t *testing.T, rc upstream.RouteConfig, jobs int, epoch time.Time, seed uint64, send, then oracleSend, limits ...float64) (time.Duration, int) {
	t.Helper()
	up, err := upstream.NewVirtual(rc, epoch, seed)
	if err != nil {
		t.Fatal(err)
	}
	type ans struct {
		at      time.Time
		refused bool
		h       http.Header
	}
	var (
		starts   []time.Time
		inflight []ans
		accepted int
		refused  int
		last     time.Time
		paused   time.Time
		limit    = limits[0]
	)
	for now := epoch; accepted < jobs && now.Before(epoch.Add(time.Minute)); now = now.Add(time.Millisecond) {
		kept := inflight[:0]
		for _, a := range inflight {
			if a.at.After(now) {
				kept = append(kept, a)
				continue
			}
			if a.refused {
				refused++
				if len(limits) > 1 {
					limit = limits[1]
				}
				send = then
				if d, _, ok := ratelimit.Parse(a.h, a.at).Delay(); ok && a.at.Add(d).After(paused) {
					paused = a.at.Add(d)
				}
			}
		}
		inflight = kept
		for now.Compare(paused) >= 0 && accepted+len(inflight) < jobs && send(now, starts, limit) {
			starts = append(starts, now)
			status, h, lat := up.Answer(now)
			switch status {
			case http.StatusTooManyRequests, http.StatusServiceUnavailable:
				inflight = append(inflight, ans{at: now.Add(time.Millisecond), refused: true, h: h})
			default:
				accepted++
				last = now
				inflight = append(inflight, ans{at: now.Add(lat)})
			}
		}
	}
	return last.Sub(epoch), refused
}

// TestVirtualOracleFloors logs what senders that know more than ratelane
// reach on the destinations that set the issue and unforeseen mixes'
// makespans (docs/benchmarks.md, session 15, s15h6): the floor of each
// destination for a sender that knows its shape but not the moment of its
// change, and for senders that know less. Set RATELANE_VIRTUAL_DECOMPOSE=1
// to run it.
func TestVirtualOracleFloors(t *testing.T) {
	if os.Getenv("RATELANE_VIRTUAL_DECOMPOSE") == "" {
		t.Skip("set RATELANE_VIRTUAL_DECOMPOSE=1 to log the floors")
	}
	dests := destinationsByName()
	type oracle struct {
		dest, how string
		send      oracleSend
		limits    []float64
		then      oracleSend // after the first refusal, if not send
	}
	for _, o := range []oracle{
		{"halving-503", "fixed windows at their limits (knows the shape)", alignedBurst, []float64{30, 15}, nil},
		{"halving-503", "sliding bursts at the true limits (knows the limits, not the alignment)", slidingBurst, []float64{30, 15}, nil},
		{"halving-503", "even at the true limits", even, []float64{30, 15}, nil},
		{"halving-503", "even at the limits less 3 % (ratelane's margin, no window floor)", even, []float64{29.1, 14.55}, nil},
		{"halving-503", "even at ratelane's floored window (29, then 14)", even, []float64{29, 14}, nil},
		{"counter-20", "sliding bursts of 20, then even 19 (ratelane's reading)", slidingBurst, []float64{20, 19}, even},
		{"counter-20", "even 19 from the start (a counter's steady rate)", even, []float64{19, 19}, nil},
		{"counter-20", "even 20 from the start", even, []float64{20, 19}, nil},
		{"counter-20", "sliding bursts of 20, then as the counter admits (knows it after the refusal)", slidingBurst, []float64{20, 20}, counterSend},
		{"counter-20", "as the counter admits from the start (knows it)", counterSend, []float64{20, 20}, nil},
	} {
		d := dests[o.dest]
		ideal, err := upstream.IdealSchedule(d.Route, d.Jobs, virtualEpoch)
		if err != nil {
			t.Fatal(err)
		}
		for seed := uint64(1); seed <= 3; seed++ {
			send := o.send
			if o.then != nil { // a second way of sending after the first refusal
				send = o.then
			}
			f, n := oracleRun(t, d.Route, d.Jobs, virtualEpoch, seed+1, o.send, send, o.limits...)
			t.Logf("%-12s %-75s seed %d: last start %6.3fs (own ideal %6.3fs, +%.3fs), %d refused", o.dest, o.how, seed, f.Seconds(), ideal[len(ideal)-1].Sub(virtualEpoch).Seconds(), (f - ideal[len(ideal)-1].Sub(virtualEpoch)).Seconds(), n)
		}
	}
}

// TestVirtualOracleOffsets logs halving-503's and counter-20's oracle
// floors (see TestVirtualOracleFloors) from the ten start offsets of
// TestVirtualOffsets: where in the clock's second a run starts decides
// how many of the fixed window's openings fall before the drop, and so
// what an even sender can reach, while a sender of whole windows at once
// is the same from every offset (docs/benchmarks.md, session 23, s23h2);
// and where in its aligned window counter-20's first refusal falls, and so
// what its Retry-After pause costs a sender that knows the counter from
// then on (session 24, s24h2). Set RATELANE_VIRTUAL_DECOMPOSE=1 to run it.
func TestVirtualOracleOffsets(t *testing.T) {
	if os.Getenv("RATELANE_VIRTUAL_DECOMPOSE") == "" {
		t.Skip("set RATELANE_VIRTUAL_DECOMPOSE=1 to log the floors per offset")
	}
	dests := destinationsByName()
	var table strings.Builder
	for _, o := range []struct {
		dest, how  string
		send, then oracleSend
		limits     []float64
	}{
		{"halving-503", "fixed windows at their limits", alignedBurst, alignedBurst, []float64{30, 15}},
		{"halving-503", "sliding bursts at the true limits", slidingBurst, slidingBurst, []float64{30, 15}},
		{"halving-503", "even at the limits less 3 %", even, even, []float64{29.1, 14.55}},
		{"counter-20", "as the counter admits (knows it)", counterSend, counterSend, []float64{20, 20}},
		{"counter-20", "sliding bursts, then as the counter admits", slidingBurst, counterSend, []float64{20, 20}},
	} {
		d := dests[o.dest]
		fmt.Fprintf(&table, "%-11s %-42s", o.dest, o.how)
		for ms := 0; ms < 1000; ms += 100 {
			epoch := time.Date(2026, 1, 1, 0, 0, 0, ms*int(time.Millisecond), time.UTC)
			f, n := oracleRun(t, d.Route, d.Jobs, epoch, 2, o.send, o.then, o.limits...)
			fmt.Fprintf(&table, " %d:%.3f (%d)", ms, f.Seconds(), n)
		}
		fmt.Fprintln(&table, "  [offset ms: last start s since the run's start (refused)]")
	}
	t.Log("\n" + table.String())
}

// destinationsByName is every destination of the upstreams workload's
// mixes by its name (the last mix's where mixes share a name).
func destinationsByName() map[string]UpstreamDestination {
	dests := map[string]UpstreamDestination{}
	for _, m := range Upstreams(false).Mixes {
		for _, d := range m.Destinations {
			dests[d.Name] = d
		}
	}
	return dests
}
