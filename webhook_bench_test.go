package ratelane_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/bench"
	"github.com/ratelane/ratelane/internal/demo"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/webhooks"
)

// BenchmarkWebhookFanout measures pacing across 50 subscribers with
// allowances from 1/s to 30/s (burst a quarter second's worth; 429 +
// Retry-After beyond). Each subscriber gets its own topic and seconds x
// allowance events, so every subscriber's ideal makespan is the same. It
// reports goodput (accepted deliveries/s ÷ allowance: min, median, max) and
// the 429 share after the first second, and the makespan against the
// ideal. One run takes about 20 s; run it with -benchtime 1x.
func BenchmarkWebhookFanout(b *testing.B) {
	for range b.N {
		b.StopTimer()
		webhookFanout(b)
	}
}

func webhookFanout(b *testing.B) {
	const seconds = 20
	// Allowances from 1/s to 30/s (about 430/s in all): this 2-core
	// machine delivers about 840/s with the simulator in the same process,
	// so larger allowances would measure the machine, not the pacing.
	subs := make([]demo.Allowance, 50)
	for i := range subs {
		rate := max(1, int(math.Round(math.Pow(30, float64(i)/49))))
		subs[i] = demo.Allowance{ID: fmt.Sprintf("sub-%02d", i+1), Rate: rate, Burst: max(1, rate/4)}
	}
	e := newIdleHookEnv(b, true, func(c *ratelane.Config, _ *webhooks.Config) { c.Workers = 64 })
	var events []webhooks.Event
	for _, s := range subs {
		e.subscribeTopic(s.ID, s.ID, s.Rate, s.Burst)
		for i := range s.Rate * seconds {
			events = append(events, webhooks.Event{Topic: s.ID, ID: fmt.Sprintf("%s-%d", s.ID, i), Payload: []byte(`{"n":1}`)})
		}
	}
	total := len(events)
	// Everything is published before the engine starts, so the figures
	// are about pacing, not about how fast this benchmark can publish.
	g := errgroup.Group{}
	g.SetLimit(16)
	for _, ev := range events {
		g.Go(func() error {
			_, err := e.hooks.Publish(context.Background(), "us", ev)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	if err := e.client.Start(context.Background()); err != nil {
		b.Fatal(err)
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
	b.StopTimer()
	slices.Sort(goodputs)
	b.ReportMetric(float64(total), "deliveries")
	b.ReportMetric(last.Sub(start).Seconds(), "makespan_s")
	b.ReportMetric(last.Sub(start).Seconds()/seconds, "makespan_ratio")
	b.ReportMetric(goodputs[0], "goodput_min")
	b.ReportMetric(goodputs[len(goodputs)/2], "goodput_median")
	b.ReportMetric(goodputs[len(goodputs)-1], "goodput_max")
	b.ReportMetric(float64(limited)/float64(accepted+limited), "rate_limited_share")
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
	spec := webhooks.SubscriberSpec{ID: id, URL: e.sim.RouteURL(id), Topics: []string{topic},
		Rate: &webhooks.SubscriberRate{Limit: rate, Burst: burst}}
	if _, _, _, err := e.hooks.PutSubscriber(context.Background(), "us", spec); err != nil {
		e.t.Fatal(err)
	}
}

// BenchmarkPublish10kSubscribers measures Publish of one event to 10,000
// subscribers: 10,000 delivery jobs in one durable insert, plus the event
// document, at synchronous=FULL and NORMAL. Nothing delivers (no webhook
// kind), so only publishing is timed; ns/op is one Publish.
func BenchmarkPublish10kSubscribers(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run("synchronous="+sync, func(b *testing.B) {
			hooks := webhooks.New(webhooks.Config{})
			c, err := ratelane.NewClient(context.Background(), ratelane.Config{DataDir: b.TempDir(),
				Regions: []ratelane.Region{{Name: "us", Synchronous: sync}}, Plugins: []ratelane.Plugin{hooks}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			for i := range 10_000 {
				spec := webhooks.SubscriberSpec{ID: fmt.Sprintf("s%05d", i), URL: "https://example.com/h", Topics: []string{"t"},
					Rate: &webhooks.SubscriberRate{Limit: 10}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
				if _, _, _, err := hooks.PutSubscriber(context.Background(), "us", spec); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				res, err := hooks.Publish(context.Background(), "us", webhooks.Event{Topic: "t", ID: fmt.Sprintf("e%d", i), Payload: []byte(`{"n":1}`)})
				if err != nil || res.Created != 10_000 {
					b.Fatalf("publish: %d created, %v", res.Created, err)
				}
			}
		})
	}
}
