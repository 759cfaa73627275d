package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/webhook"
	"github.com/ratelane/ratelane/webhooks"
)

// runUpstreams runs every mix of the upstreams plan through ratelane's
// webhook deliveries, configured as a user would: one subscriber per
// destination with its declared rate (and adaptive where the declared
// limit may not hold), signing with its own secret, which the simulator
// verifies. Each mix gets a fresh store and simulator and at most
// Options.Duration; deliveries still undelivered at the bound count as
// lost.
func runUpstreams(ctx context.Context, e *env) (Result, error) {
	plan := Upstreams(e.opts.Smoke)
	if len(e.opts.Mixes) > 0 {
		var keep []UpstreamsMix
		for _, m := range plan.Mixes {
			if slices.Contains(e.opts.Mixes, m.Name) {
				keep = append(keep, m)
			}
		}
		if len(keep) == 0 {
			return Result{}, fmt.Errorf("--mix %v: no such mix", e.opts.Mixes)
		}
		plan.Mixes = keep
	}
	var outs []MixOutcome
	for _, m := range plan.Mixes {
		o, err := runMix(ctx, e, plan, m)
		if err != nil {
			return Result{}, fmt.Errorf("mix %s: %w", m.Name, err)
		}
		outs = append(outs, o)
	}
	return ScoreUpstreams(plan, outs)
}

