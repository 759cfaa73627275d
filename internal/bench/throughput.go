package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
)

// runThroughput inserts N no-op jobs in batches of 1,000 over 16 unpaced
// keys with the engine stopped (insert jobs/s), starts W workers and times
// the drain (jobs_per_second), then offers a steady load of half the
// measured rate in batches of 10 every 10 ms and measures enqueue-to-start.
func runThroughput(ctx context.Context, e *env) (Result, error) {
	n, workers, latencyFor := 20_000, 64, 5*time.Second
	if e.opts.Smoke {
		n, latencyFor = 2_000, time.Second
	}
	var (
		done    atomic.Int64
		mu      sync.Mutex
		waits   []time.Duration
		measure atomic.Bool
	)
	cfg := ratelane.Config{Workers: workers}
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
	ps := make([]ratelane.InsertParams, n)
	for i := range ps {
		ps[i] = ratelane.InsertParams{Kind: "noop", Region: "us", LimitKeys: []string{"k" + strconv.Itoa(i%16)}}
	}
	t0 := time.Now()
	if err := insert(ctx, c, ps); err != nil {
		return Result{}, err
	}
	insertRate := float64(n) / time.Since(t0).Seconds()
	t1 := time.Now()
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	if err := wait(ctx, func() bool { return done.Load() >= int64(n) }); err != nil {
		return Result{}, err
	}
	rate := float64(n) / time.Since(t1).Seconds()

	// Steady load for enqueue-to-start: batches of 10 every period.
	measure.Store(true)
	offered := max(100, min(2000, rate/2))
	period := time.Duration(float64(10*time.Second) / offered)
	tick := time.NewTicker(period)
	defer tick.Stop()
	end := time.Now().Add(latencyFor)
	sent := 0
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-tick.C:
		}
		if _, err := c.InsertMany(ctx, ps[:10]); err != nil {
			return Result{}, err
		}
		sent += 10
	}
	if err := wait(ctx, func() bool { return done.Load() >= int64(n+sent) }); err != nil {
		return Result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	var r Result
	r.add("jobs", float64(n), "jobs")
	r.add("workers", float64(workers), "")
	r.add("insert_jobs_per_second", insertRate, "jobs/s")
	r.add("jobs_per_second", rate, "jobs/s")
	r.add("offered_jobs_per_second", offered, "jobs/s")
	r.add("enqueue_to_start_p50_ms", percentile(waits, 0.5), "ms")
	r.add("enqueue_to_start_p99_ms", percentile(waits, 0.99), "ms")
	return r, nil
}
