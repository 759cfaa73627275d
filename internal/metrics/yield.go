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

// StageSource is a region's engine as the stage collector reads it: the
// time each lane's jobs spent in each stage (engine.Engine.Stages: counts
// per bucket of engine.StageBounds, not cumulative, the last for +Inf; the sum in
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
	BudgetCounts() engine.BudgetCounts
}

// OverlapSource is a region's engine as the overlap collector reads it:
// how long interactive work was in flight, how long computing batch-lane
// pieces ran, and how long both at once (engine.Engine.OverlapCounts). A
// YieldSource that also implements it is read for both.
type OverlapSource interface {
	OverlapCounts() engine.OverlapCounts
}

// yieldCollector reports each region's yield-gate counts, stage times and
// batch budget at scrape time (atomic loads).
type yieldCollector struct {
	pieces, seconds *prometheus.Desc
	stages          *prometheus.Desc
	budget, budgetS *prometheus.Desc
	turns, leases   *prometheus.Desc
	rest, rests     *prometheus.Desc
	charged, tWall  *prometheus.Desc
	overlap         *prometheus.Desc
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
		stages: prometheus.NewDesc("ratelane_engine_stage_seconds",
			"Time jobs spent in each stage of their way through the engine, by lane: queued (ready to leased), start (leased to handler running), run, finish (handler returned to outcome written), aggregate_wait (a parent woken to its aggregation), aggregate, publish_wait (validated to a publisher taking it), publish.",
			[]string{"region", "lane", "stage"}, nil),
		budget: prometheus.NewDesc("ratelane_batch_budget_total",
			"Pieces of batch-lane work (a handler, an aggregation, a sweep step, a publication) at the engine's batch budget, by result: passed (a turn was free, or no interactive work was in flight), held (waited for a turn while interactive work was in flight).",
			[]string{"region", "result"}, nil),
		budgetS: prometheus.NewDesc("ratelane_batch_budget_seconds_total",
			"Time batch-lane work waited at the engine's batch budget for a turn, summed over its pieces.",
			[]string{"region"}, nil),
		turns: prometheus.NewDesc("ratelane_batch_budget_pieces",
			"Pieces of batch-lane work at the engine's CPU governor now, by state: running (holding a turn, at most BatchCPUs; a turn kept for the next lease counts), waiting (for a turn).",
			[]string{"region", "state"}, nil),
		rest: prometheus.NewDesc("ratelane_batch_pace_rest_seconds_total",
			"Wall time the batch pacer (BatchCPUShare) rested the engine's computing batch turns while interactive work was about: no computing batch-lane piece started meanwhile. Overlapping rests count once.",
			[]string{"region"}, nil),
		rests: prometheus.NewDesc("ratelane_batch_pace_rests_total",
			"Rests the batch pacer (BatchCPUShare) began or lengthened after a computing batch-lane piece while interactive work was about.",
			[]string{"region"}, nil),
		charged: prometheus.NewDesc("ratelane_batch_pace_charged_seconds_total",
			"Time the batch pacer (BatchCPUShare) was charged, by clock: wall (computing batch-lane pieces by their wall time, and batch-lane writes by the store writer's time), thread_cpu (pieces on idle threads, BatchThreadPolicy idle, by their thread's CPU time). It rests the lane share's complement of each charge while interactive work is about.",
			[]string{"region", "clock"}, nil),
		tWall: prometheus.NewDesc("ratelane_batch_pace_thread_wall_seconds_total",
			"Wall time the batch-lane pieces the pacer charged by their idle thread's CPU time spanned (what wall time would have charged them).",
			[]string{"region"}, nil),
		overlap: prometheus.NewDesc("ratelane_batch_overlap_seconds_total",
			"Time, since the engine's first computing batch-lane piece, that interactive work was in flight in the engine (running=interactive), that computing batch-lane pieces ran (running=batch: a sweep stretch, an aggregation, a computing batch handler between its Yields), and that both did at once (running=both). both over interactive is the share of interactive flight that batch computing overlapped.",
			[]string{"region", "running"}, nil),
		leases: prometheus.NewDesc("ratelane_batch_budget_leases_total",
			"Batch-lane jobs leased with a turn of the engine's CPU governor (result leased), and leases that asked the store for no batch job because no turn was free (result capped).",
			[]string{"region", "result"}, nil),
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
	ch <- c.stages
	ch <- c.budget
	ch <- c.budgetS
	ch <- c.turns
	ch <- c.leases
	ch <- c.rest
	ch <- c.rests
	ch <- c.charged
	ch <- c.tWall
	ch <- c.overlap
}

