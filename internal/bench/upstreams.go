package bench

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// The upstreams workload tests pacing against receivers that count and
// answer the way real APIs do, not the way ratelane's limiter expects:
// sliding and fixed windows as well as buckets, HTTP-date Retry-After on
// a skewed clock, no Retry-After at all, 503 instead of 429, random
// faults, and limits that change silently mid-run. Each mix is a set of
// destinations; every system under test is told each destination's
// declared limit (and, where the real limit may differ, that it may),
// and, for the fixed mix, that the limit is a fixed window aligned to the
// clock, as a user reading those receivers' docs would know; otherwise
// never how it counts.

// UpstreamDestination is one receiver of an upstreams mix.
type UpstreamDestination struct {
	// Name is the simulator route, the subscriber id and the limit key.
	Name string
	// Declared is the limit the sender is told, in requests per second.
	Declared int
	// Adaptive says the sender was warned that the real limit may be
	// lower than Declared or change: ratelane configures the key as
	// adaptive, with Declared as its ceiling.
	Adaptive bool
	// Fixed says the sender was told the receiver counts fixed windows
	// aligned to the clock (its docs say the limit "resets at" each
	// second): ratelane declares the subscriber's rate as a fixed window.
	Fixed bool
	// Route is how the receiver really counts and answers.
	Route upstream.RouteConfig
	// Jobs is how many deliveries it gets.
	Jobs int
}

// UpstreamsMix is one row of the matrix: destinations delivered to at once.
type UpstreamsMix struct {
	// Name is the mix's suffix in metric names.
	Name string
	// Destinations are in name order.
	Destinations []UpstreamDestination
}

// UpstreamsPlan is the upstreams workload: mixes run one after another,
// each with a fresh store and simulator.
type UpstreamsPlan struct {
	Mixes []UpstreamsMix
	// Workers is the concurrency.
	Workers int
}

// latency is every receiver's processing time unless a mix says
// otherwise: 20 ms plus up to 30 ms of jitter.
var latency = upstream.Latency{Fixed: 20 * time.Millisecond, Jitter: 30 * time.Millisecond}

