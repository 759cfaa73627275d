package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/upstream"
)

// adaptPhases are the destination's limits, in requests per second.
var adaptPhases = []float64{100, 30, 80}

// runAdapt runs a backlog against a destination whose limit moves
// 100/s -> 30/s -> 80/s at whole-second boundaries (SetLimit), answering
// 429 with no Retry-After and no rate-limit headers, through an adaptive
// key whose ceiling is 120/s. Per phase it reports goodput (accepted/s ÷
// limit, the first second of the run left out) and the 429 share; after
// each change, the seconds until the accepted rate stays within
// [0.8, 1.1] x limit with at most a 10% 429 share over every later 2-second
// window of the phase (the phase length when it never does).
func runAdapt(ctx context.Context, e *env) (Result, error) {
	const ceiling = 120.0
	phase := 15
	if e.opts.Smoke {
		phase = 3
	}
	sim, err := e.sim(map[string]upstream.RouteConfig{"dest": {Rate: adaptPhases[0], Burst: 10,
		OverLimit: upstream.OverLimit429None, Headers: upstream.HeaderStyleNone}})
	if err != nil {
		return Result{}, err
	}
	url := sim.RouteURL("dest")
	var ok atomic.Int64
	cfg := ratelane.Config{Workers: 32, Limits: []ratelane.Limit{{Name: "dest", Rate: ceiling, Burst: 10, Adaptive: true}}}
	cfg.Handle("deliver", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		return nil, e.postCounted(ctx, &ok, url, j.ID)
	}))
	c, err := e.client(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	n := int(ceiling) * phase * len(adaptPhases)
	ps := make([]ratelane.InsertParams, n)
	for i := range ps {
		ps[i] = ratelane.InsertParams{Kind: "deliver", Region: "us", LimitKeys: []string{"dest"},
			Budgets: ratelane.Budgets{Congestion: 1000}}
	}
	if err := insert(ctx, c, ps); err != nil {
		return Result{}, err
	}
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	// Phase k covers Unix seconds [base+k*phase, base+(k+1)*phase).
	base := time.Now().Truncate(time.Second).Unix() + 1
	for k := 1; k < len(adaptPhases); k++ {
		if err := sleepUntil(ctx, time.Unix(base+int64(k*phase), 0)); err != nil {
			return Result{}, err
		}
		if err := sim.SetLimit("dest", adaptPhases[k], 10); err != nil {
			return Result{}, err
		}
	}
	if err := sleepUntil(ctx, time.Unix(base+int64(len(adaptPhases)*phase), 0)); err != nil {
		return Result{}, err
	}
	st := sim.Stats().Routes["dest"]
	bySec := map[int64]upstream.TimelineSecond{}
	for _, s := range st.Timeline {
		bySec[s.Unix] = s
	}
	var r Result
	var acc, lim, allowance float64
	var worst float64
	for k, limit := range adaptPhases {
		from := base + int64(k*phase)
		if k == 0 {
			from++ // the first second is start-up
		}
		to := base + int64((k+1)*phase)
		var a, l int64
		for u := from; u < to; u++ {
			a, l = a+bySec[u].Accepted, l+bySec[u].RateLimited
		}
		g := float64(a) / float64(to-from) / limit
		acc, lim, allowance = acc+float64(a), lim+float64(l), allowance+limit*float64(to-from)
		r.add(fmt.Sprintf("goodput_phase%d", k+1), g, fmt.Sprintf("of %.0f/s", limit))
		r.add(fmt.Sprintf("rate_limited_share_phase%d", k+1), share(l, a+l), "of answers")
		if k > 0 {
			conv := converge(bySec, base+int64(k*phase), to, limit)
			worst = max(worst, conv)
			r.add(fmt.Sprintf("converge_seconds_change%d", k), conv, "s")
		}
	}
	r.add("goodput", acc/allowance, "of allowance, all phases")
	r.add("rate_limited_share", lim/max(1, acc+lim), "of answers, all phases")
	r.add("converge_seconds", worst, "s (worst change)")
	return r, nil
}

// converge returns the seconds from the change at from until every later
// 2-second window of [from, to) is within [0.8, 1.1] x limit with at most a
// 10% 429 share; to-from when none is.
func converge(bySec map[int64]upstream.TimelineSecond, from, to int64, limit float64) float64 {
	good := func(u int64) bool {
		a := bySec[u].Accepted + bySec[u+1].Accepted
		l := bySec[u].RateLimited + bySec[u+1].RateLimited
		rate := float64(a) / 2
		return rate >= 0.8*limit && rate <= 1.1*limit && share(l, a+l) <= 0.1
	}
	s := to - 1
	for u := to - 2; u >= from; u-- {
		if !good(u) {
			break
		}
		s = u
	}
	if s >= to-1 {
		return float64(to - from)
	}
	return float64(s - from)
}
