package bench

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// The plans below are the workloads' sizes and the scorers turn what a run
// measured into the reported metrics. ratelane's own runners use them, and
// so does the peers benchmark (bench/peers), so every system is given the
// same work and scored by the same code.

// ThroughputPlan is the throughput workload: Jobs no-op jobs inserted in
// batches of InsertBatch with no worker running, drained by Workers
// workers, then a steady load of batches of SteadyBatch for Latency.
type ThroughputPlan struct {
	// Jobs is the backlog drained to measure jobs per second.
	Jobs int
	// Workers is the concurrency (jobs in flight at once).
	Workers int
	// Keys is how many unpaced limit keys ratelane spreads the jobs over.
	Keys int
	// InsertBatch is the size of one bulk insert call.
	InsertBatch int
	// SteadyBatch is the size of one insert of the steady-load phase.
	SteadyBatch int
	// Latency is the length of the steady-load phase.
	Latency time.Duration
}

// Throughput returns the throughput plan, shrunk to a few seconds when
// smoke is set.
func Throughput(smoke bool) ThroughputPlan {
	p := ThroughputPlan{Jobs: 20_000, Workers: 64, Keys: 16, InsertBatch: 1000, SteadyBatch: 10, Latency: 5 * time.Second}
	if smoke {
		p.Jobs, p.Latency = 2_000, time.Second
	}
	return p
}

// Offered returns the steady load offered after a drain at jobsPerSecond:
// half of it, within [100, 2000] jobs/s.
func (p ThroughputPlan) Offered(jobsPerSecond float64) float64 {
	return max(100, min(2000, jobsPerSecond/2))
}

// Period returns the interval between two steady-load batches that offers
// offered jobs per second.
func (p ThroughputPlan) Period(offered float64) time.Duration {
	return time.Duration(float64(p.SteadyBatch) * float64(time.Second) / offered)
}

// ThroughputOutcome is what one throughput run measured.
type ThroughputOutcome struct {
	// InsertRate is Jobs divided by the time the bulk inserts took, in jobs/s.
	InsertRate float64
	// Rate is Jobs divided by the drain time, in jobs/s.
	Rate float64
	// Offered is the steady load offered, in jobs/s (see Offered).
	Offered float64
	// P50Ms and P99Ms are the steady load's enqueue-to-start waits, in ms
	// (nearest rank; see Percentile).
	P50Ms, P99Ms float64
}

// ScoreThroughput returns the throughput workload's metrics.
func ScoreThroughput(p ThroughputPlan, o ThroughputOutcome) Result {
	r := Result{Workload: "throughput"}
	r.add("jobs", float64(p.Jobs), "jobs")
	r.add("workers", float64(p.Workers), "")
	r.add("insert_jobs_per_second", o.InsertRate, "jobs/s")
	r.add("jobs_per_second", o.Rate, "jobs/s")
	r.add("offered_jobs_per_second", o.Offered, "jobs/s")
	r.add("enqueue_to_start_p50_ms", o.P50Ms, "ms")
	r.add("enqueue_to_start_p99_ms", o.P99Ms, "ms")
	return r
}

// PacedDestination is one destination of the paced workload: a simulator
// route, its advertised limit and how many deliveries it gets.
type PacedDestination struct {
	// Name is the simulator route (and ratelane's limit key).
	Name string
	// Rate is the allowance in requests per second.
	Rate int
	// Burst is the token bucket's depth: a quarter second's worth, at least 1.
	Burst int
	// Jobs is Rate x the plan's seconds, so every ideal makespan is the same.
	Jobs int
}

// PacedPlan is the paced workload: deliveries to destinations with
// allowances spread geometrically from 2/s to 40/s, each answering 429 with
// Retry-After past its limit.
type PacedPlan struct {
	// Destinations are in name order.
	Destinations []PacedDestination
	// Workers is the concurrency.
	Workers int
}

// Paced returns the paced plan: 10 destinations with 10 s of work each, or
// 4 with 3 s when smoke is set.
func Paced(smoke bool) PacedPlan {
	dests, seconds := 10, 10
	if smoke {
		dests, seconds = 4, 3
	}
	p := PacedPlan{Workers: 64}
	for i := range dests {
		rate := max(2, int(math.Round(2*math.Pow(20, float64(i)/float64(max(1, dests-1))))))
		p.Destinations = append(p.Destinations, PacedDestination{
			Name: fmt.Sprintf("dest-%02d", i), Rate: rate, Burst: max(1, rate/4), Jobs: rate * seconds,
		})
	}
	return p
}

// Routes returns the simulator routes of the plan's destinations.
func (p PacedPlan) Routes() map[string]upstream.RouteConfig {
	routes := map[string]upstream.RouteConfig{}
	for _, d := range p.Destinations {
		routes[d.Name] = upstream.RouteConfig{Rate: float64(d.Rate), Burst: d.Burst}
	}
	return routes
}

// Order returns every job's destination in insertion order: round-robin
// over the destinations, so none is served first by order.
func (p PacedPlan) Order() []PacedDestination {
	return roundRobin(p.Destinations, func(d PacedDestination) int { return d.Jobs })
}