// Upstreams returns the upstreams plan: about 10 s of work per destination
// at its true limits, or 3 s when smoke is set. Scheduled changes scale
// with the length.
func Upstreams(smoke bool) UpstreamsPlan {
	s := 10.0
	if smoke {
		s = 3
	}
	at := func(frac float64) time.Duration { return time.Duration(frac * s * float64(time.Second)) }
	sliding := func(limit int, over upstream.OverLimit) upstream.RouteConfig {
		return upstream.RouteConfig{Algorithm: upstream.AlgorithmSlidingWindow, Window: time.Second, Limit: limit, OverLimit: over, Latency: latency}
	}
	fixed := func(limit int, over upstream.OverLimit) upstream.RouteConfig {
		return upstream.RouteConfig{Algorithm: upstream.AlgorithmFixedWindow, Window: time.Second, Limit: limit, OverLimit: over, Latency: latency}
	}
	jobs := func(perSecond float64) int { return int(math.Round(perSecond * s)) }

	// (a) The issue's mix.
	issueDate := sliding(20, upstream.OverLimit429Date)
	issueDate.DateSkew = 3 * time.Second // its clock runs 3 s ahead of ours
	issueHalf := upstream.RouteConfig{Rate: 20, Burst: 5, OverLimit: upstream.OverLimit429None,
		TransientRate: 0.02, TransientStatuses: []int{503}, Latency: latency}
	issueHalving := fixed(30, upstream.OverLimit503)
	issueHalving.Changes = []upstream.LimitChange{{After: at(0.4), Limit: 15}}
	issue := UpstreamsMix{Name: "issue", Destinations: []UpstreamDestination{
		{Name: "sliding-date", Declared: 20, Route: issueDate, Jobs: jobs(20)},
		{Name: "half-none", Declared: 40, Adaptive: true, Route: issueHalf, Jobs: jobs(20)},
		{Name: "halving-503", Declared: 30, Adaptive: true, Route: issueHalving, Jobs: jobs(0.4*30 + 0.6*15)},
	}}

	// (b) Sliding windows at their declared limit.
	slide := UpstreamsMix{Name: "sliding"}
	for _, l := range []int{5, 10, 20, 40} {
		slide.Destinations = append(slide.Destinations, UpstreamDestination{
			Name: fmt.Sprintf("sliding-%02d", l), Declared: l, Route: sliding(l, upstream.OverLimit429Seconds), Jobs: jobs(float64(l))})
	}

	// (c) Fixed windows aligned to the clock, declared so (Fixed).
	fix := UpstreamsMix{Name: "fixed"}
	for i, l := range []int{8, 20, 50} {
		over := upstream.OverLimit429Seconds
		if i == 1 {
			over = upstream.OverLimit429Date
		}
		fix.Destinations = append(fix.Destinations, UpstreamDestination{
			Name: fmt.Sprintf("fixed-%02d", l), Declared: l, Fixed: true, Route: fixed(l, over), Jobs: jobs(float64(l))})
	}

	// (d) Limits that rise mid-run, up to what the sender was told. An
	// upstream that changes its limit on a plan says so in its
	// remaining-quota fields: these announce their policy (IETF
	// RateLimit-Policy and RateLimit), as a real one would.
	riseSlide := sliding(10, upstream.OverLimit429Seconds)
	riseSlide.Changes = []upstream.LimitChange{{After: at(0.3), Limit: 30}}
	riseSlide.Headers = upstream.HeaderStyleRateLimit
	riseBucket := upstream.RouteConfig{Rate: 15, Burst: 5, OverLimit: upstream.OverLimit429Seconds, Latency: latency,
		Changes: []upstream.LimitChange{{After: at(0.5), Rate: 40, Burst: 10}}, Headers: upstream.HeaderStyleRateLimit}
	rising := UpstreamsMix{Name: "rising", Destinations: []UpstreamDestination{
		{Name: "rise-sliding", Declared: 30, Adaptive: true, Route: riseSlide, Jobs: jobs(0.3*10 + 0.7*30)},
		{Name: "rise-bucket", Declared: 40, Adaptive: true, Route: riseBucket, Jobs: jobs(0.5*15 + 0.5*40)},
	}}

	// (e) Many destinations, every answer style.
	many := UpstreamsMix{Name: "many"}
	styles := []upstream.OverLimit{upstream.OverLimit429Seconds, upstream.OverLimit429Date, upstream.OverLimit503, upstream.OverLimit429None}
	for i := range 20 {
		l := int(math.Round(2 * math.Pow(10, float64(i)/19)))
		rc := sliding(l, styles[i%len(styles)])
		if i%5 == 4 {
			rc.TransientRate, rc.TransientStatuses = 0.02, []int{500, 503}
		}
		many.Destinations = append(many.Destinations, UpstreamDestination{
			Name: fmt.Sprintf("many-%02d", i), Declared: l, Route: rc, Jobs: jobs(float64(l))})
	}
	// (f) Upstreams the pacing was not designed for, as an honest check:
	// the two-window sliding counter of edge proxies (Cloudflare's, most
	// Redis recipes), which admits more or less than a sliding log
	// depending on how the previous window's requests were spread; and
	// a receiver that also counts concurrent requests (one at a time),
	// which a sender pacing by rate meets whenever latencies overlap.
	counter := upstream.RouteConfig{Algorithm: upstream.AlgorithmSlidingCounter, Window: time.Second, Limit: 20,
		OverLimit: upstream.OverLimit429Seconds, Latency: latency}
	conc := sliding(20, upstream.OverLimit429None)
	conc.MaxConcurrent = 1
	unforeseen := UpstreamsMix{Name: "unforeseen", Destinations: []UpstreamDestination{
		{Name: "counter-20", Declared: 20, Route: counter, Jobs: jobs(19)},
		{Name: "concurrent-1", Declared: 20, Adaptive: true, Route: conc, Jobs: jobs(20)},
	}}
	return UpstreamsPlan{Mixes: []UpstreamsMix{issue, slide, fix, rising, many, unforeseen}, Workers: 64}
}

