package ratelane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/webhook"
	"github.com/ratelane/ratelane/webhooks"
)

// hookEnv is a client delivering webhooks from an SQLite store in a temp
// dir to an upstream simulator on loopback.
type hookEnv struct {
	t      testing.TB
	client *ratelane.Client
	hooks  *webhooks.Plugin
	sim    *upstream.Server
}

func newHookEnv(t testing.TB, allowPrivate bool, tweak ...func(*ratelane.Config, *webhooks.Config)) *hookEnv {
	t.Helper()
	e := newIdleHookEnv(t, allowPrivate, tweak...)
	if err := e.client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// newIdleHookEnv is newHookEnv without starting the engine.
func newIdleHookEnv(t testing.TB, allowPrivate bool, tweak ...func(*ratelane.Config, *webhooks.Config)) *hookEnv {
	t.Helper()
	sim, err := upstream.New(upstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	cfg := ratelane.Config{
		DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us", Synchronous: "NORMAL"}}, Workers: 32,
		Logger: quiet(),
	}
	hcfg := webhooks.Config{Deliver: true, AllowPrivateTargets: allowPrivate}
	for _, f := range tweak {
		f(&cfg, &hcfg)
	}
	hooks := webhooks.New(hcfg)
	cfg.Plugins = append(cfg.Plugins, hooks)
	c, err := ratelane.NewClient(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	return &hookEnv{t: t, client: c, hooks: hooks, sim: sim}
}

// subscribe adds a simulator route limited to rate/burst (0: unlimited)
// and a subscriber declaring that allowance; it returns the secret.
func (e *hookEnv) subscribe(id string, rate, burst int) string {
	e.t.Helper()
	secret := webhook.NewSecret()
	rc := upstream.RouteConfig{Secrets: []string{secret}}
	spec := webhooks.SubscriberSpec{ID: id, URL: e.sim.RouteURL(id), Topics: []string{"shipment.updated"}, Secret: secret}
	if rate > 0 {
		rc.Rate, rc.Burst = float64(rate), burst
		spec.Rate = &webhooks.SubscriberRate{Limit: rate, Burst: burst}
	}
	if err := e.sim.AddRoute(id, rc); err != nil {
		e.t.Fatal(err)
	}
	if _, _, _, err := e.hooks.PutSubscriber(context.Background(), "us", spec); err != nil {
		e.t.Fatal(err)
	}
	return secret
}

func (e *hookEnv) publish(id string, version int64) webhooks.PublishResult {
	e.t.Helper()
	res, err := e.hooks.Publish(context.Background(), "us", webhooks.Event{
		Topic: "shipment.updated", ID: id, Version: version, Payload: json.RawMessage(`{"shipment":"` + id + `"}`)})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// waitDelivery waits until a delivery is final and returns it.
func (e *hookEnv) waitDelivery(id string, timeout time.Duration) *ratelane.Job {
	e.t.Helper()
	return waitForJob(e.t, e.client, id, timeout, "the delivery to end", func(j *ratelane.Job) bool { return j.State.Final() })
}

// waitAccepted waits until route has accepted n distinct webhook-ids.
func (e *hookEnv) waitAccepted(route string, n int64, timeout time.Duration) upstream.RouteReport {
	e.t.Helper()
	testkit.Eventually(e.t, timeout, fmt.Sprintf("route %s to accept %d webhook-ids", route, n), func() error {
		if got := e.sim.Stats().Routes[route].UniqueIDs; got < n {
			return fmt.Errorf("%d accepted", got)
		}
		return nil
	})
	return e.sim.Stats().Routes[route]
}

// TestWebhookSSRFGuard: a subscriber on 127.0.0.1 is refused by default
// (the delivery ends terminal, permanent) and reached with private
// targets allowed.
func TestWebhookSSRFGuard(t *testing.T) {
	t.Parallel()
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow=%v", allow), func(t *testing.T) {
			t.Parallel()
			e := newHookEnv(t, allow)
			e.subscribe("local", 0, 0)
			res := e.publish("shp_1", 1)
			j := e.waitDelivery(res.Deliveries[0].ID, 10*time.Second)
			switch {
			case !allow && (j.State != job.StateTerminal || j.Reason != job.ReasonPermanentError):
				t.Fatalf("guarded delivery ended %s/%s, want terminal/permanent_error", j.State, j.Reason)
			case !allow && e.sim.Stats().Routes["local"].Attempts != 0:
				t.Fatal("the guarded delivery reached the receiver")
			case allow && j.State != job.StatePublished:
				t.Fatalf("allowed delivery ended %s/%s", j.State, j.Reason)
			}
		})
	}
}

// TestWebhookPublishIdempotent: the same event and version twice creates
// no new delivery; a new version does.
func TestWebhookPublishIdempotent(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, true)
	e.subscribe("a", 0, 0)
	e.subscribe("b", 0, 0)
	first := e.publish("shp_1", 1)
	second := e.publish("shp_1", 1)
	if first.Created != 2 || second.Created != 0 || !second.Existing || len(second.Deliveries) != 2 {
		t.Fatalf("first %+v, second %+v", first, second)
	}
	if third := e.publish("shp_1", 2); third.Created != 2 {
		t.Fatalf("a new version created %d deliveries, want 2", third.Created)
	}
	e.waitAccepted("a", 2, 10*time.Second)
	ds, err := e.hooks.EventDeliveries(context.Background(), "us", "", "shp_1", "", 0)
	if err != nil || len(ds) != 4 {
		t.Fatalf("event deliveries = %d, %v; want 4", len(ds), err)
	}
	mine, err := e.hooks.SubscriberDeliveries(context.Background(), "us", "a", "", 0)
	if err != nil || len(mine) != 2 {
		t.Fatalf("subscriber deliveries = %d, %v; want 2", len(mine), err)
	}
}

