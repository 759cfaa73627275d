// Package demo runs ratelane's main job end to end on one machine, for
// `ratelane demo`: a temporary embedded store, the engine with the
// built-in webhook kind, and the upstream simulator playing subscribers of
// varied allowances, each answering 429 with Retry-After past its limit.
// A burst of shipment events fans out to every subscriber; the demo shows
// per-subscriber progress while ratelane paces each one at its allowance,
// then a closing table, and checks that no delivery was lost or
// duplicated (the simulator counts webhook-ids).
package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/webhook"
	"github.com/ratelane/ratelane/webhooks"
)

// Config configures a run. Zero fields take the defaults documented on
// each.
type Config struct {
	// Events is the number of shipment events; default 90. Each goes to
	// every subscriber. The slowest subscriber (2/s) bounds the run at
	// about Events/2 seconds, so the default finishes within a minute (500
	// events, the original target, would take over four minutes).
	Events int
	// Subscribers is the number of subscribers, with allowances spread
	// geometrically from 2/s to 200/s; default 20.
	Subscribers int
	// Duration caps the delivery phase; default 90 s.
	Duration time.Duration
	// Workers is the engine's worker pool; default 32.
	Workers int
	// Out receives the live progress (nil for none).
	Out io.Writer
	// TTY redraws the progress in place; otherwise one plain line a second.
	TTY bool
	// Refresh is the progress interval; default 1 s.
	Refresh time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Events = cmp.Or(c.Events, 90)
	c.Subscribers = cmp.Or(c.Subscribers, 20)
	c.Duration = cmp.Or(c.Duration, 90*time.Second)
	c.Workers = cmp.Or(c.Workers, 32)
	c.Refresh = cmp.Or(c.Refresh, time.Second)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Events < 1 || c.Events > 100_000:
		return fmt.Errorf("events %d: want 1 to 100000", c.Events)
	case c.Subscribers < 1 || c.Subscribers > 1000:
		return fmt.Errorf("subscribers %d: want 1 to 1000", c.Subscribers)
	case c.Duration < 0 || c.Workers < 1:
		return errors.New("duration must not be negative and workers must be positive")
	}
	return nil
}

// Result holds the closing figures.
type Result struct {
	Events      int `json:"events"`
	Deliveries  int `json:"deliveries"`
	Delivered   int `json:"delivered"`
	Lost        int `json:"lost"`
	Duplicates  int `json:"duplicates"`
	RateLimited int `json:"rate_limited"`
	Attempts    int `json:"attempts"`
	// Terminal counts deliveries that ended without success.
	Terminal int `json:"terminal"`
	// TimedOut is set when Duration passed before every delivery ended.
	TimedOut bool `json:"timed_out"`
	// MakespanSeconds runs from the first publish to the last accepted
	// delivery; IdealSeconds is max over subscribers of deliveries/rate.
	MakespanSeconds float64            `json:"makespan_seconds"`
	IdealSeconds    float64            `json:"ideal_seconds"`
	PublishSeconds  float64            `json:"publish_seconds"`
	Subscribers     []SubscriberResult `json:"subscribers"`
}

// OK reports whether every delivery arrived exactly once.
func (r Result) OK() bool {
	return r.Lost == 0 && r.Duplicates == 0 && r.Terminal == 0 && !r.TimedOut && r.Delivered == r.Deliveries
}

// SubscriberResult is one subscriber's line of the closing table.
type SubscriberResult struct {
	ID string `json:"id"`
	// Allowance is the subscriber's declared rate, deliveries/s.
	Allowance float64 `json:"allowance"`
	Burst     int     `json:"burst"`
	Total     int     `json:"total"`
	Delivered int     `json:"delivered"`
	// Achieved is the receiver-measured rate of accepted deliveries.
	Achieved    float64 `json:"achieved"`
	RateLimited int     `json:"rate_limited"`
	Duplicates  int     `json:"duplicates"`
	// Seconds is when the subscriber's last delivery arrived, from the
	// first publish; IdealSeconds is Total/Allowance.
	Seconds      float64 `json:"seconds"`
	IdealSeconds float64 `json:"ideal_seconds"`
}

