// Package webhooks is ratelane's webhook plug-in: subscribers (small
// documents in their region's store, each with its own limit key), events
// fanned out to the subscribers of their topic, one delivery job per
// subscriber, signed with Standard Webhooks and delivered through an
// SSRF-guarded client.
//
// A program enables webhooks by handing a *Plugin to
// ratelane.Config.Plugins:
//
//	hooks := webhooks.New(webhooks.Config{Deliver: true})
//	cfg.Plugins = append(cfg.Plugins, hooks)
//	client, err := ratelane.NewClient(ctx, cfg)
//	_, secret, _, err := hooks.PutSubscriber(ctx, "us", webhooks.SubscriberSpec{ID: "store_17", URL: u, Topics: []string{"shipment.updated"}})
//	res, err := hooks.Publish(ctx, "us", webhooks.Event{Topic: "shipment.updated", ID: "shp_1", Payload: body})
//
// The plug-in has the shape of the review plug-in (package review): in
// every region it binds it keeps a subscriber registry, provides the
// region's subscriber lookup (ratelane.SubscriberLookup, through which a
// review publishes to a subscriber without importing this package) and,
// with Config.Deliver, registers the built-in kind "webhook"; it mounts
// the routes /v1/subscribers, /v1/events and /v1/deliveries
// (ratelane.Router); and it adds the offline "webhook" command of the
// ratelane binary (ratelane.Commander). The core library imports none of
// it (internal/deptest enforces it).
package webhooks

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/webhook"
	"github.com/ratelane/ratelane/internal/webhook/hookapi"
)

// Kind is the job kind of webhook deliveries. It is a built-in kind:
// ratelane.Client.Insert refuses it; deliveries are created by Publish.
const Kind = webhook.Kind

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

// Config configures the plug-in. The zero value keeps subscribers and
// accepts events but delivers nothing from this process (another node
// with Deliver set does).
type Config struct {
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
	Lane ratelane.Lane
}

// Plugin is the webhooks plug-in (a ratelane.Plugin, Router and
// Commander). One Plugin serves one Client: binding a region twice is
// refused. It is safe for concurrent use once NewClient has returned.
type Plugin struct {
	cfg     Config
	mu      sync.Mutex
	regions map[string]*webhook.Registry
	order   []string
}

// New returns the plug-in for cfg; hand it to ratelane.Config.Plugins.
func New(cfg Config) *Plugin { return &Plugin{cfg: cfg, regions: map[string]*webhook.Registry{}} }

// Name is "webhooks".
func (p *Plugin) Name() string { return "webhooks" }

// Bind creates the region's subscriber registry, settles the limit keys
// a crash left behind their subscribers (webhook.Registry.SettleKeys),
// provides it as the region's subscriber lookup and, with Deliver,
// registers the webhook kind (ratelane.Plugin).
func (p *Plugin) Bind(ctx context.Context, r *ratelane.PluginRegion) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.regions[r.Name()]; dup {
		return fmt.Errorf("region %q is already bound: one webhooks.Plugin serves one client", r.Name())
	}
	cfg := r.Config()
	reg, err := webhook.NewRegistry(webhook.RegistryConfig{
		Store: r.Store(), Jobs: r.Jobs(), Logger: cfg.Logger, RotationWindow: p.cfg.RotationWindow, DisableAfter: p.cfg.DisableAfter,
		Headroom: p.cfg.Headroom, Lane: p.cfg.Lane, Now: cfg.Now, Notify: r.Notify,
	})
	if err != nil {
		return err
	}
	if _, err := reg.SettleKeys(ctx); err != nil {
		return fmt.Errorf("webhooks: region %q: %w", r.Name(), err)
	}
	if err := r.SetSubscribers(lookup{reg}); err != nil {
		return err
	}
	if p.cfg.Deliver {
		d, err := webhook.New(webhook.Config{Version: ratelane.Version, Timeout: p.cfg.Timeout, AllowPrivate: p.cfg.AllowPrivateTargets, Now: cfg.Now})
		if err != nil {
			return err
		}
		if err := r.Handle(Kind, engine.Kind{Handler: engine.HandlerFunc(reg.Handler(d))}); err != nil {
			return fmt.Errorf("%w (Deliver registers the built-in kind %q; drop the other handler of that kind)", err, Kind)
		}
	}
	p.regions[r.Name()] = reg
	p.order = append(p.order, r.Name())
	return nil
}

// Routes returns the /v1/subscribers, /v1/events and /v1/deliveries
// routes (ratelane.Router).
func (p *Plugin) Routes() mount.Mount {
	p.mu.Lock()
	defer p.mu.Unlock()
	regs := make(map[string]hookapi.Registry, len(p.regions))
	for name, reg := range p.regions {
		regs[name] = reg
	}
	return hookapi.Routes(regs)
}

// lookup is a region's registry as the core's subscriber lookup.
type lookup struct{ reg *webhook.Registry }

func (l lookup) SubscriberTenant(ctx context.Context, id string) (string, error) {
	sub, err := l.reg.Get(ctx, id)
	if err != nil {
		return "", err
	}
	return sub.Tenant, nil
}

