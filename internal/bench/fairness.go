package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratelane/ratelane"
)

// runFairness puts 10 tenants on one key paced at 200/s; tenant t00
// submits 100x what each other tenant submits, and its jobs are inserted
// first. It counts each tenant's starts while every tenant is still
// backlogged (until the first tenant's last start) and reports the shares
// and Jain's index over them.
func runFairness(ctx context.Context, e *env) (Result, error) {
	const tenants, rate = 10, 200.0
	light := 60
	if e.opts.Smoke {
		light = 20
	}
	heavy := 100 * light
	var (
		mu     sync.Mutex
		starts = map[string][]time.Time{}
	)
	cfg := ratelane.Config{Workers: 32, Limits: []ratelane.Limit{{Name: "shared", Rate: rate, Burst: 10}}}
	cfg.Handle("noop", ratelane.WorkFunc(func(_ context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		mu.Lock()
		starts[j.Tenant] = append(starts[j.Tenant], time.Now())
		mu.Unlock()
		return nil, nil
	}))
	c, err := e.client(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	names := make([]string, tenants)
	var ps []ratelane.InsertParams
	for t := range tenants {
		names[t] = fmt.Sprintf("t%02d", t)
		n := light
		if t == 0 {
			n = heavy
		}
		for range n {
			ps = append(ps, ratelane.InsertParams{Kind: "noop", Region: "us", Tenant: names[t], LimitKeys: []string{"shared"}})
		}
	}
	if err := insert(ctx, c, ps); err != nil {
		return Result{}, err
	}
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	// Wait until some tenant has run out.
	lightDone := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names[1:] {
			if len(starts[n]) >= light {
				return true
			}
		}
		return false
	}
	if err := WaitFor(ctx, lightDone); err != nil {
		return Result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	end := time.Time{}
	for _, n := range names[1:] {
		if s := starts[n]; len(s) >= light && (end.IsZero() || s[len(s)-1].Before(end)) {
			end = s[len(s)-1]
		}
	}
	counts := make([]float64, tenants)
	total := 0.0
	for t, n := range names {
		for _, at := range starts[n] {
			if !at.After(end) {
				counts[t]++
			}
		}
		total += counts[t]
	}
	var r Result
	r.add("tenants", tenants, "")
	r.add("heavy_tenant_jobs", float64(heavy), "jobs")
	r.add("light_tenant_jobs", float64(light), "jobs")
	r.add("backlogged_starts", total, "starts")
	r.add("heavy_share", counts[0]/total, "of starts (fair: 0.1)")
	r.add("light_share_min", minOf(counts[1:])/total, "of starts (fair: 0.1)")
	r.add("jain_index", jain(counts), "")
	return r, nil
}
