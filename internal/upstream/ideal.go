package upstream

import (
	"fmt"
	"time"
)

// maxIdeal bounds the requests IdealSchedule plans, so that a mistaken
// call cannot run for ever.
const maxIdeal = 10_000_000

// IdealSchedule returns the arrival times of the first n requests a
// sender that knows rc exactly — its algorithm, its limit and every
// scheduled change — would get admitted, starting at start (the schedule
// epoch, as set with [Server.StartSchedule]): each request arrives at the
// earliest moment the route admits it. It runs the simulator's own
// limiter, so the schedule is exact for every algorithm: a full bucket's
// burst at once, a window's limit at once and again as it frees up, the
// new limit from the moment it changes. A concurrency cap
// (MaxConcurrent) holds each request's slot for Latency.Fixed, the least
// latency the route answers with, so the ideal stays a lower bound.
// Otherwise injected faults, latency and the script queue play no part; a caller that saw f faults admitted (they
// count against the limit) asks for n+f.
//
// Most callers want the last time: the ideal makespan of n deliveries.
func IdealSchedule(rc RouteConfig, n int, start time.Time) ([]time.Time, error) {
	rc = rc.WithDefaults()
	if err := rc.validate(); err != nil {
		return nil, err
	}
	if n < 0 || n > maxIdeal {
		return nil, fmt.Errorf("upstream: IdealSchedule of %d requests: want 0..%d", n, maxIdeal)
	}
	rt := &route{cfg: rc, lim: newLimiter(rc, nil, start), epoch: start}
	out := make([]time.Time, 0, n)
	now := start
	// With a concurrency cap, each request holds a slot for the least
	// latency the route answers with: slots are the times they free.
	var slots []time.Time
	if rc.MaxConcurrent > 0 {
		slots = make([]time.Time, rc.MaxConcurrent)
		for i := range slots {
			slots[i] = start
		}
	}
	for len(out) < n {
		slot := -1
		if len(slots) > 0 {
			slot = 0
			for i, t := range slots {
				if t.Before(slots[slot]) {
					slot = i
				}
			}
			if slots[slot].After(now) {
				now = slots[slot]
			}
		}
		rt.due(now)
		d := rt.lim.take(now)
		if d.allowed {
			out = append(out, now)
			if slot >= 0 {
				slots[slot] = now.Add(rc.Latency.Fixed)
			}
			continue
		}
		next := now.Add(max(d.retryAfter, time.Nanosecond))
		if rt.applied < len(rt.cfg.Changes) {
			if at := start.Add(rt.cfg.Changes[rt.applied].After); at.Before(next) {
				next = at // a rise may admit sooner than the old limit says
			}
		}
		now = next
	}
	return out, nil
}