// Routes returns the simulator routes of the mix's destinations.
func (m UpstreamsMix) Routes() map[string]upstream.RouteConfig {
	routes := map[string]upstream.RouteConfig{}
	for _, d := range m.Destinations {
		routes[d.Name] = d.Route
	}
	return routes
}

// Order returns every delivery's destination in insertion order,
// round-robin over the destinations.
func (m UpstreamsMix) Order() []UpstreamDestination {
	return roundRobin(m.Destinations, func(d UpstreamDestination) int { return d.Jobs })
}

// Total is the number of deliveries in the mix.
func (m UpstreamsMix) Total() int {
	n := 0
	for _, d := range m.Destinations {
		n += d.Jobs
	}
	return n
}

// MixOutcome is what one mix's run measured.
type MixOutcome struct {
	// Start is when the senders started (the simulator's schedule epoch).
	Start time.Time
	// Report is the simulator's report after the run.
	Report upstream.Report
	// Lost counts deliveries that ended without being accepted (given up,
	// failed for good, or still undelivered at the bound).
	Lost int
	// Arrivals are, per destination, the simulator's times of accepted
	// requests (upstream.Server.Arrivals); nil leaves the start-lag
	// figures out.
	Arrivals map[string][]time.Time
}

// startLags returns, for a destination that counts a fixed sliding window
// (Limit per Window, no scheduled changes), how late each accepted start
// came after the moment the window first allowed it: the k-th start is
// admissible once the (k-Limit)-th has left the window, or at the run's
// start. With the whole backlog queued at the start, every millisecond of
// lag is allowance the sender left unused (lease wake-ups, empty leases,
// idle workers, a learned limit under the true one). Nil for other shapes.
func startLags(rc upstream.RouteConfig, start time.Time, arr []time.Time) []time.Duration {
	alg := rc.Algorithm
	if alg == upstream.AlgorithmAuto && rc.Window > 0 {
		alg = upstream.AlgorithmSlidingWindow
	}
	if alg != upstream.AlgorithmSlidingWindow || rc.Limit <= 0 || len(rc.Changes) > 0 || len(arr) == 0 {
		return nil
	}
	lags := make([]time.Duration, len(arr))
	for k, t := range arr {
		at := start
		if k >= rc.Limit {
			at = arr[k-rc.Limit].Add(rc.Window)
		}
		lags[k] = max(0, t.Sub(at))
	}
	return lags
}

// quantileMS is the q-quantile of ds in milliseconds (nearest rank).
func quantileMS(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, max(0, int(math.Ceil(q*float64(len(s))))-1))
	return float64(s[i]) / float64(time.Millisecond)
}

// ScoreUpstreams returns the upstreams workload's metrics: per mix the
// makespan against the ideal (IdealSchedule of every destination, with
// the faults it actually injected counted as the attempts they cost), the
// share of attempts answered over-limit (429 or 503 from the limiter,
// faults not included), duplicates, lost deliveries and per destination
// its goodput (its ideal time ÷ its actual time: 1 means every
// opportunity the true limits offered was used), its finish and ideal
// times and its refusals, which show which destination set the makespan;
// then the worst mix's
// ratio, the overall share and the totals.
func ScoreUpstreams(p UpstreamsPlan, outs []MixOutcome) (Result, error) {
	r := Result{Workload: "upstreams"}
	var agg Result
	worst, minGood := 0.0, math.Inf(1)
	var limited, attempts, dups, lost int64
	for i, m := range p.Mixes {
		if i >= len(outs) {
			break
		}
		o := outs[i]
		mr, err := scoreMix(m, o)
		if err != nil {
			return r, fmt.Errorf("mix %s: %w", m.Name, err)
		}
		r.Metrics = append(r.Metrics, mr.metrics...)
		worst, minGood = math.Max(worst, mr.ratio), math.Min(minGood, mr.goodMin)
		limited, attempts = limited+mr.limited, attempts+mr.attempts
		dups, lost = dups+mr.dups, lost+int64(o.Lost)
	}
	if math.IsInf(minGood, 1) {
		minGood = 0
	}
	agg.add("makespan_ratio", worst, "of ideal (worst mix)")
	agg.add("rate_limited_share", share(limited, attempts), "of attempts (all mixes)")
	agg.add("duplicates", float64(dups), "")
	agg.add("lost", float64(lost), "deliveries")
	agg.add("goodput_min", minGood, "of ideal (worst destination)")
	if len(outs) > 0 {
		// Where in the upstream's second the senders started (the first
		// mix's; every mix of a run starts at the same phase).
		agg.add("start_phase_ms", float64(outs[0].Start.Nanosecond())/float64(time.Millisecond), "ms into a second")
	}
	r.Metrics = append(agg.Metrics, r.Metrics...)
	return r, nil
}

