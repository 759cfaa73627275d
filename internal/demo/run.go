package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/webhooks"
)

// run is one demo run in progress.
type run struct {
	cfg    Config
	client *ratelane.Client
	hooks  *webhooks.Plugin
	sim    *upstream.Server
	subs   []Allowance
	start  time.Time
	drawn  int // lines drawn by the last TTY refresh
}

// execute publishes the burst, follows it to the end (or the duration
// cap) and gathers the figures.
func (r *run) execute(ctx context.Context) (Result, error) {
	r.start = time.Now()
	if err := r.publish(ctx); err != nil {
		return Result{}, err
	}
	published := time.Since(r.start)
	timedOut, err := r.follow(ctx)
	if err != nil {
		return Result{}, err
	}
	res, err := r.result(ctx, timedOut)
	res.PublishSeconds = published.Seconds()
	return res, err
}

// publishers is how many producers post events at once, as several
// services of a marketplace would.
const publishers = 8

// publish posts every event; each fans out to all subscribers in one
// durable write.
func (r *run) publish(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(publishers)
	for i := range r.cfg.Events {
		g.Go(func() error {
			id := fmt.Sprintf("shp_%06d", i)
			body, _ := json.Marshal(map[string]any{
				"shipment_id": id, "status": "in_transit", "carrier": "demo-post",
				"location": map[string]string{"city": "Rotterdam", "country": "NL"},
			})
			ev := webhooks.Event{Topic: "shipment.updated", ID: id, Version: 1, Payload: body}
			if _, err := r.hooks.Publish(ctx, "us", ev); err != nil {
				return fmt.Errorf("publish event %s: %w", id, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// follow refreshes the progress every Refresh until every delivery
// arrived, the duration cap passes or ctx ends; it reports a timeout.
func (r *run) follow(ctx context.Context) (bool, error) {
	tick := time.NewTicker(r.cfg.Refresh)
	defer tick.Stop()
	deadline := time.NewTimer(r.cfg.Duration)
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-deadline.C:
			r.draw(r.sim.Stats())
			return true, nil
		case <-tick.C:
			r.draw(r.sim.Stats())
		case <-poll.C:
			if rep := r.sim.Stats(); r.done(rep) {
				r.draw(rep)
				return false, nil
			}
		}
	}
}

// done reports whether every subscriber accepted every event.
func (r *run) done(rep upstream.Report) bool {
	for _, s := range r.subs {
		if rep.Routes[s.ID].UniqueIDs < int64(r.cfg.Events) {
			return false
		}
	}
	return true
}

// draw writes the progress: in place on a terminal, else one line.
func (r *run) draw(rep upstream.Report) {
	if r.cfg.Out == nil {
		return
	}
	elapsed := time.Since(r.start).Seconds()
	if !r.cfg.TTY {
		var delivered, limited int64
		for _, s := range r.subs {
			delivered += rep.Routes[s.ID].UniqueIDs
			limited += rep.Routes[s.ID].RateLimited
		}
		fmt.Fprintf(r.cfg.Out, "t=%4.1fs delivered %d/%d, 429s %d\n", elapsed, delivered, r.cfg.Events*len(r.subs), limited)
		return
	}
	var b strings.Builder
	if r.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", r.drawn)
	}
	fmt.Fprintf(&b, "\x1b[2Kratelane demo: %d events x %d subscribers, t=%.0fs\n", r.cfg.Events, len(r.subs), elapsed)
	for _, s := range r.subs {
		rt := rep.Routes[s.ID]
		fmt.Fprintf(&b, "\x1b[2K  %-7s %s %4d/%-4d %6.1f/s of %3d/s  429s %d\n", s.ID, bar(rt.UniqueIDs, r.cfg.Events, 20),
			rt.UniqueIDs, r.cfg.Events, rt.AchievedRate, s.Rate, rt.RateLimited)
	}
	r.drawn = len(r.subs) + 1
	io.WriteString(r.cfg.Out, b.String())
}

func bar(n int64, total, width int) string {
	full := int(n) * width / max(1, total)
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

// result gathers the closing figures from the receivers and the store.
func (r *run) result(ctx context.Context, timedOut bool) (Result, error) {
	rep := r.sim.Stats()
	res := Result{Events: r.cfg.Events, Deliveries: r.cfg.Events * len(r.subs), TimedOut: timedOut}
	var last time.Time
	for _, s := range r.subs {
		rt := rep.Routes[s.ID]
		sr := SubscriberResult{ID: s.ID, Allowance: float64(s.Rate), Burst: s.Burst, Total: r.cfg.Events,
			Delivered: int(rt.UniqueIDs), Achieved: rt.AchievedRate, RateLimited: int(rt.RateLimited),
			Duplicates: int(rt.Duplicates), IdealSeconds: float64(r.cfg.Events) / float64(s.Rate)}
		if !rt.LastAccepted.IsZero() {
			sr.Seconds = rt.LastAccepted.Sub(r.start).Seconds()
		}
		if rt.LastAccepted.After(last) {
			last = rt.LastAccepted
		}
		res.Delivered += sr.Delivered
		res.Duplicates += sr.Duplicates
		res.RateLimited += sr.RateLimited
		res.Attempts += int(rt.Attempts)
		res.IdealSeconds = max(res.IdealSeconds, sr.IdealSeconds)
		res.Subscribers = append(res.Subscribers, sr)
	}
	if !last.IsZero() {
		res.MakespanSeconds = last.Sub(r.start).Seconds()
	}
	terminal, err := r.count(ctx, ratelane.StateTerminal)
	if err != nil {
		return res, err
	}
	res.Terminal = terminal
	if !timedOut {
		res.Lost = res.Deliveries - res.Delivered
	}
	return res, nil
}

// count counts the region's jobs in a state.
func (r *run) count(ctx context.Context, state ratelane.State) (int, error) {
	n, after := 0, ""
	for {
		page, err := r.client.List(ctx, "us", ratelane.ListParams{State: state, After: after, Limit: 1000})
		if err != nil {
			return n, err
		}
		n += len(page)
		if len(page) < 1000 {
			return n, nil
		}
		after = page[len(page)-1].ID
	}
}

// WriteTable writes the closing table.
func WriteTable(w io.Writer, res Result) {
	fmt.Fprintf(w, "\n%-8s %10s %10s %9s %6s %6s %9s %9s\n", "subscr.", "allowance", "achieved", "delivered", "429s", "dups", "done at", "ideal")
	for _, s := range res.Subscribers {
		fmt.Fprintf(w, "%-8s %8.0f/s %8.1f/s %4d/%-4d %6d %6d %8.1fs %8.1fs\n", s.ID, s.Allowance, s.Achieved,
			s.Delivered, s.Total, s.RateLimited, s.Duplicates, s.Seconds, s.IdealSeconds)
	}
	share := 0.0
	if res.Attempts > 0 {
		share = 100 * float64(res.RateLimited) / float64(res.Attempts)
	}
	fmt.Fprintf(w, "\n%d deliveries (%d events x %d subscribers) published in %.2fs: %d delivered, %d lost, %d duplicated, %d terminal\n",
		res.Deliveries, res.Events, len(res.Subscribers), res.PublishSeconds, res.Delivered, res.Lost, res.Duplicates, res.Terminal)
	fmt.Fprintf(w, "429s: %d of %d attempts (%.2f%%); makespan %.1fs against an ideal of %.1fs (max over subscribers of deliveries/allowance)\n",
		res.RateLimited, res.Attempts, share, res.MakespanSeconds, res.IdealSeconds)
	if res.TimedOut {
		fmt.Fprintln(w, "stopped at the --duration cap before every delivery arrived")
	}
}
