package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// MaxEventIDLen bounds event ids so that a delivery's idempotency key,
// "<event id>:<subscriber id>:<version>" plus a redelivery suffix, fits
// job.MaxNameLen.
const MaxEventIDLen = 64

// Event is one event to fan out to every enabled subscriber of its topic
// in a region (POST /v1/events).
type Event struct {
	// Topic selects the subscribers, e.g. "shipment.updated".
	Topic string `json:"topic"`
	// ID identifies the event, e.g. a shipment id: 1 to 64 characters
	// without '/' or control characters.
	ID string `json:"id"`
	// Version distinguishes updates of one event; each (ID, Version) is
	// delivered once per subscriber. Default 0.
	Version int64 `json:"version"`
	// Tenant publishes the event; only the tenant's subscribers receive
	// it. Default "default".
	Tenant string `json:"tenant,omitempty"`
	// Payload is the JSON body sent to subscribers, at most
	// job.MaxPayloadBytes less a small envelope.
	Payload json.RawMessage `json:"payload"`
	// Lane overrides the registry's delivery lane.
	Lane job.Lane `json:"lane,omitempty"`
}

// Delivery states as the API shows them are job states; DeliveryInfo is
// one delivery job seen as a delivery.
type DeliveryInfo struct {
	// ID is the delivery job's id.
	ID           string `json:"id"`
	SubscriberID string `json:"subscriber_id"`
	EventID      string `json:"event_id"`
	Topic        string `json:"topic,omitempty"`
	Version      int64  `json:"version"`
	// MessageID is the webhook-id the subscriber sees.
	MessageID string     `json:"message_id"`
	State     job.State  `json:"state"`
	Reason    job.Reason `json:"reason,omitempty"`
	// Attempts counts the delivery's attempts so far.
	Attempts int `json:"attempts"`
	// LastStatus and LastError describe the last attempt.
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	// NextAttemptAt is when a waiting or rescheduled delivery is next
	// eligible.
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	// Redelivery is set on a delivery created by Redeliver.
	Redelivery bool      `json:"redelivery,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// PublishResult is what Publish did.
type PublishResult struct {
	EventID string `json:"event_id"`
	Version int64  `json:"version"`
	Topic   string `json:"topic"`
	// Existing is set when this event version had been published before:
	// nothing was created and Deliveries are the earlier ones.
	Existing bool `json:"existing"`
	// Created counts the delivery jobs this call created.
	Created    int            `json:"created"`
	Deliveries []DeliveryInfo `json:"deliveries"`
}

// eventDoc is the ObjectEvent document of one event version: which
// deliveries it created. It lets deliveries be listed per event without a
// lookup by idempotency key, and makes a second Publish a no-op.
type eventDoc struct {
	EventID     string          `json:"event_id"`
	Version     int64           `json:"version"`
	Topic       string          `json:"topic"`
	Tenant      string          `json:"tenant"`
	PublishedAt time.Time       `json:"published_at"`
	Deliveries  []eventDelivery `json:"deliveries"`
}

type eventDelivery struct {
	SubscriberID string `json:"subscriber_id"`
	JobID        string `json:"job_id"`
}

var eventIDPattern = regexp.MustCompile(`^[^/\x00-\x1f\x7f]{1,64}$`)

func (ev Event) validate() error {
	ve := &job.ValidationError{}
	add := func(field, format string, args ...any) {
		ve.Fields = append(ve.Fields, job.FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
	}
	if !topicPattern.MatchString(ev.Topic) || ev.Topic == "*" {
		add("topic", "topic must be 1 to 128 letters, digits, '.', '_', ':', '/' or '-'")
	}
	if !eventIDPattern.MatchString(ev.ID) {
		add("id", "id must be 1 to %d characters without '/' or control characters", MaxEventIDLen)
	}
	if ev.Version < 0 {
		add("version", "version must not be negative")
	}
	if ev.Tenant != "" && (len(ev.Tenant) > job.MaxNameLen || strings.ContainsAny(ev.Tenant, "\x00\r\n\t")) {
		add("tenant", "tenant must be at most %d bytes without control characters", job.MaxNameLen)
	}
	if len(ev.Payload) == 0 || !json.Valid(ev.Payload) || string(ev.Payload) == "null" {
		add("payload", "payload must be a JSON value other than null")
	}
	if ev.Lane != "" && !ev.Lane.Valid() {
		add("lane", "lane must be interactive or batch")
	}
	if len(ve.Fields) > 0 {
		return ve
	}
	return nil
}

// eventObjectID names an event version's document. Tenants are part of
// it (idempotency is per tenant); each part is path-escaped so that '/'
// separates parts unambiguously, and the version is zero-padded so that
// versions sort numerically.
func eventObjectID(tenant, eventID string, version int64) string {
	return eventPrefix(tenant, eventID) + versionID(version)
}

func eventPrefix(tenant, eventID string) string {
	return url.PathEscape(tenant) + "/" + url.PathEscape(eventID) + "/"
}

// Publish fans ev out: one delivery job per enabled subscriber of its topic
// and tenant, with limit key LimitKey(subscriber) and idempotency key
// IdempotencyKey(event, subscriber, version), all in one store.Insert, and
// records the deliveries in the event's document. Publishing the same
// event version again creates nothing and returns the existing deliveries
// (Existing set). The subscriber set is read from this node's cache
// (RegistryConfig.CacheFor old at most), and the first payload wins.
//
// Between the insert and the document write a crash can lose the
// document; the next Publish of the version then re-inserts, which the
// idempotency keys make a no-op for every subscriber that already had a
// delivery.
func (r *Registry) Publish(ctx context.Context, ev Event) (PublishResult, error) {
	if err := ev.validate(); err != nil {
		return PublishResult{}, err
	}
	ev.Tenant = cmp.Or(ev.Tenant, job.DefaultTenant)
	oid := eventObjectID(ev.Tenant, ev.ID, ev.Version)
	if doc, err := r.event(ctx, oid); err == nil {
		return r.existing(ctx, doc)
	} else if !errors.Is(err, store.ErrNotFound) {
		return PublishResult{}, err
	}
	jobs, err := r.deliveryJobs(ctx, ev)
	if err != nil {
		return PublishResult{}, err
	}
	res := PublishResult{EventID: ev.ID, Version: ev.Version, Topic: ev.Topic, Deliveries: []DeliveryInfo{}}
	doc := eventDoc{EventID: ev.ID, Version: ev.Version, Topic: ev.Topic, Tenant: ev.Tenant, PublishedAt: r.cfg.Now().UTC()}
	if len(jobs) > 0 {
		inserted, err := r.cfg.Jobs.Insert(ctx, jobs, admission.Config{})
		if err != nil {
			return PublishResult{}, fmt.Errorf("publish event %s: %w", ev.ID, err)
		}
		for _, in := range inserted {
			d := deliveryOf(in.Job)
			doc.Deliveries = append(doc.Deliveries, eventDelivery{SubscriberID: d.SubscriberID, JobID: in.Job.ID})
			res.Deliveries = append(res.Deliveries, d)
			if !in.Existing {
				res.Created++
			}
		}
		r.notify()
	}
	return res, r.putEvent(ctx, oid, doc)
}

// deliveryJobs builds the delivery jobs of ev, ready to insert.
func (r *Registry) deliveryJobs(ctx context.Context, ev Event) ([]*job.Job, error) {
	subs, err := r.subscribers(ctx)
	if err != nil {
		return nil, err
	}
	now := r.cfg.Now()
	lane := ev.Lane
	lane = cmp.Or(lane, r.cfg.Lane)
	var jobs []*job.Job
	for _, s := range subs {
		if !s.Enabled || s.Tenant != ev.Tenant || !s.subscribes(ev.Topic) {
			continue
		}
		p, err := json.Marshal(Payload{SubscriberID: s.ID, EventID: ev.ID, Topic: ev.Topic, Version: ev.Version, Body: ev.Payload})
		if err != nil {
			return nil, err
		}
		j, err := r.newJob(s.ID, ev.Tenant, lane, p, IdempotencyKey(ev.ID, s.ID, ev.Version), now)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// newJob prepares one delivery job.
func (r *Registry) newJob(subID, tenant string, lane job.Lane, payload []byte, idemKey string, now time.Time) (*job.Job, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	j := &job.Job{Kind: Kind, Region: r.Region(), Lane: lane, Tenant: tenant, LimitKeys: []string{LimitKey(subID)},
		Payload: payload, IdempotencyKey: idemKey}
	j.Prepare(id.String(), now, 0, false)
	if err := j.Validate(nil); err != nil {
		return nil, err
	}
	return j, nil
}

// existing answers a repeated Publish from the event's document.
func (r *Registry) existing(ctx context.Context, doc eventDoc) (PublishResult, error) {
	res := PublishResult{EventID: doc.EventID, Version: doc.Version, Topic: doc.Topic, Existing: true, Deliveries: []DeliveryInfo{}}
	for _, d := range doc.Deliveries {
		j, err := r.st.Get(ctx, d.JobID)
		if errors.Is(err, store.ErrNotFound) {
			continue // pruned after the retention period
		}
		if err != nil {
			return PublishResult{}, err
		}
		res.Deliveries = append(res.Deliveries, deliveryOf(j))
	}
	return res, nil
}

func (r *Registry) event(ctx context.Context, oid string) (eventDoc, error) {
	return getDoc[eventDoc](ctx, r.st, ObjectEvent, oid, "event")
}

// getDoc reads the object kind/id and decodes its JSON body; what names
// the document in a decode error.
func getDoc[T any](ctx context.Context, st store.Store, kind, id, what string) (T, error) {
	var doc, zero T
	o, err := st.GetObject(ctx, kind, id)
	if err != nil {
		return zero, err
	}
	if err := json.Unmarshal(o.Body, &doc); err != nil {
		return zero, fmt.Errorf("decode %s %s: %w", what, id, err)
	}
	return doc, nil
}

// putEvent records doc, the deliveries this Publish inserted, in the
// event's document, merged with what is stored. Two Publishes of one
// version that both found no document both insert (the idempotency keys
// deduplicate), each with the subscribers it read, and the document must
// list every delivery either made: an unconditional write of this one's
// own list let a late writer drop the other's deliveries from the listing
// and from repeats (TestConcurrentPublishesKeepEveryDelivery). So the
// write is guarded (store.PutObjectIf) on the body last read, nil first,
// since Publish found no document; a conflict is another Publish's
// write, read and merged again. Each conflict is such a write that
// landed, so the loop ends when the concurrent Publishes of the version
// do; ctx ends it too.
func (r *Registry) putEvent(ctx context.Context, oid string, doc eventDoc) error {
	if doc.Deliveries == nil {
		doc.Deliveries = []eventDelivery{}
	}
	var prev []byte // the stored body the write replaces; nil: none
	for {
		body, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		err = r.st.PutObjectIf(ctx, store.Object{Kind: ObjectEvent, ID: oid, Body: body, UpdatedAt: r.cfg.Now().UTC()}, prev)
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		o, err := r.st.GetObject(ctx, ObjectEvent, oid)
		if err != nil {
			return err
		}
		var stored eventDoc
		if err := json.Unmarshal(o.Body, &stored); err != nil {
			return fmt.Errorf("decode event %s: %w", oid, err)
		}
		var added bool
		if doc, added = mergeEvent(stored, doc); !added {
			return nil // the stored document lists every delivery of this one
		}
		prev = o.Body
	}
}

// mergeEvent returns the stored document with the deliveries of doc that
// it lacks (by job id) appended, and whether there were any. The stored
// one's other fields stand: the first Publish of a version wins.
func mergeEvent(stored, doc eventDoc) (eventDoc, bool) {
	have := make(map[string]bool, len(stored.Deliveries))
	for _, d := range stored.Deliveries {
		have[d.JobID] = true
	}
	added := false
	for _, d := range doc.Deliveries {
		if !have[d.JobID] {
			stored.Deliveries = append(stored.Deliveries, d)
			added = true
		}
	}
	return stored, added
}

func (r *Registry) notify() {
	if r.cfg.Notify != nil {
		r.cfg.Notify()
	}
}

// EventDeliveries returns the deliveries of every version of a tenant's
// event, ordered by delivery id (creation order), up to limit (paged as
// store.PageSize: 0 means 100, above 1000 is 1000) after the delivery id
// after. It reads the event documents, then each delivery job. An event that was never published gives an
// error wrapping store.ErrNotFound.
func (r *Registry) EventDeliveries(ctx context.Context, tenant, eventID, after string, limit int) ([]DeliveryInfo, error) {
	tenant = cmp.Or(tenant, job.DefaultTenant)
	ids, err := r.eventJobIDs(ctx, tenant, eventID)
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	start, _ := slices.BinarySearch(ids, after)
	if after != "" && start < len(ids) && ids[start] == after {
		start++
	}
	return r.views(ctx, ids[start:min(len(ids), start+store.PageSize(limit))])
}

// eventJobIDs collects the delivery job ids of every version of an event.
func (r *Registry) eventJobIDs(ctx context.Context, tenant, eventID string) ([]string, error) {
	prefix := eventPrefix(tenant, eventID)
	var ids []string
	found := false
	after := prefix
	for {
		objs, err := r.st.ListObjects(ctx, ObjectEvent, after, 100)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if !strings.HasPrefix(o.ID, prefix) {
				return ids, foundErr(found, eventID)
			}
			found = true
			var doc eventDoc
			if err := json.Unmarshal(o.Body, &doc); err != nil {
				return nil, fmt.Errorf("decode event %s: %w", o.ID, err)
			}
			for _, d := range doc.Deliveries {
				ids = append(ids, d.JobID)
			}
			after = o.ID
		}
		if len(objs) < 100 {
			return ids, foundErr(found, eventID)
		}
	}
}

func foundErr(found bool, eventID string) error {
	if found {
		return nil
	}
	return fmt.Errorf("event %s: %w", eventID, store.ErrNotFound)
}

// SubscriberDeliveries returns a subscriber's deliveries, newest first,
// up to limit (paged as store.PageSize: 0 means 100, above 1000 is 1000)
// after the delivery id after. It lists the jobs on the subscriber's
// limit key, so deliveries of a deleted and re-created subscriber are
// included.
func (r *Registry) SubscriberDeliveries(ctx context.Context, subscriberID, after string, limit int) ([]DeliveryInfo, error) {
	jobs, err := r.st.List(ctx, store.ListParams{Kind: Kind, LimitKey: LimitKey(subscriberID), After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return r.views(ctx, ids)
}

// Delivery returns one delivery with its last attempt's status.
func (r *Registry) Delivery(ctx context.Context, id string) (DeliveryInfo, error) {
	j, err := r.deliveryJob(ctx, id)
	if err != nil {
		return DeliveryInfo{}, err
	}
	return deliveryOf(j), nil
}

func (r *Registry) deliveryJob(ctx context.Context, id string) (*job.Job, error) {
	j, err := r.st.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.Kind != Kind {
		return nil, fmt.Errorf("job %s is not a webhook delivery: %w", id, store.ErrNotFound)
	}
	return j, nil
}

// views loads each delivery job (with its history, for the last status).
func (r *Registry) views(ctx context.Context, ids []string) ([]DeliveryInfo, error) {
	out := make([]DeliveryInfo, 0, len(ids))
	for _, id := range ids {
		j, err := r.st.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue // pruned
		}
		if err != nil {
			return nil, err
		}
		out = append(out, deliveryOf(j))
	}
	return out, nil
}

// deliveryOf views a delivery job. Attempt records never hold content, so
// the view does not either.
func deliveryOf(j *job.Job) DeliveryInfo {
	var p struct {
		SubscriberID string `json:"subscriber_id"`
		EventID      string `json:"event_id"`
		Topic        string `json:"topic"`
		Version      int64  `json:"version"`
	}
	_ = json.Unmarshal(j.Payload, &p) // a foreign payload shows empty fields
	d := DeliveryInfo{
		ID: j.ID, SubscriberID: p.SubscriberID, EventID: p.EventID, Topic: p.Topic, Version: p.Version,
		MessageID: MessageID(p.EventID, p.SubscriberID, p.Version), State: j.State, Reason: j.Reason,
		Attempts: j.Attempt, Redelivery: strings.Contains(j.IdempotencyKey, redeliverSep),
		CreatedAt: j.CreatedAt, FinishedAt: j.FinishedAt,
	}
	if j.State == job.StateWaiting || j.State == job.StateRetryScheduled {
		d.NextAttemptAt = j.EligibleAt
	}
	for i := len(j.History) - 1; i >= 0; i-- {
		if h := j.History[i]; h.Outcome != job.ClassRedriven && h.Outcome != job.ClassCancelled {
			d.LastStatus, d.LastError = h.Status, h.Error
			break
		}
	}
	return d
}

// redeliverSep starts the idempotency-key suffix of a manual redelivery.
const redeliverSep = ":redeliver-"

// Redeliver sends a delivery again, by hand:
//
//   - a terminal delivery (a dead letter) is redriven: the same job
//     returns to waiting with fresh budgets;
//   - a published delivery gets a new job with the same payload, limit
//     key and webhook-id (it is the same message, so a receiver that
//     deduplicates on webhook-id may drop it; publish a new Version for a
//     new message) and idempotency key "<key>:redeliver-<ms>";
//   - a delivery still in progress gives store.ErrConflict.
//
// It returns the delivery that will run.
func (r *Registry) Redeliver(ctx context.Context, id string) (DeliveryInfo, error) {
	j, err := r.deliveryJob(ctx, id)
	if err != nil {
		return DeliveryInfo{}, err
	}
	switch j.State {
	case job.StateTerminal:
		j, err = r.cfg.Jobs.Redrive(ctx, id)
		if err != nil {
			return DeliveryInfo{}, err
		}
		r.notify()
		return deliveryOf(j), nil
	case job.StatePublished:
		return r.redeliverCopy(ctx, j)
	default:
		return DeliveryInfo{}, fmt.Errorf("delivery %s is %s, still in progress: %w", id, j.State, store.ErrConflict)
	}
}

func (r *Registry) redeliverCopy(ctx context.Context, orig *job.Job) (DeliveryInfo, error) {
	now := r.cfg.Now()
	base, _, _ := strings.Cut(orig.IdempotencyKey, redeliverSep)
	key := base + redeliverSep + strconv.FormatInt(now.UnixMilli(), 36)
	d := deliveryOf(orig)
	j, err := r.newJob(d.SubscriberID, orig.Tenant, orig.Lane, orig.Payload, key, now)
	if err != nil {
		return DeliveryInfo{}, err
	}
	res, err := r.cfg.Jobs.Insert(ctx, []*job.Job{j}, admission.Config{})
	if err != nil {
		return DeliveryInfo{}, err
	}
	r.notify()
	oid := eventObjectID(orig.Tenant, d.EventID, d.Version)
	if doc, err := r.event(ctx, oid); err == nil && !res[0].Existing {
		doc.Deliveries = append(doc.Deliveries, eventDelivery{SubscriberID: d.SubscriberID, JobID: res[0].Job.ID})
		if err := r.putEvent(ctx, oid, doc); err != nil {
			return DeliveryInfo{}, err
		}
	}
	return deliveryOf(res[0].Job), nil
}
