package ratelane

import (
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/metrics"
	"github.com/ratelane/ratelane/internal/store"
)

// observer is the Observer of a region's writer (engine.Jobs): it tells the
// metrics about every lease, attempt and idempotent replay, whoever ran the
// job, and the plug-ins that asked (PluginRegion.OnFinished). (A parent's
// aggregation needs no such hook: the engine's parts capability is woken
// by the writer itself.)
type observer struct {
	metrics *metrics.Metrics
	// finished is set by plug-ins' Bind, before anything runs, and only
	// read afterwards.
	finished []func(*Job, State)
	// published is set like finished (PluginRegion.OnPublished).
	published []func(id string)
}

func (o *observer) Finished(j *job.Job, out job.Outcome, t store.Transition) {
	o.metrics.Finished(j, out, t)
	for _, fn := range o.finished {
		fn(j, t.To)
	}
}

func (o *observer) Leased(n int) { o.metrics.Leased(n) }

// Published tells the plug-ins that asked (PluginRegion.OnPublished) of a
// recorded publication (engine.PublishedObserver).
func (o *observer) Published(id string) {
	for _, fn := range o.published {
		fn(id)
	}
}

// IdempotentReplay counts an insert answered from an idempotency key.
func (o *observer) IdempotentReplay() { o.metrics.IdempotentReplay() }