type mixScore struct {
	metrics           []Metric
	ratio, goodMin    float64
	limited, attempts int64
	dups              int64
}

func scoreMix(m UpstreamsMix, o MixOutcome) (mixScore, error) {
	var s mixScore
	var r Result
	var ideal, actual time.Duration
	s.goodMin = math.Inf(1)
	var goods []Metric
	var lags []time.Duration
	for _, d := range m.Destinations {
		rt := o.Report.Routes[d.Name]
		lags = append(lags, startLags(d.Route, o.Start, o.Arrivals[d.Name])...)
		times, err := upstream.IdealSchedule(d.Route, d.Jobs+int(rt.Transient), o.Start)
		if err != nil {
			return s, err
		}
		di := time.Duration(0)
		if len(times) > 0 {
			di = times[len(times)-1].Sub(o.Start)
		}
		da := rt.LastAccepted.Sub(o.Start)
		if rt.Accepted == 0 {
			da = 0
		}
		ideal, actual = max(ideal, di), max(actual, da)
		g := 1.0
		if da > 0 {
			g = math.Min(1, di.Seconds()/da.Seconds())
		}
		if int(rt.UniqueIDs) < d.Jobs {
			g *= float64(rt.UniqueIDs) / float64(d.Jobs) // undelivered work is unused allowance
		}
		s.goodMin = math.Min(s.goodMin, g)
		suffix := m.Name + "_" + d.Name
		goods = append(goods, Metric{Name: "goodput_" + suffix, Value: g, Unit: "of ideal"},
			// Which destination set the makespan, and what it cost: its
			// last acceptance against its own ideal, and its refusals.
			Metric{Name: "finish_seconds_" + suffix, Value: da.Seconds(), Unit: "s"},
			Metric{Name: "ideal_seconds_" + suffix, Value: di.Seconds(), Unit: "s"},
			Metric{Name: "refused_" + suffix, Value: float64(rt.RateLimited), Unit: "attempts"})
		s.limited, s.attempts, s.dups = s.limited+rt.RateLimited, s.attempts+rt.Attempts, s.dups+rt.Duplicates
	}
	if ideal <= 0 {
		ideal = time.Millisecond
	}
	s.ratio = actual.Seconds() / ideal.Seconds()
	r.add("makespan_ratio_"+m.Name, s.ratio, "of ideal")
	r.add("makespan_seconds_"+m.Name, actual.Seconds(), "s")
	r.add("ideal_seconds_"+m.Name, ideal.Seconds(), "s")
	r.add("rate_limited_share_"+m.Name, share(s.limited, s.attempts), "of attempts")
	r.add("duplicates_"+m.Name, float64(s.dups), "")
	r.add("lost_"+m.Name, float64(o.Lost), "deliveries")
	r.add("goodput_min_"+m.Name, s.goodMin, "of ideal")
	if len(lags) > 0 {
		// Per accepted start on a sliding-window destination: ms between
		// the moment its window allowed it and the moment it arrived.
		r.add("start_lag_p50_ms_"+m.Name, quantileMS(lags, 0.5), "ms")
		r.add("start_lag_p99_ms_"+m.Name, quantileMS(lags, 0.99), "ms")
	}
	s.metrics = append(r.Metrics, goods...)
	return s, nil
}
