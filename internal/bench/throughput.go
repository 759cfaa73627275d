package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
)

// runThroughput inserts the plan's no-op jobs (see Throughput) in batches
// of 1,000 over 16 unpaced keys with the engine stopped (insert jobs/s),
// starts the workers and times the drain (jobs_per_second), then offers a
// steady load of half the measured rate in batches of 10 and measures
// enqueue-to-start.
func runThroughput(ctx context.Context, e *env) (Result, error) {
	plan := Throughput(e.opts.Smoke)
	var (
		done    atomic.Int64
		mu      sync.Mutex
		waits   []time.Duration
		measure atomic.Bool
	)
	cfg := ratelane.Config{Workers: plan.Workers}
	cfg.Handle("noop", ratelane.WorkFunc(func(_ context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		if measure.Load() {
			w := time.Since(j.CreatedAt)
			mu.Lock()
			waits = append(waits, w)
			mu.Unlock()
		}
		done.Add(1)
		return nil, nil
	}))
	c, err := e.client(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	n := plan.Jobs
	ps := make([]ratelane.InsertParams, n)
	for i := range ps {
		ps[i] = ratelane.InsertParams{Kind: "noop", Region: "us", LimitKeys: []string{"k" + strconv.Itoa(i%plan.Keys)}}
	}
	t0 := time.Now()
	if err := insert(ctx, c, ps); err != nil {
		return Result{}, err
	}
	var o ThroughputOutcome
	o.InsertRate = float64(n) / time.Since(t0).Seconds()
	t1 := time.Now()
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	if err := WaitFor(ctx, func() bool { return done.Load() >= int64(n) }); err != nil {
		return Result{}, err
	}
	o.Rate = float64(n) / time.Since(t1).Seconds()

	// Steady load for enqueue-to-start: batches of SteadyBatch every period.
	measure.Store(true)
	o.Offered = plan.Offered(o.Rate)
	calls, err := Every(ctx, plan.Period(o.Offered), plan.Latency, func() error {
		_, err := c.InsertMany(ctx, ps[:plan.SteadyBatch])
		return err
	})
	if err != nil {
		return Result{}, err
	}
	sent := calls * plan.SteadyBatch
	if err := WaitFor(ctx, func() bool { return done.Load() >= int64(n+sent) }); err != nil {
		return Result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	o.P50Ms, o.P99Ms = Percentile(waits, 0.5), Percentile(waits, 0.99)
	return ScoreThroughput(plan, o), nil
}