// TestWebhookSecretRotation: after a rotation every delivery carries both
// signatures, so a receiver verifying with the old secret only, or with
// the new one only, accepts it.
func TestWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, true)
	old := e.subscribe("rot", 0, 0)
	_, next, err := e.hooks.RotateSecret(context.Background(), "us", "rot", time.Hour)
	if err != nil || next == old {
		t.Fatalf("rotate: %v", err)
	}
	for i, secret := range []string{old, next} {
		if err := e.sim.UpdateRoute("rot", func(rc *upstream.RouteConfig) { rc.Secrets = []string{secret} }); err != nil {
			t.Fatal(err)
		}
		res := e.publish(fmt.Sprintf("shp_%d", i), 1)
		if j := e.waitDelivery(res.Deliveries[0].ID, 10*time.Second); j.State != job.StatePublished {
			t.Fatalf("delivery verified with secret %d ended %s/%s", i, j.State, j.Reason)
		}
	}
	if rt := e.sim.Stats().Routes["rot"]; rt.BadSignatures != 0 || rt.Accepted != 2 {
		t.Fatalf("receiver: %d bad signatures, %d accepted", rt.BadSignatures, rt.Accepted)
	}
}

// TestWebhookGoneDisables: a subscriber answering 410 Gone is disabled
// and the delivery ends as subscriber_gone, with the answer kept for
// diagnosis; later events skip it.
func TestWebhookGoneDisables(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, true)
	e.subscribe("gone", 0, 0)
	if err := e.sim.UpdateRoute("gone", func(rc *upstream.RouteConfig) { rc.StatusOverride = 410 }); err != nil {
		t.Fatal(err)
	}
	res := e.publish("shp_1", 1)
	j := e.waitDelivery(res.Deliveries[0].ID, 10*time.Second)
	if j.State != job.StateTerminal || j.Reason != job.ReasonSubscriberGone {
		t.Fatalf("delivery ended %s/%s, want terminal/subscriber_gone", j.State, j.Reason)
	}
	sub, err := e.hooks.Subscriber(context.Background(), "us", "gone")
	if err != nil || sub.Enabled || sub.DisabledReason == "" {
		t.Fatalf("subscriber = %+v, %v; want disabled with a reason", sub, err)
	}
	resp, err := e.hooks.LastFailedResponse(context.Background(), "us", j.ID)
	if err != nil || resp.Status != 410 {
		t.Fatalf("last failed response = %+v, %v", resp, err)
	}
	if again := e.publish("shp_2", 1); len(again.Deliveries) != 0 {
		t.Fatalf("a disabled subscriber got %d deliveries", len(again.Deliveries))
	}
}

// TestWebhookFailingDisables: a subscriber failing continuously for
// DisableAfter is disabled with a reason.
func TestWebhookFailingDisables(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, true, func(_ *ratelane.Config, h *webhooks.Config) { h.DisableAfter = 300 * time.Millisecond })
	e.subscribe("flaky", 0, 0)
	if err := e.sim.UpdateRoute("flaky", func(rc *upstream.RouteConfig) { rc.StatusOverride = 500 }); err != nil {
		t.Fatal(err)
	}
	res := e.publish("shp_1", 1)
	e.waitDelivery(res.Deliveries[0].ID, 30*time.Second)
	sub, err := e.hooks.Subscriber(context.Background(), "us", "flaky")
	if err != nil || sub.Enabled || sub.Health.FailingSince.IsZero() {
		t.Fatalf("subscriber = %+v, %v; want disabled after failing", sub, err)
	}
	t.Logf("disabled: %s", sub.DisabledReason)
}

// TestWebhookRedeliver: a published delivery is sent again as a new job
// with the same webhook-id; one still waiting cannot be.
func TestWebhookRedeliver(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, true)
	e.subscribe("r", 0, 0)
	res := e.publish("shp_1", 1)
	e.waitDelivery(res.Deliveries[0].ID, 10*time.Second)
	again, err := e.hooks.Redeliver(context.Background(), "us", res.Deliveries[0].ID)
	if err != nil || again.ID == res.Deliveries[0].ID || !again.Redelivery || again.MessageID != res.Deliveries[0].MessageID {
		t.Fatalf("redeliver = %+v, %v", again, err)
	}
	e.waitDelivery(again.ID, 10*time.Second)
	if rt := e.sim.Stats().Routes["r"]; rt.Accepted != 2 || rt.Duplicates != 1 {
		t.Fatalf("receiver accepted %d with %d duplicates, want 2 and 1", rt.Accepted, rt.Duplicates)
	}
}
