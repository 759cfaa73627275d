package ratelane

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/webhook"
)

// WebhookKind is the job kind of webhook deliveries. It is a built-in
// kind: Client.Insert refuses it; deliveries are created by
// Webhooks().Publish.
const WebhookKind = webhook.Kind

// Webhook types, shared with the HTTP API.
type (
	// SubscriberSpec is what an operator declares about a webhook
	// subscriber: URL, topics, rate, concurrency, secret, headers.
	SubscriberSpec = webhook.SubscriberSpec
	// Subscriber is a stored webhook subscriber; its JSON form never
	// shows secrets.
	Subscriber = webhook.Record
	// SubscriberRate is a subscriber's allowance: Limit per Period, Burst.
	SubscriberRate = webhook.Rate
	// Event is one event to fan out to the subscribers of its topic.
	Event = webhook.Event
	// PublishResult says what publishing an event created.
	PublishResult = webhook.PublishResult
	// Delivery is one delivery of an event to one subscriber.
	Delivery = webhook.DeliveryInfo
	// DeliveryResponse is the bounded answer of a failed delivery
	// attempt, for operators.
	DeliveryResponse = webhook.ResponseRecord
	// DeliveryResult is the result of a successful delivery job: status
	// and timing, never the subscriber's body or headers.
	DeliveryResult = webhook.Result
)

// WebhookConfig configures webhooks. The zero value keeps subscribers and
// accepts events but delivers nothing from this process (another node
// with Deliver set does).
type WebhookConfig struct {
	// Deliver registers the built-in "webhook" job kind in every region:
	// this process's engines deliver events to subscribers.
	Deliver bool
	// AllowPrivateTargets lets deliveries reach loopback, RFC 1918 and
	// unique local IPv6 addresses: for tests, demos and single-tenant
	// installs only. Link-local addresses and cloud metadata endpoints
	// (169.254.169.254, fd00:ec2::254, 100.100.100.200) stay refused.
	// Default false.
	AllowPrivateTargets bool
	// Timeout bounds one delivery attempt; default 15 s.
	Timeout time.Duration
	// RotationWindow is how long a rotated-out secret keeps signing;
	// default 24 h.
	RotationWindow time.Duration
	// DisableAfter disables a subscriber whose deliveries failed
	// continuously for this long; default 5 days.
	DisableAfter time.Duration
	// Headroom is the fraction of a subscriber's rate left unused to
	// absorb clock and network jitter; default 0.03, negative for none.
	Headroom float64
	// Lane is the lane of deliveries of events that name none; default
	// batch.
	Lane Lane
}

// openWebhooks creates a region's subscriber registry and, with Deliver,
// adds the webhook kind to the kinds its engine runs.
func (c *Client) openWebhooks(rt *regionRT, kinds map[string]engine.Kind) error {
	w := c.cfg.Webhooks
	region := rt.store.Region()
	reg, err := webhook.NewRegistry(webhook.RegistryConfig{
		Store: rt.store, Jobs: rt.jobs, RotationWindow: w.RotationWindow, DisableAfter: w.DisableAfter, Headroom: w.Headroom,
		Lane: w.Lane, Now: c.cfg.Now, Notify: func() { c.notify(region) },
	})
	if err != nil {
		return err
	}
	rt.hooks = reg
	if !w.Deliver {
		return nil
	}
	if _, taken := kinds[WebhookKind]; taken {
		return fmt.Errorf("kind %q is built in; Webhooks.Deliver and a handler of that kind cannot both be set", WebhookKind)
	}
	d, err := webhook.New(webhook.Config{Version: Version, Timeout: w.Timeout, AllowPrivate: w.AllowPrivateTargets, Now: c.cfg.Now})
	if err != nil {
		return err
	}
	kinds[WebhookKind] = engine.Kind{Handler: engine.HandlerFunc(reg.Handler(d))}
	return nil
}

// Webhooks returns the client's webhook subscribers and events.
func (c *Client) Webhooks() *Webhooks { return &Webhooks{c: c} }

// Webhooks manages webhook subscribers and publishes events, per region.
// Subscribers are small documents in their region's store; each event
// becomes one delivery job per subscriber of its topic in that region. It
// is safe for concurrent use.
type Webhooks struct{ c *Client }

func (w *Webhooks) registry(region string) (*webhook.Registry, error) {
	rt, ok := w.c.regions[region]
	if !ok {
		return nil, fmt.Errorf("ratelane: unknown region %q; configured regions are %v", region, w.c.order)
	}
	return rt.hooks, nil
}

