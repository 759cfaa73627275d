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

// yieldCollector reports each region's yield-gate counts at scrape time
// (a few atomic loads).
type yieldCollector struct {
	pieces, seconds *prometheus.Desc

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
		sources: map[string]YieldSource{},
	}
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
	c.mu.Unlock()
	sort.Strings(regions)
	for _, r := range regions {
		passed, held, bounded, secs := sources[r].BatchYield()
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(passed), r, "passed")
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(held), r, "held")
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(bounded), r, "bounded")
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, secs, r)
	}
}
