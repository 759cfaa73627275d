package webhook

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/ratelane/ratelane/internal/job"
)

// Kind is the job kind of a webhook delivery; its payload is a Payload.
// It is a built-in kind (job.ReserveKind): only Registry.Publish,
// Registry.Redeliver and the review publisher create deliveries, so a
// producer can never name another tenant's subscriber in one.
const Kind = "webhook"

func init() { job.ReserveKind(Kind, "webhook deliveries (POST /v1/events)") }

// Payload is the JSON payload of a webhook delivery job. It names the
// subscriber rather than carrying its URL and secrets, so that a URL fix or
// a secret rotation applies to queued and retried deliveries, and secrets
// never sit in the job store:
//
//	{"subscriber_id": "sub_17", "event_id": "evt_01J...", "topic": "order.paid",
//	 "version": 1, "body": {...}}
//
// subscriber_id, event_id and body are required; body must be JSON other
// than null and is sent byte for byte. Unknown fields are ignored, for forward compatibility.
type Payload struct {
	SubscriberID string          `json:"subscriber_id"`
	EventID      string          `json:"event_id"`
	Topic        string          `json:"topic,omitempty"`
	Version      int64           `json:"version"`
	Body         json.RawMessage `json:"body"`
}

// ErrSubscriberNotFound is what a Directory returns (wrapped or not) for an
// unknown subscriber id; Handle then ends the job as permanent.
var ErrSubscriberNotFound = errors.New("subscriber not found")

// Directory looks subscribers up by id. Handle calls it on every attempt, so
// an implementation should be cheap (cached) and safe for concurrent use.
// It returns ErrSubscriberNotFound for an unknown id; any other error is
// taken as a temporary failure and the attempt is retried.
type Directory interface {
	Subscriber(ctx context.Context, id string) (Subscriber, error)
}

// Subscriber is a webhook endpoint and how to sign for it.
type Subscriber struct {
	// ID identifies the subscriber within its region.
	ID string
	// URL is the receiver's http or https URL.
	URL string
	// Region is the data plane the subscriber belongs to; a job from
	// another region is never delivered to it. Empty matches any region.
	Region string
	// Tenant owns the subscriber; a job of another tenant is never
	// delivered to it. Empty matches any tenant.
	Tenant string
	// Secrets sign deliveries; both sign during a rotation.
	Secrets Secrets
	// Headers are static headers sent with every delivery; see
	// Delivery.Headers.
	Headers map[string]string
	// Enabled is false for a subscriber that was switched off (by an
	// operator, or after a 410 Gone); deliveries to it end as permanent.
	Enabled bool
}

// Handle is the job handler for Kind: it decodes the job's Payload, looks
// the subscriber up in the Directory and makes one delivery attempt, signed
// with the subscriber's active secrets at the Deliverer's clock. A bad
// payload, an unknown, disabled, other-region or other-tenant subscriber,
// or a missing Directory end the job as permanent (an unknown subscriber
// with ReasonSubscriberGone); a failed lookup is transient. Otherwise the
// outcome is Deliver's. The bounded Response is not returned: a delivery
// ledger that wants it should call Deliver.
func (d *Deliverer) Handle(ctx context.Context, j *job.Job) job.Outcome {
	p, ok := decodePayload(j.Payload)
	if !ok {
		return permanent("invalid webhook payload")
	}
	if d.dir == nil {
		return permanent("no subscriber directory configured")
	}
	sub, err := d.dir.Subscriber(ctx, p.SubscriberID)
	if o, ok := checkSubscriber(j, err, sub.Region, sub.Tenant, sub.Enabled); !ok {
		return o
	}
	now := d.now()
	out, _ := d.Deliver(ctx, p.delivery(sub.URL, sub.Headers, sub.Secrets.Active(now)), j.Attempt, now)
	return out
}

// checkSubscriber is what both delivery handlers decide before anything is
// signed or sent, from the subscriber lookup's error and the subscriber's
// region, tenant and switch: an unknown subscriber ends the job permanent
// (subscriber_gone), a failed lookup is transient, one of another region
// or tenant (checkOwner) or a disabled one ends it permanent. ok is true
// when the delivery may go ahead.
func checkSubscriber(j *job.Job, lookupErr error, region, tenant string, enabled bool) (job.Outcome, bool) {
	switch {
	case errors.Is(lookupErr, ErrSubscriberNotFound):
		return job.Outcome{Class: job.ClassPermanent, Reason: job.ReasonSubscriberGone, Err: "subscriber not found"}, false
	case lookupErr != nil:
		return job.Outcome{Class: job.ClassTransient, Err: "subscriber lookup failed"}, false
	}
	if o, ok := checkOwner(j, region, tenant); !ok {
		return o, false // before any other check: a foreign subscriber's state is not the job's business
	}
	if !enabled {
		return permanent("subscriber disabled"), false
	}
	return job.Outcome{}, true
}

// delivery is the attempt of payload p at a subscriber's url with its
// static headers, signed with secrets.
func (p Payload) delivery(url string, headers map[string]string, secrets []string) Delivery {
	return Delivery{SubscriberID: p.SubscriberID, URL: url, EventID: p.EventID, Topic: p.Topic, Version: p.Version,
		Body: p.Body, Headers: headers, Secrets: secrets}
}

// checkOwner is the handlers' defence in depth behind the reserved kind: a
// delivery job goes only to a subscriber of its own region and tenant.
// Delivery jobs are created by ratelane alone, from the tenant's own
// subscribers, so a mismatch is a bug or a forged row; the job ends
// permanent before anything is signed or sent.
func checkOwner(j *job.Job, region, tenant string) (job.Outcome, bool) {
	switch {
	case region != "" && region != j.Region:
		return permanent("subscriber belongs to another region"), false
	case tenant != "" && tenant != j.Tenant:
		return permanent("subscriber belongs to another tenant than the delivery job"), false
	}
	return job.Outcome{}, true
}