// PutSubscriber creates or replaces a subscriber and its limit key
// "subscriber:<id>". secret is the generated signing secret, shown once;
// empty when the spec named one or the subscriber kept its own.
func (w *Webhooks) PutSubscriber(ctx context.Context, region string, spec SubscriberSpec) (sub Subscriber, secret string, created bool, err error) {
	reg, err := w.registry(region)
	if err != nil {
		return Subscriber{}, "", false, err
	}
	return reg.Put(ctx, spec)
}

// Subscriber returns one subscriber (ErrNotFound when unknown).
func (w *Webhooks) Subscriber(ctx context.Context, region, id string) (Subscriber, error) {
	reg, err := w.registry(region)
	if err != nil {
		return Subscriber{}, err
	}
	return reg.Get(ctx, id)
}

// Subscribers lists a region's subscribers in id order, after the id
// after, up to limit (default 100, at most 1000).
func (w *Webhooks) Subscribers(ctx context.Context, region, after string, limit int) ([]Subscriber, error) {
	reg, err := w.registry(region)
	if err != nil {
		return nil, err
	}
	return reg.List(ctx, after, limit)
}

// DeleteSubscriber removes a subscriber; its queued deliveries end as
// subscriber_gone.
func (w *Webhooks) DeleteSubscriber(ctx context.Context, region, id string) error {
	reg, err := w.registry(region)
	if err != nil {
		return err
	}
	return reg.Delete(ctx, id)
}

// RotateSecret gives a subscriber a new signing secret (returned once); the
// old one keeps signing alongside it for window (0: the configured
// RotationWindow).
func (w *Webhooks) RotateSecret(ctx context.Context, region, id string, window time.Duration) (Subscriber, string, error) {
	reg, err := w.registry(region)
	if err != nil {
		return Subscriber{}, "", err
	}
	return reg.RotateSecret(ctx, id, window)
}

// DisableSubscriber switches a subscriber off with a reason.
func (w *Webhooks) DisableSubscriber(ctx context.Context, region, id, reason string) (Subscriber, error) {
	reg, err := w.registry(region)
	if err != nil {
		return Subscriber{}, err
	}
	return reg.Disable(ctx, id, reason)
}

// Publish fans an event out to the enabled subscribers of its topic and
// tenant in region, in one durable write; the same event and version
// published again creates nothing and returns the existing deliveries.
func (w *Webhooks) Publish(ctx context.Context, region string, ev Event) (PublishResult, error) {
	reg, err := w.registry(region)
	if err != nil {
		return PublishResult{}, err
	}
	return reg.Publish(ctx, ev)
}

// EventDeliveries lists the deliveries of every version of a tenant's
// event ("" is the default tenant), in creation order.
func (w *Webhooks) EventDeliveries(ctx context.Context, region, tenant, eventID, after string, limit int) ([]Delivery, error) {
	reg, err := w.registry(region)
	if err != nil {
		return nil, err
	}
	return reg.EventDeliveries(ctx, tenant, eventID, after, limit)
}

// SubscriberDeliveries lists a subscriber's deliveries, newest first.
func (w *Webhooks) SubscriberDeliveries(ctx context.Context, region, subscriberID, after string, limit int) ([]Delivery, error) {
	reg, err := w.registry(region)
	if err != nil {
		return nil, err
	}
	return reg.SubscriberDeliveries(ctx, subscriberID, after, limit)
}

// Redeliver sends a delivery again: a terminal one is redriven, a
// published one copied to a new job with the same webhook-id; one still
// in progress gives ErrConflict.
func (w *Webhooks) Redeliver(ctx context.Context, region, deliveryID string) (Delivery, error) {
	reg, err := w.registry(region)
	if err != nil {
		return Delivery{}, err
	}
	return reg.Redeliver(ctx, deliveryID)
}

// LastFailedResponse returns the first 4 KiB (and diagnostic headers) of a
// delivery's last failed answer; ErrNotFound when it has none. It is for
// operators: the HTTP API shows it to admin keys only. A successful
// delivery keeps only its status and timing, as its job's result.
func (w *Webhooks) LastFailedResponse(ctx context.Context, region, deliveryID string) (DeliveryResponse, error) {
	reg, err := w.registry(region)
	if err != nil {
		return DeliveryResponse{}, err
	}
	return reg.LastFailedResponse(ctx, deliveryID)
}
