package metrics

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of schedule ticks (ratelane_schedule_ticks_total's outcome).
const (
	// TickEnqueued: this node claimed the tick and inserted its job.
	TickEnqueued = "enqueued"
	// TickSkipped: the missed-tick policy dropped the tick, or its job
	// could no longer be admitted.
	TickSkipped = "skipped"
	// TickLost: another node (or an edit of the schedule) claimed first.
	TickLost = "lost"
)

func newTicksCounter() *prometheus.CounterVec {
	return counterVec("ratelane_schedule_ticks_total",
		"Schedule ticks handled by this node's producers, by region and outcome: enqueued, skipped (by the missed-tick policy) or lost (claimed by another node first).",
		"region", "outcome")
}

// ScheduleTicks counts one producer poll of a region: ticks enqueued,
// skipped and claims lost to another node.
func (m *Metrics) ScheduleTicks(region string, enqueued int, skipped int64, lost int) {
	if enqueued > 0 {
		m.ticks.WithLabelValues(region, TickEnqueued).Add(float64(enqueued))
	}
	if skipped > 0 {
		m.ticks.WithLabelValues(region, TickSkipped).Add(float64(skipped))
	}
	if lost > 0 {
		m.ticks.WithLabelValues(region, TickLost).Add(float64(lost))
	}
}
