package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/engine"
)

// YieldSource is a region's engine as the yield collector reads it: how
// often and how long its batch-lane work waited for interactive work in
// flight. *engine.Engine is one.
type YieldSource interface {
	YieldCounts() engine.YieldCounts
}

// yieldCollector reports each region's yield-gate counts at scrape time
// (a few atomic loads).
type yieldCollector struct {
	pieces, seconds *prometheus.Desc
	sources         regionSources[YieldSource]
}

func newYieldCollector() *yieldCollector {
	return &yieldCollector{
		pieces: prometheus.NewDesc("ratelane_batch_yield_total",
			"Pieces of batch-lane work (a batch job's handler or one of its steps, a batch parent's aggregation, a sweep's step, a batch job's publication) at the engine's yield gate, by result: passed (no interactive work in flight), held (waited until none was), bounded (released by the bound, BatchYieldMax, with interactive work still in flight).",
			[]string{"region", "result"}, nil),
		seconds: prometheus.NewDesc("ratelane_batch_yield_seconds_total",
			"Time batch-lane work waited at the engine's yield gate for interactive work in flight, summed over its pieces.",
			[]string{"region"}, nil),
	}
}

// AddYield makes scrapes report region's yield-gate counts read from src
// (the region's engine). Adding a region again replaces its source.
func (m *Metrics) AddYield(region string, src YieldSource) {
	m.yield.sources.add(region, src)
}

// Describe sends the collector's descriptors.
func (c *yieldCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pieces
	ch <- c.seconds
}

// Collect reports each region's counts.
func (c *yieldCollector) Collect(ch chan<- prometheus.Metric) {
	c.sources.each(func(r string, src YieldSource) {
		y := src.YieldCounts()
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(y.Passed), r, "passed")
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(y.Held), r, "held")
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(y.Bounded), r, "bounded")
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, y.HeldSeconds, r)
	})
}