func runMix(ctx context.Context, e *env, plan UpstreamsPlan, m UpstreamsMix) (MixOutcome, error) {
	ctx, cancel := context.WithTimeout(ctx, e.opts.Duration)
	defer cancel()
	routes := m.Routes()
	secrets := map[string]string{}
	for name, rc := range routes {
		secrets[name] = webhook.NewSecret()
		rc.Secrets = []string{secrets[name]}
		routes[name] = rc
	}
	sim, err := upstream.New(upstream.Config{Routes: routes, Seed: 1, RecordArrivals: true})
	if err != nil {
		return MixOutcome{}, err
	}
	e.sims = append(e.sims, sim)
	e.name = "upstreams_" + m.Name
	hooks := webhooks.New(webhooks.Config{Deliver: true, AllowPrivateTargets: true})
	c, err := e.client(ctx, ratelane.Config{Workers: plan.Workers, Plugins: []ratelane.Plugin{hooks}, BatchYieldMax: e.opts.BatchYieldMax})
	if err != nil {
		return MixOutcome{}, err
	}
	for _, d := range m.Destinations {
		spec := webhooks.SubscriberSpec{ID: d.Name, URL: sim.RouteURL(d.Name), Topics: []string{d.Name},
			Rate: &webhooks.SubscriberRate{Limit: d.Declared, Period: webhook.Period(time.Second)}, Adaptive: d.Adaptive, Secret: secrets[d.Name]}
		if d.Fixed {
			spec.Rate.Window = webhook.WindowFixed
		}
		if _, _, _, err := hooks.PutSubscriber(ctx, "us", spec); err != nil {
			return MixOutcome{}, fmt.Errorf("subscriber %s: %w", d.Name, err)
		}
	}
	// Every event is published before the engine starts, so the figures
	// are about pacing, not about publishing.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, d := range m.Order() {
		g.Go(func() error {
			_, err := hooks.Publish(gctx, "us", webhooks.Event{Topic: d.Name, ID: fmt.Sprintf("%s-%d", d.Name, i), Payload: []byte(`{"n":1}`)})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return MixOutcome{}, fmt.Errorf("publish: %w", err)
	}
	// Start at the run's phase of the upstream's second, as every peer
	// does (Options.Phase).
	start, err := sim.StartScheduleAt(ctx, e.opts.Phase)
	if err != nil {
		return MixOutcome{}, err
	}
	if err := c.Start(ctx); err != nil {
		return MixOutcome{}, err
	}
	total := m.Total()
	var lastCheck time.Time
	terminal := 0
	tr := newTracer(e.opts.Trace, m, start)
	tr.limits = func() map[string]ratelane.LimitState {
		ls, err := c.Limits(ctx, "us")
		if err != nil {
			return nil
		}
		out := map[string]ratelane.LimitState{}
		for _, l := range ls {
			out[strings.TrimPrefix(l.Name, "subscriber:")] = l
		}
		return out
	}
	err = WaitFor(ctx, func() bool {
		tr.tick(sim.Stats())
		if Delivered(sim.Stats()) >= total {
			return true
		}
		if time.Since(lastCheck) < 500*time.Millisecond {
			return false
		}
		lastCheck = time.Now()
		terminal = countTerminal(ctx, c)
		return Delivered(sim.Stats())+terminal >= total
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return MixOutcome{}, err
	}
	stopCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = c.Stop(stopCtx)
	rep := sim.Stats()
	tr.flush(rep)
	arr := map[string][]time.Time{}
	for _, d := range m.Destinations {
		arr[d.Name] = sim.Arrivals(d.Name)
	}
	return MixOutcome{Start: start, Report: rep, Lost: max(0, total-Delivered(rep)), Arrivals: arr}, nil
}

// Delivered counts the distinct webhook-ids the simulator accepted.
func Delivered(rep upstream.Report) int {
	n := 0
	for _, rt := range rep.Routes {
		n += int(rt.UniqueIDs)
	}
	return n
}

// countTerminal counts the region's terminal jobs (deliveries given up),
// 0 on an error (the caller only uses it to stop waiting early).
func countTerminal(ctx context.Context, c *ratelane.Client) int {
	n, after := 0, ""
	for {
		jobs, err := c.List(ctx, "us", ratelane.ListParams{State: ratelane.StateTerminal, Limit: 1000, After: after})
		if err != nil {
			return n
		}
		n += len(jobs)
		if len(jobs) < 1000 {
			return n
		}
		after = jobs[len(jobs)-1].ID
	}
}

// tracer prints a mix's timeline for --verbose: every 500 ms, per
// destination, accepted/refused(over-limit)/faults since the previous line,
// and for an adaptive key its learned rate (and "p" while it is paused).
type tracer struct {
	// limits reads the keys' live state; nil prints none.
	limits func() map[string]ratelane.LimitState
	w      io.Writer
	names  []string
	start  time.Time
	last   time.Time
	prev   map[string]upstream.RouteReport
}

func newTracer(w io.Writer, m UpstreamsMix, start time.Time) *tracer {
	t := &tracer{w: w, start: start, last: start, prev: map[string]upstream.RouteReport{}}
	for _, d := range m.Destinations {
		t.names = append(t.names, d.Name)
	}
	if w != nil {
		// The start's place in its second: where an upstream that counts
		// windows aligned to the clock (halving-503, the fixed mix) puts
		// its boundaries, which moves a run's figures (TestVirtualOffsets).
		fmt.Fprintf(w, "mix %s (started %03d ms into a second): t  %s  (accepted/refused/faults per 500 ms)\n", m.Name,
			start.Nanosecond()/int(time.Millisecond), strings.Join(t.names, " "))
	}
	return t
}

func (t *tracer) tick(rep upstream.Report) {
	if t.w == nil || time.Since(t.last) < 500*time.Millisecond {
		return
	}
	t.flush(rep)
}

func (t *tracer) flush(rep upstream.Report) {
	if t.w == nil {
		return
	}
	t.last = time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "%5.1fs", t.last.Sub(t.start).Seconds())
	var ls map[string]ratelane.LimitState
	if t.limits != nil {
		ls = t.limits()
	}
	for _, n := range t.names {
		r, p := rep.Routes[n], t.prev[n]
		fmt.Fprintf(&b, "  %d/%d/%d", r.Accepted-p.Accepted, r.RateLimited-p.RateLimited, r.Transient-p.Transient)
		if l, ok := ls[n]; ok && l.Adaptive {
			fmt.Fprintf(&b, "@%.1f", l.LearnedRate)
			if l.PausedUntil.After(t.last) {
				b.WriteString("p")
			}
		}
		t.prev[n] = r
	}
	fmt.Fprintln(t.w, b.String())
}
