package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/upstream"
)

// runFlood inserts a batch backlog on a destination limited to 100/s (the
// key paced at the same rate), starts the engine, and submits interactive
// jobs at 5/s on the same key for the measurement window: interactive
// enqueue-to-start waits and batch goodput (batch successes/s ÷ the 95/s
// the interactive jobs leave).
func runFlood(ctx context.Context, e *env) (Result, error) {
	const rate, interactiveRate = 100, 5
	backlog, window := 100_000, 20*time.Second
	if e.opts.Smoke {
		backlog, window = 2_000, 3*time.Second
	}
	sim, err := e.sim(map[string]upstream.RouteConfig{"dest": {Rate: rate, Burst: rate / 4}})
	if err != nil {
		return Result{}, err
	}
	url := sim.RouteURL("dest")
	var (
		mu        sync.Mutex
		waits     []time.Duration
		seen      = map[string]bool{}
		batchOK   atomic.Int64
		interDone atomic.Int64
	)
	cfg := ratelane.Config{Workers: 32, Limits: []ratelane.Limit{ratelane.UpstreamLimit("dest", rate, rate/4)}}
	cfg.Handle("deliver", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		if j.Lane == ratelane.LaneInteractive {
			w := time.Since(j.CreatedAt)
			mu.Lock()
			if !seen[j.ID] {
				seen[j.ID] = true
				waits = append(waits, w)
			}
			mu.Unlock()
		}
		err := e.post(ctx, url, j.ID)
		if err == nil {
			if j.Lane == ratelane.LaneInteractive {
				interDone.Add(1)
			} else {
				batchOK.Add(1)
			}
		}
		return nil, err
	}))
	c, err := e.client(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	ps := make([]ratelane.InsertParams, backlog)
	for i := range ps {
		ps[i] = ratelane.InsertParams{Kind: "deliver", Region: "us", LimitKeys: []string{"dest"}}
	}
	if err := insert(ctx, c, ps); err != nil {
		return Result{}, err
	}
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	// Let the batch lane reach its pace, then measure.
	if err := sleepUntil(ctx, time.Now().Add(time.Second)); err != nil {
		return Result{}, err
	}
	b0, t0 := batchOK.Load(), time.Now()
	tick := time.NewTicker(time.Second / interactiveRate)
	defer tick.Stop()
	sent := 0
	for time.Since(t0) < window {
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-tick.C:
		}
		if _, err := c.Insert(ctx, ratelane.InsertParams{Kind: "deliver", Region: "us", Lane: ratelane.LaneInteractive,
			LimitKeys: []string{"dest"}}); err != nil {
			return Result{}, err
		}
		sent++
	}
	batch, span := batchOK.Load()-b0, time.Since(t0).Seconds()
	if err := wait(ctx, func() bool { return interDone.Load() >= int64(sent) }); err != nil {
		return Result{}, err
	}
	st := sim.Stats().Routes["dest"]
	mu.Lock()
	defer mu.Unlock()
	var r Result
	r.add("batch_backlog", float64(backlog), "jobs")
	r.add("interactive_jobs", float64(sent), "jobs")
	r.add("interactive_p50_ms", percentile(waits, 0.5), "ms")
	r.add("interactive_p99_ms", percentile(waits, 0.99), "ms")
	r.add("interactive_max_ms", percentile(waits, 1), "ms")
	r.add("goodput", float64(batch)/span/(rate-interactiveRate), "of the allowance left to batch")
	r.add("rate_limited_share", share(st.RateLimited, st.Attempts), "of attempts")
	r.add("duplicates", float64(st.Duplicates), "")
	return r, nil
}