// roundRobin lists each destination jobs(d) times, taking one of each in
// turn until every destination's jobs are listed.
func roundRobin[D any](ds []D, jobs func(D) int) []D {
	most := 0
	for _, d := range ds {
		most = max(most, jobs(d))
	}
	var order []D
	for i := range most {
		for _, d := range ds {
			if i < jobs(d) {
				order = append(order, d)
			}
		}
	}
	return order
}

// ScorePaced returns the paced workload's metrics from the simulator's
// report taken after every job succeeded, and the time the workers started.
func ScorePaced(p PacedPlan, rep upstream.Report, start time.Time) Result {
	var last time.Time
	var jobs, allowance int
	var limited, attempts, dups, innerAcc, innerLim int64
	var goodputs []float64
	ideal := 0.0
	for _, d := range p.Destinations {
		jobs, allowance = jobs+d.Jobs, allowance+d.Rate
		ideal = math.Max(ideal, float64(d.Jobs-d.Burst)/float64(d.Rate))
		rt := rep.Routes[d.Name]
		if rt.LastAccepted.After(last) {
			last = rt.LastAccepted
		}
		limited += rt.RateLimited
		attempts += rt.Attempts
		dups += rt.Duplicates
		g, a, l := InnerRate(rt)
		innerAcc, innerLim = innerAcc+a, innerLim+l
		goodputs = append(goodputs, g/float64(d.Rate))
	}
	makespan := last.Sub(start).Seconds()
	r := Result{Workload: "paced"}
	r.add("destinations", float64(len(p.Destinations)), "")
	r.add("jobs", float64(jobs), "jobs")
	r.add("allowance_per_second", float64(allowance), "req/s")
	r.add("goodput", mean(goodputs), "of allowance (mean per destination, after the first second)")
	r.add("goodput_min", minOf(goodputs), "of allowance")
	r.add("rate_limited_share", share(limited, attempts), "of attempts")
	r.add("rate_limited_share_after_first_second", share(innerLim, innerAcc+innerLim), "of answers")
	r.add("duplicates", float64(dups), "")
	r.add("makespan_seconds", makespan, "s")
	r.add("makespan_ratio", makespan/ideal, "of ideal")
	return r
}

// FloodPlan is the flood workload: a batch backlog on one destination
// limited to Rate, and interactive jobs at InteractiveRate on the same
// destination for Window, starting 1 s after the workers.
type FloodPlan struct {
	// Route is the simulator route.
	Route string
	// Rate and Burst are the destination's limit (requests/s, bucket depth).
	Rate, Burst int
	// InteractiveRate is how many interactive jobs are submitted per second.
	InteractiveRate int
	// Backlog is the number of batch jobs inserted before the start.
	Backlog int
	// Window is how long interactive jobs are submitted.
	Window time.Duration
	// Workers is the concurrency.
	Workers int
}

// Flood returns the flood plan: 100,000 batch jobs and a 20 s window, or
// 2,000 and 3 s when smoke is set.
func Flood(smoke bool) FloodPlan {
	p := FloodPlan{Route: "dest", Rate: 100, Burst: 25, InteractiveRate: 5, Backlog: 100_000, Window: 20 * time.Second, Workers: 32}
	if smoke {
		p.Backlog, p.Window = 2_000, 3*time.Second
	}
	return p
}

// Routes returns the simulator route of the plan's destination.
func (p FloodPlan) Routes() map[string]upstream.RouteConfig {
	return map[string]upstream.RouteConfig{p.Route: {Rate: float64(p.Rate), Burst: p.Burst}}
}

// FloodOutcome is what one flood run measured.
type FloodOutcome struct {
	// Interactive is how many interactive jobs were submitted.
	Interactive int
	// P50Ms, P99Ms and MaxMs are the interactive jobs' waits from enqueue
	// to successful delivery, in ms (nearest rank; see Percentile).
	P50Ms, P99Ms, MaxMs float64
	// BatchInWindow counts batch successes inside the window.
	BatchInWindow int64
	// WindowSeconds is the window's measured length.
	WindowSeconds float64
}

// ScoreFlood returns the flood workload's metrics from the run's outcome
// and the simulator's report.
func ScoreFlood(p FloodPlan, o FloodOutcome, rep upstream.Report) Result {
	st := rep.Routes[p.Route]
	r := Result{Workload: "flood"}
	r.add("batch_backlog", float64(p.Backlog), "jobs")
	r.add("interactive_jobs", float64(o.Interactive), "jobs")
	r.add("interactive_p50_ms", o.P50Ms, "ms")
	r.add("interactive_p99_ms", o.P99Ms, "ms")
	r.add("interactive_max_ms", o.MaxMs, "ms")
	r.add("goodput", float64(o.BatchInWindow)/o.WindowSeconds/float64(p.Rate-p.InteractiveRate), "of the allowance left to batch")
	r.add("rate_limited_share", share(st.RateLimited, st.Attempts), "of attempts")
	r.add("duplicates", float64(st.Duplicates), "")
	return r
}

// Percentile returns the p-quantile (0..1) of ds in milliseconds (nearest
// rank), or 0 when ds is empty. It sorts ds.
func Percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return float64(ds[max(0, min(len(ds)-1, i))]) / float64(time.Millisecond)
}
