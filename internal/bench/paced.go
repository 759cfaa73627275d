package bench

import (
	"context"
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

// runPaced spreads jobs over the plan's simulator destinations (see
// Paced); each destination's limit key is configured from its declared
// allowance with ratelane.UpstreamLimit, as a user would.
func runPaced(ctx context.Context, e *env) (Result, error) {
	plan := Paced(e.opts.Smoke)
	cfg := ratelane.Config{Workers: plan.Workers}
	for _, d := range plan.Destinations {
		cfg.Limits = append(cfg.Limits, ratelane.UpstreamLimit(d.Name, float64(d.Rate), float64(d.Burst)))
	}
	sim, err := e.sim(plan.Routes())
	if err != nil {
		return Result{}, err
	}
	var ok atomic.Int64
	cfg.Handle("deliver", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, a pacedJob) (any, error) {
		return nil, e.postCounted(ctx, &ok, sim.RouteURL(a.Dest), j.ID)
	}))
	c, err := e.client(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	var ps []ratelane.InsertParams
	for _, d := range plan.Order() {
		ps = append(ps, ratelane.InsertParams{Kind: "deliver", Region: "us", LimitKeys: []string{d.Name}, Args: pacedJob{d.Name}})
	}
	if err := insert(ctx, c, ps); err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	total := int64(len(ps))
	if err := WaitFor(ctx, func() bool { return ok.Load() >= total }); err != nil {
		return Result{}, err
	}
	return ScorePaced(plan, sim.Stats(), start), nil
}

// InnerRate returns a route's accepted rate over its whole seconds after the
// first and before the last, and the accepted and 429 answers in them: the
// steady state, without start-up and the tail.
func InnerRate(rt upstream.RouteReport) (rate float64, accepted, limited int64) {
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
