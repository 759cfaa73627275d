package ratelane

import (
	"github.com/ratelane/ratelane/internal/schedule"
)

// openSchedules makes the region's periodic producer: it enqueues the due
// ticks of the region's schedules (created over the HTTP API) through the
// region's writer, and wakes the region's engine when it did. Every node
// runs one per region; the store's guarded claim lets exactly one of them
// enqueue each tick.
func (c *Client) openSchedules(rt *regionRT, region string) error {
	p, err := schedule.New(schedule.Config{
		Store: rt.store, Jobs: rt.jobs, Regions: c.order, DefaultLimit: c.cfg.DefaultLimit,
		Now: c.cfg.Now, Logger: c.cfg.Logger,
		OnEnqueue: func() {
			if rt.engine != nil {
				rt.engine.Notify()
			}
		},
		Observe: func(r schedule.Result) { c.metrics.ScheduleTicks(region, r.Enqueued, r.Skipped, r.Lost) },
	})
	rt.producer = p
	return err
}
