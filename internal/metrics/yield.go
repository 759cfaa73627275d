package metrics

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// YieldSource is a region's engine as the yield collector reads it: how
// often and how long its batch-lane work waited for interactive work in
// flight (engine.Engine.YieldCounts, taken apart so that this package
// does not import the engine).
type YieldSource interface {
	BatchYield() (passed, held, bounded int64, heldSeconds float64)
}

// StageSource is a region's engine as the stage collector reads it: the
// time each lane's jobs spent in each stage (engine.Engine.Stages: counts
// per bucket of bounds, not cumulative, the last for +Inf; the sum in
// seconds). A YieldSource that also implements it is read for both.
type StageSource interface {
	Stages(visit func(lane, stage string, counts []uint64, sumSeconds float64))
}

// BudgetSource is a region's engine as the budget collector reads it:
// how many pieces of batch-lane work the batch budget let through at once
// and how many it held for a turn, and for how long
// (engine.Engine.BudgetCounts). A YieldSource that also implements it is
// read for both.
type BudgetSource interface {
	BatchBudget() (passed, held int64, heldSeconds float64)
}

// yieldCollector reports each region's yield-gate counts, stage times and
// batch budget at scrape time (atomic loads).
type yieldCollector struct {
	pieces, seconds *prometheus.Desc
	stages          *prometheus.Desc
	budget, budgetS *prometheus.Desc
	// bounds are the stage histograms' bucket bounds (engine.StageBounds).
	bounds []float64

	mu      sync.Mutex
	sources map[string]YieldSource
}

func newYieldCollector() *yieldCollector {
	return &yieldCollector{
		pieces: prometheus.NewDesc("ratelane_batch_yield_total",
			"Pieces of batch-lane work (a batch job's handler or one of its steps, a batch parent's aggregation, a sweep's step, a batch job's publication) at the engine's yield gate, by result: passed (no interactive work in flight), held (waited until none was), bounded (released by the bound, BatchYieldMax, with interactive work still in flight).",
			[]string{"region", "result"}, nil),
		seconds: prometheus.NewDesc("ratelane_batch_yield_seconds_total",
			"Time batch-lane work waited at the engine's yield gate for interactive work in flight, summed over its pieces.",
			[]string{"region"}, nil),
		stages: prometheus.NewDesc("ratelane_engine_stage_seconds",
			"Time jobs spent in each stage of their way through the engine, by lane: queued (ready to leased), start (leased to handler running), run, finish (handler returned to outcome written), aggregate_wait (a parent woken to its aggregation), aggregate, publish_wait (validated to a publisher taking it), publish.",
			[]string{"region", "lane", "stage"}, nil),
		budget: prometheus.NewDesc("ratelane_batch_budget_total",
			"Pieces of batch-lane work (a handler, an aggregation, a sweep step, a publication) at the engine's batch budget, by result: passed (a turn was free, or no interactive work was in flight), held (waited for a turn while interactive work was in flight).",
			[]string{"region", "result"}, nil),
		budgetS: prometheus.NewDesc("ratelane_batch_budget_seconds_total",
			"Time batch-lane work waited at the engine's batch budget for a turn, summed over its pieces.",
			[]string{"region"}, nil),
		sources: map[string]YieldSource{},
	}
}

// SetStageBounds sets the stage histograms' bucket bounds (seconds), which
// the engine defines (engine.StageBounds).
func (m *Metrics) SetStageBounds(bounds []float64) {
	m.yield.mu.Lock()
	defer m.yield.mu.Unlock()
	m.yield.bounds = bounds
}

// AddYield makes scrapes report region's yield-gate counts read from src
// (the region's engine). Adding a region again replaces its source.
func (m *Metrics) AddYield(region string, src YieldSource) {
	m.yield.mu.Lock()
	defer m.yield.mu.Unlock()
	m.yield.sources[region] = src
}

// Describe sends the collector's descriptors.
func (c *yieldCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pieces
	ch <- c.seconds
	ch <- c.stages
	ch <- c.budget
	ch <- c.budgetS
}

// Collect reports each region's counts.
func (c *yieldCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	regions := make([]string, 0, len(c.sources))
	for r := range c.sources {
		regions = append(regions, r)
	}
	sources := make(map[string]YieldSource, len(c.sources))
	for r, s := range c.sources {
		sources[r] = s
	}
	bounds := c.bounds
	c.mu.Unlock()
	sort.Strings(regions)
	for _, r := range regions {
		passed, held, bounded, secs := sources[r].BatchYield()
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(passed), r, "passed")
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(held), r, "held")
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(bounded), r, "bounded")
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, secs, r)
		if b, ok := sources[r].(BudgetSource); ok {
			passed, held, secs := b.BatchBudget()
			ch <- prometheus.MustNewConstMetric(c.budget, prometheus.CounterValue, float64(passed), r, "passed")
			ch <- prometheus.MustNewConstMetric(c.budget, prometheus.CounterValue, float64(held), r, "held")
			ch <- prometheus.MustNewConstMetric(c.budgetS, prometheus.CounterValue, secs, r)
		}
		if s, ok := sources[r].(StageSource); ok && len(bounds) > 0 {
			s.Stages(func(lane, stage string, counts []uint64, sum float64) {
				if len(counts) != len(bounds)+1 {
					return // an engine of another build: bounds do not match
				}
				buckets := make(map[float64]uint64, len(bounds))
				var cum uint64
				for i, b := range bounds {
					cum += counts[i]
					buckets[b] = cum
				}
				ch <- prometheus.MustNewConstHistogram(c.stages, cum+counts[len(bounds)], sum, buckets, r, lane, stage)
			})
		}
	}
}
