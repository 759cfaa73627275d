package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
)

// runFlood inserts the plan's batch backlog (see Flood) on a destination
// limited to 100/s (the key paced at the same rate), starts the engine, and
// submits interactive jobs at 5/s on the same key for the measurement
// window: interactive waits from enqueue to successful delivery and batch
// goodput (batch successes/s ÷ the 95/s the interactive jobs leave).
func runFlood(ctx context.Context, e *env) (Result, error) {
	plan := Flood(e.opts.Smoke)
	sim, err := e.sim(plan.Routes())
	if err != nil {
		return Result{}, err
	}
	url := sim.RouteURL(plan.Route)
	var (
		mu        sync.Mutex
		waits     []time.Duration
		seen      = map[string]bool{}
		batchOK   atomic.Int64
		interDone atomic.Int64
	)
	cfg := ratelane.Config{Workers: plan.Workers, Limits: []ratelane.Limit{
		ratelane.UpstreamLimit(plan.Route, float64(plan.Rate), float64(plan.Burst))}}
	cfg.Handle("deliver", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		err := e.post(ctx, url, j.ID)
		switch {
		case err != nil:
		case j.Lane == ratelane.LaneInteractive:
			// The wait that matters to whoever submitted the job: until it
			// was delivered, not until a first attempt that may get a 429.
			w := time.Since(j.CreatedAt)
			mu.Lock()
			if !seen[j.ID] {
				seen[j.ID] = true
				waits = append(waits, w)
			}
			mu.Unlock()
			interDone.Add(1)
		default:
			batchOK.Add(1)
		}
		return nil, err
	}))
	c, err := e.client(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	ps := make([]ratelane.InsertParams, plan.Backlog)
	for i := range ps {
		ps[i] = ratelane.InsertParams{Kind: "deliver", Region: "us", LimitKeys: []string{plan.Route}}
	}
	if err := insert(ctx, c, ps); err != nil {
		return Result{}, err
	}
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	// Let the batch lane reach its pace, then measure.
	if err := Sleep(ctx, time.Second); err != nil {
		return Result{}, err
	}
	b0, t0 := batchOK.Load(), time.Now()
	sent, err := Every(ctx, time.Second/time.Duration(plan.InteractiveRate), plan.Window, func() error {
		_, err := c.Insert(ctx, ratelane.InsertParams{Kind: "deliver", Region: "us", Lane: ratelane.LaneInteractive,
			LimitKeys: []string{plan.Route}})
		return err
	})
	if err != nil {
		return Result{}, err
	}
	batch, span := batchOK.Load()-b0, time.Since(t0).Seconds()
	if err := WaitFor(ctx, func() bool { return interDone.Load() >= int64(sent) }); err != nil {
		return Result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	return ScoreFlood(plan, FloodOutcome{
		Interactive:   sent,
		P50Ms:         Percentile(waits, 0.5),
		P99Ms:         Percentile(waits, 0.99),
		MaxMs:         Percentile(waits, 1),
		BatchInWindow: batch,
		WindowSeconds: span,
	}, sim.Stats()), nil
}
