package bench

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/upstream"
)

// pacedJob is a paced delivery's payload: its destination route.
type pacedJob struct {
	Dest string `json:"d"`
}

// runPaced spreads jobs over S simulator destinations with allowances from
// 2/s to 40/s (burst a quarter second's worth, 429 + Retry-After past it),
// each getting allowance x seconds jobs so every ideal makespan is the
// same. Each destination's limit key is configured with its allowance.
func runPaced(ctx context.Context, e *env) (Result, error) {
	dests, seconds := 10, 10
	if e.opts.Smoke {
		dests, seconds = 4, 3
	}
	routes := map[string]upstream.RouteConfig{}
	rates := map[string]int{}
	var names []string
	cfg := ratelane.Config{Workers: 64}
	for i := range dests {
		name := fmt.Sprintf("dest-%02d", i)
		rate := max(2, int(math.Round(2*math.Pow(20, float64(i)/float64(max(1, dests-1))))))
		burst := max(1, rate/4)
		routes[name] = upstream.RouteConfig{Rate: float64(rate), Burst: burst}
		rates[name] = rate
		names = append(names, name)
		cfg.Limits = append(cfg.Limits, ratelane.UpstreamLimit(name, float64(rate), float64(burst)))
	}
	sim, err := e.sim(routes)
	if err != nil {
		return Result{}, err
	}
	var ok atomic.Int64
	cfg.Handle("deliver", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, a pacedJob) (any, error) {
		err := e.post(ctx, sim.RouteURL(a.Dest), j.ID)
		if err == nil {
			ok.Add(1)
		}
		return nil, err
	}))
	c, err := e.client(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	ideal := 0.0
	allowance, most := 0, 0
	for _, name := range names {
		rate := rates[name]
		allowance += rate
		most = max(most, rate*seconds)
		ideal = math.Max(ideal, float64(rate*seconds-max(1, rate/4))/float64(rate))
	}
	// Round-robin over destinations so none is served first by order.
	var ps []ratelane.InsertParams
	for i := range most {
		for _, name := range names {
			if i < rates[name]*seconds {
				ps = append(ps, ratelane.InsertParams{Kind: "deliver", Region: "us", LimitKeys: []string{name}, Args: pacedJob{name}})
			}
		}
	}
	if err := insert(ctx, c, ps); err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	total := int64(len(ps))
	if err := wait(ctx, func() bool { return ok.Load() >= total }); err != nil {
		return Result{}, err
	}
	st := sim.Stats()
	var last time.Time
	var accepted, limited, attempts, dups, innerAcc, innerLim int64
	var goodputs []float64
	for _, name := range names {
		rt := st.Routes[name]
		if rt.LastAccepted.After(last) {
			last = rt.LastAccepted
		}
		accepted += rt.Accepted
		limited += rt.RateLimited
		attempts += rt.Attempts
		dups += rt.Duplicates
		g, a, l := innerRate(rt)
		innerAcc, innerLim = innerAcc+a, innerLim+l
		goodputs = append(goodputs, g/float64(rates[name]))
	}
	makespan := last.Sub(start).Seconds()
	var r Result
	r.add("destinations", float64(dests), "")
	r.add("jobs", float64(total), "jobs")
	r.add("allowance_per_second", float64(allowance), "req/s")
	r.add("goodput", mean(goodputs), "of allowance (mean per destination, after the first second)")
	r.add("goodput_min", minOf(goodputs), "of allowance")
	r.add("rate_limited_share", share(limited, attempts), "of attempts")
	r.add("rate_limited_share_after_first_second", share(innerLim, innerAcc+innerLim), "of answers")
	r.add("duplicates", float64(dups), "")
	r.add("makespan_seconds", makespan, "s")
	r.add("makespan_ratio", makespan/ideal, "of ideal")
	return r, nil
}

// innerRate returns a route's accepted rate over its whole seconds after the
// first and before the last, and the accepted and 429 answers in them.
func innerRate(rt upstream.RouteReport) (rate float64, accepted, limited int64) {
	tl := rt.Timeline
	if len(tl) < 3 {
		return rt.AchievedRate, rt.Accepted, rt.RateLimited
	}
	inner := tl[1 : len(tl)-1]
	for _, s := range inner {
		accepted += s.Accepted
		limited += s.RateLimited
	}
	span := float64(inner[len(inner)-1].Unix - inner[0].Unix + 1)
	return float64(accepted) / span, accepted, limited
}

func share(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func minOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := xs[0]
	for _, x := range xs {
		m = math.Min(m, x)
	}
	return m
}
