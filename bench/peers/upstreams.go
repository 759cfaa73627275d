package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/ratelane/ratelane/internal/bench"
	"github.com/ratelane/ratelane/internal/upstream"
)

// The upstreams workload (bench.Upstreams) on the Go peers. Neither River
// nor asynq paces by itself; each is given the limiter its documentation
// recommends for rate-limited APIs, one golang.org/x/time/rate limiter
// per destination at the destination's declared limit (burst one
// second's worth), used the way that documentation shows:
//
//   - limitWait (River, which has no built-in rate limiting): the worker
//     waits on the limiter before calling, then a 429 (or 503 with
//     Retry-After) snoozes the job for the Retry-After;
//   - limitAllow (asynq's "Rate Limiting" wiki page): the handler asks the
//     limiter Allow() and, when refused, returns a rate-limit error that
//     RetryDelayFunc turns into the limiter's delay and IsFailure does not
//     count; a 429 returns the same error with the Retry-After.
//
// The naive baseline is no queue at all: ten goroutines, each sending one
// delivery at a time and sleeping on every 429 (or 503 with Retry-After)
// for its Retry-After (1 s when absent), on any other failure for 1 s.

// limitStyle is how a Go peer applies its per-destination limiter.
type limitStyle int

const (
	limitWait limitStyle = iota
	limitAllow
)

// upstreamsMixes runs every mix of the plan with runMix and scores them.
func upstreamsMixes(ctx context.Context, e *env, runMix func(context.Context, bench.UpstreamsPlan, bench.UpstreamsMix) (bench.MixOutcome, error)) (bench.Result, error) {
	plan := bench.Upstreams(e.smoke)
	// Each mix gets an equal share of the run's bound; what is still
	// undelivered at its end counts as lost.
	share := 5 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		share = time.Until(dl) / time.Duration(len(plan.Mixes))
	}
	var outs []bench.MixOutcome
	for _, m := range plan.Mixes {
		mctx, cancel := context.WithTimeout(ctx, share)
		o, err := runMix(mctx, plan, m)
		cancel()
		if err != nil {
			return bench.Result{}, fmt.Errorf("mix %s: %w", m.Name, err)
		}
		outs = append(outs, o)
	}
	return bench.ScoreUpstreams(plan, outs)
}

// newMixSim starts a simulator for mix m that records arrivals.
func newMixSim(m bench.UpstreamsMix) (*upstream.Server, error) {
	return upstream.New(upstream.Config{Routes: m.Routes(), Seed: 1, RecordArrivals: true})
}

// limiters returns one x/time/rate limiter per destination of m at its
// declared limit, burst one second's worth.
func limiters(m bench.UpstreamsMix) map[string]*rate.Limiter {
	ls := map[string]*rate.Limiter{}
	for _, d := range m.Destinations {
		ls[d.Name] = rate.NewLimiter(rate.Limit(d.Declared), d.Declared)
	}
	return ls
}

// waitDelivered waits until every delivery of m was accepted or ctx ends;
// the end of ctx is not an error (what is left counts as lost).
func waitDelivered(ctx context.Context, sim *upstream.Server, m bench.UpstreamsMix) error {
	total := m.Total()
	err := bench.WaitFor(ctx, func() bool { return bench.Delivered(sim.Stats()) >= total })
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// outcome is the mix's outcome from the simulator after the run.
func outcome(sim *upstream.Server, m bench.UpstreamsMix, start time.Time) bench.MixOutcome {
	rep := sim.Stats()
	return bench.MixOutcome{Start: start, Report: rep, Lost: max(0, m.Total()-bench.Delivered(rep))}
}

// runUpstreams runs the upstreams workload on a Go queue peer.
func runUpstreams(ctx context.Context, e *env, open opener, style limitStyle) (bench.Result, error) {
	return upstreamsMixes(ctx, e, func(ctx context.Context, plan bench.UpstreamsPlan, m bench.UpstreamsMix) (_ bench.MixOutcome, err error) {
		sim, err := newMixSim(m)
		if err != nil {
			return bench.MixOutcome{}, err
		}
		defer sim.Close()
		ls := limiters(m)
		q, err := open(ctx, e, plan.Workers, func(ctx context.Context, id string, j job) error {
			lim := ls[j.Dest]
			switch {
			case lim == nil:
			case style == limitWait:
				if err := lim.Wait(ctx); err != nil {
					return err
				}
			case !lim.Allow():
				r := lim.Reserve()
				d := r.Delay()
				r.Cancel()
				return &rateLimitedError{RetryAfter: d}
			}
			return e.post(ctx, j.URL, id)
		})
		if err != nil {
			return bench.MixOutcome{}, err
		}
		defer closeQueue(q, &err)
		var jobs []job
		for _, d := range m.Order() {
			jobs = append(jobs, job{URL: sim.RouteURL(d.Name), Dest: d.Name})
		}
		if err := insertAll(ctx, q, jobs, 1000); err != nil {
			return bench.MixOutcome{}, err
		}
		start, err := sim.StartScheduleAt(ctx, e.phase)
		if err != nil {
			return bench.MixOutcome{}, err
		}
		if err := q.start(ctx); err != nil {
			return bench.MixOutcome{}, err
		}
		if err := waitDelivered(ctx, sim, m); err != nil {
			return bench.MixOutcome{}, err
		}
		return outcome(sim, m, start), nil
	})
}

// naiveSenders is the naive baseline's number of goroutines.
const naiveSenders = 10

// runNaive runs the upstreams workload on the naive baseline.
func runNaive(ctx context.Context, e *env, workload string) (bench.Result, error) {
	if workload != "upstreams" {
		return bench.Result{}, fmt.Errorf("naive runs only the upstreams workload")
	}
	return upstreamsMixes(ctx, e, func(ctx context.Context, _ bench.UpstreamsPlan, m bench.UpstreamsMix) (bench.MixOutcome, error) {
		sim, err := newMixSim(m)
		if err != nil {
			return bench.MixOutcome{}, err
		}
		defer sim.Close()
		order := m.Order()
		var next atomic.Int64
		start, err := sim.StartScheduleAt(ctx, e.phase)
		if err != nil {
			return bench.MixOutcome{}, err
		}
		var wg sync.WaitGroup
		for range naiveSenders {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(order) || ctx.Err() != nil {
						return
					}
					naiveSend(ctx, e.http, sim.RouteURL(order[i].Name), fmt.Sprintf("naive-%d", i))
				}
			})
		}
		wg.Wait()
		return outcome(sim, m, start), nil
	})
}

// naiveSend posts one delivery until it is accepted or ctx ends.
func naiveSend(ctx context.Context, c *http.Client, url, id string) {
	for ctx.Err() == nil {
		status, retryAfter, err := bench.Deliver(ctx, c, url, id)
		switch {
		case err == nil && status >= 200 && status < 300:
			return
		case err == nil && bench.RateLimited(status, retryAfter):
			if retryAfter <= 0 {
				retryAfter = time.Second
			}
			_ = bench.Sleep(ctx, retryAfter)
		default:
			_ = bench.Sleep(ctx, time.Second)
		}
	}
}
