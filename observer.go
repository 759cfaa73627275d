package ratelane

import (
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/metrics"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/store"
)

// observer is the Observer of a region's writer (engine.Jobs): it tells the
// metrics about every lease, attempt and idempotent replay, whoever ran the
// job, and the region's review aggregator when a part finished.
type observer struct {
	metrics *metrics.Metrics
	agg     *pipeline.Aggregator
}

func (o *observer) Finished(j *job.Job, out job.Outcome, t store.Transition) {
	o.metrics.Finished(j, out, t)
	if o.agg != nil && j.Kind == pipeline.KindPart && j.ParentID != "" && t.To.Final() {
		o.agg.Wake(j.ParentID)
	}
}

func (o *observer) Leased(n int) { o.metrics.Leased(n) }

// IdempotentReplay counts an insert answered from an idempotency key.
func (o *observer) IdempotentReplay() { o.metrics.IdempotentReplay() }