// onRegion is fn on the region's registry: every per-region method looks
// the registry up the same way, and answers the same error for a region
// the plug-in is not bound to.
func onRegion[T any](p *Plugin, region string, fn func(*webhook.Registry) (T, error)) (T, error) {
	reg, err := p.registry(region)
	if err != nil {
		var none T
		return none, err
	}
	return fn(reg)
}

func (p *Plugin) registry(region string) (*webhook.Registry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	reg, ok := p.regions[region]
	if !ok {
		return nil, fmt.Errorf("webhooks: region %q is not bound; the plug-in's regions are %v (is it in the client's Config.Plugins?)", region, p.order)
	}
	return reg, nil
}

// PutSubscriber creates or replaces a subscriber and its limit key
// "subscriber:<id>". secret is the generated signing secret, shown once;
// empty when the spec named one or the subscriber kept its own.
func (p *Plugin) PutSubscriber(ctx context.Context, region string, spec SubscriberSpec) (sub Subscriber, secret string, created bool, err error) {
	reg, err := p.registry(region)
	if err != nil {
		return Subscriber{}, "", false, err
	}
	return reg.Put(ctx, spec)
}

// Subscriber returns one subscriber (ErrNotFound when unknown).
func (p *Plugin) Subscriber(ctx context.Context, region, id string) (Subscriber, error) {
	return onRegion(p, region, func(reg *webhook.Registry) (Subscriber, error) { return reg.Get(ctx, id) })
}

// Subscribers lists a region's subscribers in id order, after the id
// after, up to limit (default 100; above 1000 is 1000).
func (p *Plugin) Subscribers(ctx context.Context, region, after string, limit int) ([]Subscriber, error) {
	return onRegion(p, region, func(reg *webhook.Registry) ([]Subscriber, error) { return reg.List(ctx, after, limit) })
}

// DeleteSubscriber removes a subscriber; its queued deliveries end as
// subscriber_gone.
func (p *Plugin) DeleteSubscriber(ctx context.Context, region, id string) error {
	reg, err := p.registry(region)
	if err != nil {
		return err
	}
	return reg.Delete(ctx, id)
}

// RotateSecret gives a subscriber a new signing secret (returned once); the
// old one keeps signing alongside it for window (0: the configured
// RotationWindow).
func (p *Plugin) RotateSecret(ctx context.Context, region, id string, window time.Duration) (Subscriber, string, error) {
	reg, err := p.registry(region)
	if err != nil {
		return Subscriber{}, "", err
	}
	return reg.RotateSecret(ctx, id, window)
}

// DisableSubscriber switches a subscriber off with a reason.
func (p *Plugin) DisableSubscriber(ctx context.Context, region, id, reason string) (Subscriber, error) {
	return onRegion(p, region, func(reg *webhook.Registry) (Subscriber, error) { return reg.Disable(ctx, id, reason) })
}

// Publish fans an event out to the enabled subscribers of its topic and
// tenant in region, in one durable write; the same event and version
// published again creates nothing and returns the existing deliveries.
func (p *Plugin) Publish(ctx context.Context, region string, ev Event) (PublishResult, error) {
	return onRegion(p, region, func(reg *webhook.Registry) (PublishResult, error) { return reg.Publish(ctx, ev) })
}

// EventDeliveries lists the deliveries of every version of a tenant's
// event ("" is the default tenant), in creation order.
func (p *Plugin) EventDeliveries(ctx context.Context, region, tenant, eventID, after string, limit int) ([]Delivery, error) {
	return onRegion(p, region, func(reg *webhook.Registry) ([]Delivery, error) {
		return reg.EventDeliveries(ctx, tenant, eventID, after, limit)
	})
}

// SubscriberDeliveries lists a subscriber's deliveries, newest first.
func (p *Plugin) SubscriberDeliveries(ctx context.Context, region, subscriberID, after string, limit int) ([]Delivery, error) {
	return onRegion(p, region, func(reg *webhook.Registry) ([]Delivery, error) {
		return reg.SubscriberDeliveries(ctx, subscriberID, after, limit)
	})
}

// Redeliver sends a delivery again: a terminal one is redriven, a
// published one copied to a new job with the same webhook-id; one still
// in progress gives ErrConflict.
func (p *Plugin) Redeliver(ctx context.Context, region, deliveryID string) (Delivery, error) {
	return onRegion(p, region, func(reg *webhook.Registry) (Delivery, error) { return reg.Redeliver(ctx, deliveryID) })
}

// LastFailedResponse returns the first 4 KiB (and diagnostic headers) of a
// delivery's last failed answer; ErrNotFound when it has none. It is for
// operators: the HTTP API shows it to admin keys only. A successful
// delivery keeps only its status and timing, as its job's result.
func (p *Plugin) LastFailedResponse(ctx context.Context, region, deliveryID string) (DeliveryResponse, error) {
	return onRegion(p, region, func(reg *webhook.Registry) (DeliveryResponse, error) { return reg.LastFailedResponse(ctx, deliveryID) })
}