// Allowance is one simulated subscriber's id and allowance: Rate
// deliveries per second, Burst at once.
type Allowance struct {
	ID    string
	Rate  int
	Burst int
}

// Allowances returns n allowances spread geometrically from 2/s to 200/s
// (rounded), each with a burst of a quarter second's worth (at least 1).
func Allowances(n int) []Allowance {
	out := make([]Allowance, n)
	for i := range out {
		r := 2.0
		if n > 1 {
			r = 2 * math.Pow(100, float64(i)/float64(n-1))
		}
		rate := int(math.Round(r))
		out[i] = Allowance{ID: fmt.Sprintf("sub-%02d", i+1), Rate: rate, Burst: max(1, rate/4)}
	}
	return out
}

// Run runs the demo and returns its figures. It removes its temporary
// store before returning.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp("", "ratelane-demo-*")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	subs := Allowances(cfg.Subscribers)
	sim, err := newSimulator(subs)
	if err != nil {
		return Result{}, err
	}
	defer sim.Close()
	client, hooks, err := newClient(ctx, dir, cfg.Workers)
	if err != nil {
		return Result{}, err
	}
	defer client.Stop(context.Background())
	if err := addSubscribers(ctx, hooks, sim, subs); err != nil {
		return Result{}, err
	}
	if err := client.Start(ctx); err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, client: client, hooks: hooks, sim: sim, subs: subs}
	return r.execute(ctx)
}

// newSimulator starts the receivers: a token bucket per subscriber that
// answers 429 with Retry-After (whole seconds) past its allowance.
func newSimulator(subs []Allowance) (*upstream.Server, error) {
	routes := map[string]upstream.RouteConfig{}
	for _, s := range subs {
		routes[s.ID] = upstream.RouteConfig{Rate: float64(s.Rate), Burst: s.Burst, OverLimit: upstream.OverLimit429Seconds}
	}
	return upstream.New(upstream.Config{Routes: routes, Seed: 1})
}

// newClient opens the embedded store in dir with the webhooks plug-in
// delivering. The subscribers live on loopback, so the SSRF guard is
// switched off here, explicitly; `ratelane serve` keeps it on unless told
// otherwise.
func newClient(ctx context.Context, dir string, workers int) (*ratelane.Client, *webhooks.Plugin, error) {
	hooks := webhooks.New(webhooks.Config{Deliver: true, AllowPrivateTargets: true})
	cfg := ratelane.Config{
		DataDir: dir, Regions: []ratelane.Region{{Name: "us", Synchronous: "NORMAL"}}, Workers: workers,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Plugins: []ratelane.Plugin{hooks},
	}
	client, err := ratelane.NewClient(ctx, cfg)
	return client, hooks, err
}

// addSubscribers declares each subscriber with its allowance and a secret
// the simulator verifies.
func addSubscribers(ctx context.Context, hooks *webhooks.Plugin, sim *upstream.Server, subs []Allowance) error {
	for _, s := range subs {
		secret := webhook.NewSecret()
		if err := sim.UpdateRoute(s.ID, func(rc *upstream.RouteConfig) { rc.Secrets = []string{secret} }); err != nil {
			return err
		}
		_, _, _, err := hooks.PutSubscriber(ctx, "us", webhooks.SubscriberSpec{
			ID: s.ID, URL: sim.RouteURL(s.ID), Topics: []string{"shipment.updated"}, Secret: secret,
			Rate: &webhooks.SubscriberRate{Limit: s.Rate, Burst: s.Burst},
		})
		if err != nil {
			return fmt.Errorf("subscriber %s: %w", s.ID, err)
		}
	}
	return nil
}