// Collect reports each region's counts.
func (c *yieldCollector) Collect(ch chan<- prometheus.Metric) {
	c.sources.each(func(r string, src YieldSource) {
		y := src.YieldCounts()
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(y.Passed), r, "passed")
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(y.Held), r, "held")
		ch <- prometheus.MustNewConstMetric(c.pieces, prometheus.CounterValue, float64(y.Bounded), r, "bounded")
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, y.HeldSeconds, r)
		if b, ok := src.(BudgetSource); ok {
			bc := b.BudgetCounts()
			ch <- prometheus.MustNewConstMetric(c.budget, prometheus.CounterValue, float64(bc.Passed), r, "passed")
			ch <- prometheus.MustNewConstMetric(c.budget, prometheus.CounterValue, float64(bc.Held), r, "held")
			ch <- prometheus.MustNewConstMetric(c.budgetS, prometheus.CounterValue, bc.HeldSeconds, r)
			ch <- prometheus.MustNewConstMetric(c.turns, prometheus.GaugeValue, float64(bc.Running), r, "running")
			ch <- prometheus.MustNewConstMetric(c.turns, prometheus.GaugeValue, float64(bc.Waiting), r, "waiting")
			ch <- prometheus.MustNewConstMetric(c.leases, prometheus.CounterValue, float64(bc.Leased), r, "leased")
			ch <- prometheus.MustNewConstMetric(c.leases, prometheus.CounterValue, float64(bc.Capped), r, "capped")
			ch <- prometheus.MustNewConstMetric(c.rest, prometheus.CounterValue, bc.RestSeconds, r)
			ch <- prometheus.MustNewConstMetric(c.rests, prometheus.CounterValue, float64(bc.Rests), r)
			ch <- prometheus.MustNewConstMetric(c.charged, prometheus.CounterValue, bc.ChargedSeconds-bc.ThreadCPUSeconds, r, "wall")
			ch <- prometheus.MustNewConstMetric(c.charged, prometheus.CounterValue, bc.ThreadCPUSeconds, r, "thread_cpu")
			ch <- prometheus.MustNewConstMetric(c.tWall, prometheus.CounterValue, bc.ThreadWallSeconds, r)
		}
		if o, ok := src.(OverlapSource); ok {
			oc := o.OverlapCounts()
			ch <- prometheus.MustNewConstMetric(c.overlap, prometheus.CounterValue, oc.InteractiveSeconds, r, "interactive")
			ch <- prometheus.MustNewConstMetric(c.overlap, prometheus.CounterValue, oc.BatchSeconds, r, "batch")
			ch <- prometheus.MustNewConstMetric(c.overlap, prometheus.CounterValue, oc.BothSeconds, r, "both")
		}
		if s, ok := src.(StageSource); ok {
			s.Stages(func(lane, stage string, counts []uint64, sum float64) {
				buckets := make(map[float64]uint64, len(engine.StageBounds))
				var cum uint64
				for i, b := range engine.StageBounds {
					cum += counts[i]
					buckets[b] = cum
				}
				ch <- prometheus.MustNewConstHistogram(c.stages, cum+counts[len(engine.StageBounds)], sum, buckets, r, lane, stage)
			})
		}
	})
}
