package ratelane_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/bench"
	"github.com/ratelane/ratelane/internal/demo"
	"github.com/ratelane/ratelane/internal/upstream"
)

// benchEnv gates the webhook measurements: they take a minute or more and
// print figures for docs/benchmarks.md; they assert no timing.
const benchEnv = "RATELANE_WEBHOOK_BENCH"

// TestMeasureWebhookFanout measures pacing across 50 subscribers with
// allowances from 1/s to 30/s (burst a quarter second's worth; 429 +
// Retry-After beyond). Each subscriber gets its own topic and seconds x
// allowance events, so every subscriber's ideal makespan is the same. It
// reports goodput (accepted deliveries/s ÷ allowance) and the 429 share
// after the first second, and the makespan against the ideal.
func TestMeasureWebhookFanout(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to measure")
	}
	const seconds = 20
	// Allowances from 1/s to 30/s (about 430/s in all): this 2-core
	// machine delivers about 840/s with the simulator in the same process,
	// so larger allowances would measure the machine, not the pacing.
	subs := make([]demo.Allowance, 50)
	for i := range subs {
		rate := max(1, int(math.Round(math.Pow(30, float64(i)/49))))
		subs[i] = demo.Allowance{ID: fmt.Sprintf("sub-%02d", i+1), Rate: rate, Burst: max(1, rate/4)}
	}
	e := newIdleHookEnv(t, true, func(c *ratelane.Config) { c.Workers = 64 })
	var events []ratelane.Event
	for _, s := range subs {
		e.subscribeTopic(s.ID, s.ID, s.Rate, s.Burst)
		for i := range s.Rate * seconds {
			events = append(events, ratelane.Event{Topic: s.ID, ID: fmt.Sprintf("%s-%d", s.ID, i), Payload: []byte(`{"n":1}`)})
		}
	}
	total := len(events)
	// Everything is published before the engine starts, so the figures
	// are about pacing, not about how fast this test can publish.
	pub := time.Now()
	g := errgroup.Group{}
	g.SetLimit(16)
	for _, ev := range events {
		g.Go(func() error {
			_, err := e.client.Webhooks().Publish(context.Background(), "us", ev)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("published %d events (one delivery each) from 16 goroutines in %v", total, time.Since(pub))
	start := time.Now()
	if err := e.client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var last time.Time
	var goodputs []float64
	var accepted, limited int64
	for _, s := range subs {
		rt := e.waitAccepted(s.ID, int64(s.Rate*seconds), 5*time.Minute)
		last = maxT(last, rt.LastAccepted)
		g, a, l := bench.InnerRate(rt)
		goodputs = append(goodputs, g/float64(s.Rate))
		accepted, limited = accepted+a, limited+l
	}
	slices.Sort(goodputs)
	t.Logf("%d deliveries to 50 subscribers (1..30/s): makespan %.1fs, ideal %ds", total, last.Sub(start).Seconds(), seconds)
	t.Logf("goodput/allowance after the first second: min %.3f, median %.3f, max %.3f",
		goodputs[0], goodputs[len(goodputs)/2], goodputs[len(goodputs)-1])
	t.Logf("429 share after the first second: %d of %d answers (%.3f%%)", limited, accepted+limited, 100*float64(limited)/float64(accepted+limited))
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// subscribeTopic is subscribe with a topic of the subscriber's own.
func (e *hookEnv) subscribeTopic(id, topic string, rate, burst int) {
	e.t.Helper()
	if err := e.sim.AddRoute(id, upstream.RouteConfig{Rate: float64(rate), Burst: burst}); err != nil {
		e.t.Fatal(err)
	}
	spec := ratelane.SubscriberSpec{ID: id, URL: e.sim.RouteURL(id), Topics: []string{topic},
		Rate: &ratelane.SubscriberRate{Limit: rate, Burst: burst}}
	if _, _, _, err := e.client.Webhooks().PutSubscriber(context.Background(), "us", spec); err != nil {
		e.t.Fatal(err)
	}
}

// TestMeasurePublishLatency measures Publish of one event to 10,000
// subscribers: 10,000 delivery jobs in one durable insert, plus the event
// document. Nothing delivers (no webhook kind), so only publishing is
// timed.
func TestMeasurePublishLatency(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to measure")
	}
	for _, sync := range []string{"FULL", "NORMAL"} {
		c, err := ratelane.NewClient(context.Background(), ratelane.Config{DataDir: t.TempDir(),
			Regions: []ratelane.Region{{Name: "us", Synchronous: sync}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		for i := range 10_000 {
			spec := ratelane.SubscriberSpec{ID: fmt.Sprintf("s%05d", i), URL: "https://example.com/h", Topics: []string{"t"},
				Rate: &ratelane.SubscriberRate{Limit: 10}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
			if _, _, _, err := c.Webhooks().PutSubscriber(context.Background(), "us", spec); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("synchronous=%s: 10,000 subscribers put in %v", sync, time.Since(start))
		var lat []time.Duration
		for i := range 5 {
			start := time.Now()
			res, err := c.Webhooks().Publish(context.Background(), "us", ratelane.Event{Topic: "t", ID: fmt.Sprintf("e%d", i), Payload: []byte(`{"n":1}`)})
			if err != nil || res.Created != 10_000 {
				t.Fatalf("publish: %d created, %v", res.Created, err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		t.Logf("synchronous=%s: Publish to 10,000 subscribers: min %v, median %v, max %v", sync, lat[0], lat[2], lat[4])
	}
}
