package metrics

import (
	"testing"

	"github.com/ratelane/ratelane/internal/engine"
)

// fixedYield is a region's yield-gate totals as an engine reports them.
type fixedYield engine.YieldCounts

func (y fixedYield) YieldCounts() engine.YieldCounts { return engine.YieldCounts(y) }

// TestYieldCounts: each region's yield-gate totals are reported at every
// scrape, by result, regions in order, and a region added again reports
// its new source.
func TestYieldCounts(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	m.AddYield("us", fixedYield{Passed: 5, Held: 2, Bounded: 1, HeldSeconds: 0.25})
	m.AddYield("eu", fixedYield{Passed: 1})
	m.AddYield("eu", fixedYield{Passed: 3, Held: 1, HeldSeconds: 0.5})
	wantScrape(t, reg, []string{"ratelane_batch_yield_total", "ratelane_batch_yield_seconds_total"},
		`ratelane_batch_yield_total{region="eu",result="bounded"} 0`,
		`ratelane_batch_yield_total{region="eu",result="held"} 1`,
		`ratelane_batch_yield_total{region="eu",result="passed"} 3`,
		`ratelane_batch_yield_total{region="us",result="bounded"} 1`,
		`ratelane_batch_yield_total{region="us",result="held"} 2`,
		`ratelane_batch_yield_total{region="us",result="passed"} 5`,
		`ratelane_batch_yield_seconds_total{region="eu"} 0.5`,
		`ratelane_batch_yield_seconds_total{region="us"} 0.25`,
	)
}

// fixedBudget is a region's engine with batch-budget and governor figures.
type fixedBudget struct {
	fixedYield
	b engine.BudgetCounts
}

func (f fixedBudget) BudgetCounts() engine.BudgetCounts { return f.b }

// TestBudgetCounts: the governor's turns held and pieces waiting are
// gauges, its leases counters, per region.
func TestBudgetCounts(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	m.AddYield("us", fixedBudget{b: engine.BudgetCounts{Passed: 4, Held: 2, HeldSeconds: 1.5, Leased: 7, Capped: 3, Running: 1, Waiting: 5}})
	wantScrape(t, reg, []string{"ratelane_batch_budget_pieces", "ratelane_batch_budget_leases_total"},
		`ratelane_batch_budget_pieces{region="us",state="running"} 1`,
		`ratelane_batch_budget_pieces{region="us",state="waiting"} 5`,
		`ratelane_batch_budget_leases_total{region="us",result="capped"} 3`,
		`ratelane_batch_budget_leases_total{region="us",result="leased"} 7`,
	)
}

// fixedOverlap is a region's engine with overlap totals.
type fixedOverlap struct {
	fixedYield
	o engine.OverlapCounts
}

func (f fixedOverlap) OverlapCounts() engine.OverlapCounts { return f.o }

// TestOverlapCounts: the engine's interactive, batch-computing and
// overlapped times are counters by what ran, per region.
func TestOverlapCounts(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	m.AddYield("us", fixedOverlap{o: engine.OverlapCounts{InteractiveSeconds: 3, BatchSeconds: 8, BothSeconds: 1.25}})
	wantScrape(t, reg, []string{"ratelane_batch_overlap_seconds_total"},
		`ratelane_batch_overlap_seconds_total{region="us",running="batch"} 8`,
		`ratelane_batch_overlap_seconds_total{region="us",running="both"} 1.25`,
		`ratelane_batch_overlap_seconds_total{region="us",running="interactive"} 3`,
	)
}
