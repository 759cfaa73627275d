// Package hookapi is the webhooks plug-in's HTTP routes: /v1/subscribers,
// /v1/events and /v1/deliveries, mounted into the API server through its
// mount point (internal/httpapi/mount) exactly as the review routes are.
// It sits below the public plug-in package (webhooks), which hands it one
// registry per region, and imports neither the server nor the root
// package.
package hookapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/webhook"
)

// Registry is one region's webhook subscribers and events, served by
// /v1/subscribers, /v1/events and /v1/deliveries. *webhook.Registry
// implements it.
type Registry interface {
	Put(ctx context.Context, spec webhook.SubscriberSpec) (webhook.Record, string, bool, error)
	Get(ctx context.Context, id string) (webhook.Record, error)
	List(ctx context.Context, after string, limit int) ([]webhook.Record, error)
	Delete(ctx context.Context, id string) error
	RotateSecret(ctx context.Context, id string, window time.Duration) (webhook.Record, string, error)
	Publish(ctx context.Context, ev webhook.Event) (webhook.PublishResult, error)
	EventDeliveries(ctx context.Context, tenant, eventID, after string, limit int) ([]webhook.DeliveryInfo, error)
	SubscriberDeliveries(ctx context.Context, subscriberID, after string, limit int) ([]webhook.DeliveryInfo, error)
	Redeliver(ctx context.Context, id string) (webhook.DeliveryInfo, error)
	LastFailedResponse(ctx context.Context, jobID string) (webhook.ResponseRecord, error)
}

// maxBody bounds a subscriber or event body: a full payload plus room for
// the envelope, as the core's job routes allow.
const maxBody = job.MaxPayloadBytes + 64<<10

// varDocs says where the routes' shell variables come from.
var varDocs = map[string]string{
	"SUBSCRIBER_ID": "a webhook subscriber id of your choice for PUT /v1/subscribers/{id}, else one from GET /v1/subscribers",
	"EVENT_ID":      "an event id, as posted to POST /v1/events",
	"DELIVERY_ID":   "a delivery id, from POST /v1/events or a deliveries list",
}

// Routes returns the routes over regs, which must hold a registry for
// every region of the server it is mounted into. Mounting them also makes
// the server show a delivery job's result as status and timing alone
// (webhook.PublicResult).
func Routes(regs map[string]Registry) mount.Mount {
	return func(h mount.Host) []mount.Route {
		h.ShowResult(webhook.Kind, webhook.PublicResult)
		s := &server{h: h, regs: regs}
		rts := s.routes()
		for i := range rts {
			rts[i].VarDocs = varDocs
		}
		return rts
	}
}

// server serves the routes for one API server.
type server struct {
	h    mount.Host
	regs map[string]Registry
}

var subscriberVars = map[string]string{"id": "SUBSCRIBER_ID"}

// routes are the subscriber, event and delivery endpoints.
func (s *server) routes() []mount.Route {
	region := s.h.Regions()[0]
	return []mount.Route{
		{Method: "PUT", Path: "/v1/subscribers/{id}", Name: "putSubscriber", Resource: "subscriber", Role: auth.RoleAdmin,
			Summary: "Create or replace a webhook subscriber and its limit key subscriber:<id>; a generated secret is shown once; 409 when another request changed it meanwhile (nothing saved)",
			Handle:  s.handlePutSubscriber, Request: subscriberRequest{}, Response: putSubscriberResponse{}, Status: 200,
			Params: []mount.Param{mount.RegionOne}, Vars: subscriberVars,
			Example: `{"url":"https://hooks.example.com/ratelane","topics":["shipment.updated"],"rate":{"limit":20,"period":"1s","burst":5}}`},
		{Method: "GET", Path: "/v1/subscribers", Name: "listSubscribers", Role: auth.RoleAdmin, Summary: "List webhook subscribers in id order",
			Handle: s.handleListSubscribers, Response: subscriberList{}, Status: 200, Params: []mount.Param{mount.RegionEvery, mount.PageAfter, mount.PageLimit}},
		{Method: "GET", Path: "/v1/subscribers/{id}", Name: "getSubscriber", Resource: "subscriber", Role: auth.RoleAdmin,
			Summary: "Get a webhook subscriber: URL, topics, rate, health, disabled reason (never its secret)",
			Handle:  s.handleGetSubscriber, Response: SubscriberView{}, Status: 200, Params: []mount.Param{mount.RegionOne}, Vars: subscriberVars},
		{Method: "POST", Path: "/v1/subscribers/{id}/rotate-secret", Name: "rotateSubscriberSecret", Resource: "subscriber", Role: auth.RoleAdmin,
			Summary: "Give a subscriber a new signing secret (shown once); the old one keeps signing alongside it for the window",
			Handle:  s.handleRotateSubscriberSecret, Response: rotateSecretResponse{}, Status: 200,
			Params: []mount.Param{mount.RegionOne, mount.Query("window", "how long the old secret keeps signing, e.g. 24h; default the server's rotation window")},
			Vars:   subscriberVars},
		{Method: "GET", Path: "/v1/subscribers/{id}/deliveries", Name: "listSubscriberDeliveries", Resource: "subscriber", Role: auth.RoleAdmin,
			Summary: "List a subscriber's deliveries, newest first: state, attempts, last status, next attempt",
			Handle:  s.handleListSubscriberDeliveries, Response: deliveryList{}, Status: 200,
			Params: []mount.Param{mount.RegionOne, mount.PageAfter, mount.PageLimit}, Vars: subscriberVars},
		{Method: "DELETE", Path: "/v1/subscribers/{id}", Name: "deleteSubscriber", Resource: "subscriber", Role: auth.RoleAdmin,
			Summary: "Delete a webhook subscriber; its queued deliveries end as subscriber_gone",
			Handle:  s.handleDeleteSubscriber, Status: 204, Params: []mount.Param{mount.RegionOne}, Vars: subscriberVars},

		{Method: "POST", Path: "/v1/events", Name: "createEvent", Resource: "event", Role: auth.RoleProducer,
			Summary: "Publish an event: one delivery per enabled subscriber of its topic in the region, in one write; the same id and version again creates nothing",
			Handle:  s.handleCreateEvent, Request: eventRequest{}, Response: webhook.PublishResult{}, Status: 202,
			Example: `{"topic":"shipment.updated","id":"shp_1042","version":3,"region":"` + region + `","payload":{"status":"in_transit"}}`},
		{Method: "GET", Path: "/v1/events/{id}/deliveries", Name: "listEventDeliveries", Resource: "event", Role: auth.RoleProducer,
			Summary: "List the deliveries of every version of an event, in creation order",
			Handle:  s.handleListEventDeliveries, Response: deliveryList{}, Status: 200,
			Params: []mount.Param{mount.RegionOne, mount.Query("tenant", "admin keys only: the event's tenant; default the key's own"), mount.PageAfter, mount.PageLimit},
			Vars:   map[string]string{"id": "EVENT_ID"}},
		{Method: "POST", Path: "/v1/deliveries/{id}/redeliver", Name: "redeliverDelivery", Resource: "delivery", Role: auth.RoleProducer,
			Summary: "Send a delivery again: a terminal one is redriven, a published one copied with the same webhook-id; 409 while in progress",
			Handle:  s.handleRedeliverDelivery, Response: webhook.DeliveryInfo{}, Status: 200, Params: []mount.Param{mount.RegionJob},
			Vars: map[string]string{"id": "DELIVERY_ID"}},
		{Method: "GET", Path: "/v1/deliveries/{id}/response", Name: "getDeliveryResponse", Resource: "delivery", Role: auth.RoleAdmin,
			Summary: "Operators only: the bounded last failed answer of a delivery (status, diagnostic headers, first 4 KiB of the body); producers never see a subscriber's answer",
			Handle:  s.handleGetDeliveryResponse, Response: webhook.ResponseRecord{}, Status: 200, Params: []mount.Param{mount.RegionJob},
			Vars: map[string]string{"id": "DELIVERY_ID"}},
	}
}

// subscriberRequest is the body of PUT /v1/subscribers/{id}.
type subscriberRequest struct {
	URL    string   `json:"url" required:"true" doc:"the receiver's http or https URL"`
	Topics []string `json:"topics" required:"true" doc:"event topics to receive (1 to 100); \"*\" receives every topic"`
	Tenant string   `json:"tenant,omitempty" doc:"the tenant whose events the subscriber receives; default the key's own tenant"`
	Rate   *RateDoc `json:"rate,omitempty" doc:"the subscriber's allowance; absent paces nothing"`
	// Concurrency caps deliveries in flight.
	Concurrency int               `json:"concurrency,omitempty" doc:"deliveries in flight at most; 0 means no cap"`
	Adaptive    bool              `json:"adaptive,omitempty" doc:"let 429s lower the pace and successes raise it again up to the rate"`
	Secret      string            `json:"secret,omitempty" doc:"whsec_ signing secret; absent on create generates one (shown once), absent on update keeps it"`
	Headers     map[string]string `json:"headers,omitempty" doc:"static headers sent with every delivery"`
	Enabled     *bool             `json:"enabled,omitempty" doc:"default true; true re-enables a disabled subscriber"`
}

// RateDoc is a subscriber's allowance on the wire, in requests and in
// SubscriberView; the CLI decodes it as the server encodes it.
type RateDoc struct {
	Shape  string `json:"shape,omitempty" enum:"window,bucket" doc:"window (default): at most limit deliveries start in any period, sliding, the strictest reading; bucket: a token bucket of limit per period with burst, which can exceed limit in a sliding period by half the burst"`
	Window string `json:"window,omitempty" enum:"sliding,fixed" doc:"window shape: sliding (default; any period) or fixed (each period aligned to the clock, e.g. a per-minute quota reset at :00; the whole limit may start as a window opens, burst defaults to limit)"`
	Limit  int    `json:"limit" required:"true" doc:"deliveries per period"`
	Period string `json:"period,omitempty" doc:"a duration such as 1s or 1m; default 1s"`
	Burst  int    `json:"burst,omitempty" doc:"deliveries that may start at once; default one second's worth, at most limit"`
}

// spec turns the request into the registry's spec, with period parsed.
func (req subscriberRequest) spec(id string) (webhook.SubscriberSpec, error) {
	spec := webhook.SubscriberSpec{ID: id, Tenant: req.Tenant, URL: req.URL, Topics: req.Topics, Concurrency: req.Concurrency,
		Adaptive: req.Adaptive, Secret: req.Secret, Headers: req.Headers, Enabled: req.Enabled}
	if req.Rate != nil {
		rt := webhook.Rate{Shape: req.Rate.Shape, Window: req.Rate.Window, Limit: req.Rate.Limit, Burst: req.Rate.Burst}
		if req.Rate.Period != "" {
			d, err := time.ParseDuration(req.Rate.Period)
			if err != nil {
				return spec, mount.FieldError("rate.period", "period must be a duration such as 1s or 1m, got %q", req.Rate.Period)
			}
			rt.Period = webhook.Period(d)
		}
		spec.Rate = &rt
	}
	return spec, nil
}

// SubscriberView is a subscriber as the API shows it: never its secret,
// and only the names of its static headers (they may hold credentials).
// It is exported so that the CLI decodes the one definition the server
// encodes rather than a copy that drifts.
type SubscriberView struct {
	ID                  string         `json:"id"`
	Tenant              string         `json:"tenant"`
	Region              string         `json:"region"`
	URL                 string         `json:"url"`
	Topics              []string       `json:"topics"`
	Rate                *RateDoc       `json:"rate,omitempty"`
	LimitKey            string         `json:"limit_key" doc:"the limit key pacing the subscriber's deliveries"`
	Concurrency         int            `json:"concurrency"`
	Adaptive            bool           `json:"adaptive"`
	HeaderNames         []string       `json:"header_names,omitempty" doc:"names of the static headers; values are not shown"`
	Enabled             bool           `json:"enabled"`
	DisabledReason      string         `json:"disabled_reason,omitempty"`
	DisabledAt          time.Time      `json:"disabled_at,omitzero"`
	SecretRotatingUntil time.Time      `json:"secret_rotating_until,omitzero" doc:"when the rotated-out secret stops signing"`
	Health              webhook.Health `json:"health"`
	CreatedAt           time.Time      `json:"created_at"`
	UpdatedAt           time.Time      `json:"updated_at"`
}

func viewSubscriber(rec webhook.Record) SubscriberView {
	v := SubscriberView{ID: rec.ID, Tenant: rec.Tenant, Region: rec.Region, URL: rec.URL, Topics: rec.Topics,
		LimitKey: webhook.LimitKey(rec.ID), Concurrency: rec.Concurrency, Adaptive: rec.Adaptive, Enabled: rec.Enabled,
		DisabledReason: rec.DisabledReason, DisabledAt: rec.DisabledAt, SecretRotatingUntil: rec.SecretRotatingUntil,
		Health: rec.Health, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if rec.Rate != nil {
		v.Rate = &RateDoc{Shape: rec.Rate.Shape, Window: rec.Rate.Window, Limit: rec.Rate.Limit, Period: time.Duration(rec.Rate.Period).String(), Burst: rec.Rate.Burst}
	}
	for name := range rec.Headers {
		v.HeaderNames = append(v.HeaderNames, name)
	}
	return v
}

type putSubscriberResponse struct {
	Subscriber SubscriberView `json:"subscriber"`
	Created    bool           `json:"created"`
	Secret     string         `json:"secret,omitempty" doc:"the generated signing secret, shown this once"`
}

type rotateSecretResponse struct {
	Subscriber SubscriberView `json:"subscriber"`
	Secret     string         `json:"secret" doc:"the new signing secret, shown this once"`
}

type subscriberList struct {
	Subscribers []SubscriberView `json:"subscribers"`
	NextCursor  string           `json:"next_cursor,omitempty" doc:"pass as after= for the next page; absent on the last page"`
}

type deliveryList struct {
	Deliveries []webhook.DeliveryInfo `json:"deliveries"`
	NextCursor string                 `json:"next_cursor,omitempty" doc:"pass as after= for the next page; absent on the last page"`
}

// eventRequest is the body of POST /v1/events.
type eventRequest struct {
	Topic   string          `json:"topic" required:"true" doc:"selects the subscribers, e.g. shipment.updated"`
	ID      string          `json:"id" required:"true" doc:"the event's id, e.g. a shipment id: 1 to 64 characters without / or spaces"`
	Version int64           `json:"version,omitempty" doc:"each id and version is delivered once per subscriber; default 0"`
	Region  string          `json:"region" required:"true" doc:"the region whose subscribers receive the event"`
	Tenant  string          `json:"tenant,omitempty" doc:"admin keys only: the publishing tenant; producers publish as their own"`
	Lane    job.Lane        `json:"lane,omitempty" doc:"the deliveries' lane; default batch"`
	Payload json.RawMessage `json:"payload" required:"true" doc:"the JSON body sent to subscribers"`
}

// registry returns a region's webhook registry, or a 501 for a region
// the plug-in was not bound to.
func (s *server) registry(region string) (Registry, error) {
	reg, ok := s.regs[region]
	if !ok {
		return nil, mount.Problemf(http.StatusNotImplemented, "not-configured",
			"webhooks are not configured in region %s: enable the webhooks plug-in (webhooks.New) for this client", region)
	}
	return reg, nil
}

// subscriberID reads and bounds the {id} path value.
func subscriberID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !mount.ValidID(id) {
		return "", mount.NotFound("subscriber " + id)
	}
	return id, nil
}

func (s *server) handlePutSubscriber(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req subscriberRequest
	if err := s.h.Decode(w, r, &req, maxBody, fmt.Sprintf("a payload is at most %d bytes", job.MaxPayloadBytes)); err != nil {
		return err
	}
	region, err := s.h.OneRegion(r, p)
	if err != nil {
		return err
	}
	spec, err := req.spec(r.PathValue("id"))
	if err != nil {
		return err
	}
	spec.Tenant = cmp.Or(spec.Tenant, p.Tenant) // one rule for every route: no tenant named is the key's own
	reg, err := s.registry(region)
	if err != nil {
		return err
	}
	rec, secret, created, err := reg.Put(context.WithoutCancel(r.Context()), spec)
	if err != nil {
		return putSubscriberError(err, spec.ID)
	}
	return mount.WriteJSON(w, http.StatusOK, putSubscriberResponse{Subscriber: viewSubscriber(rec), Created: created, Secret: secret})
}

func (s *server) handleGetSubscriber(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	reg, id, err := s.subscriberRegistry(r, p)
	if err != nil {
		return err
	}
	rec, err := reg.Get(r.Context(), id)
	if err != nil {
		return subscriberError(err, id)
	}
	return mount.WriteJSON(w, http.StatusOK, viewSubscriber(rec))
}

// subscriberTarget resolves the region and subscriber id of a request.
func (s *server) subscriberTarget(r *http.Request, p auth.Principal) (string, string, error) {
	region, err := s.h.OneRegion(r, p)
	if err != nil {
		return "", "", err
	}
	id, err := subscriberID(r)
	return region, id, err
}

// subscriberRegistry is subscriberTarget followed by the registry of the
// target's region: the subscriber routes that need nothing else checked
// first start with it.
func (s *server) subscriberRegistry(r *http.Request, p auth.Principal) (Registry, string, error) {
	region, id, err := s.subscriberTarget(r, p)
	if err != nil {
		return nil, "", err
	}
	reg, err := s.registry(region)
	return reg, id, err
}

// subscriberError names the subscriber in a 404.
// putSubscriberError names a PUT's lost save. Registry.Put answers
// store.ErrConflict only when another request changed the subscriber
// between this one's read and its save, and keeps nothing of this one;
// the API's generic conflict speaks of a job's state, which misleads here.
func putSubscriberError(err error, id string) error {
	if errors.Is(err, store.ErrConflict) {
		return mount.Problemf(http.StatusConflict, "conflict",
			"subscriber %s was changed by another request while this PUT saved it; nothing of this PUT was saved: GET the subscriber and PUT again", id)
	}
	return err
}

func subscriberError(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return mount.NotFound("subscriber " + id)
	}
	return err
}

func (s *server) handleListSubscribers(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	regions, err := s.h.SearchRegions(r, p)
	if err != nil {
		return err
	}
	after, limit, err := s.h.Page(r)
	if err != nil {
		return err
	}
	var all []webhook.Record
	for _, region := range regions {
		reg, err := s.registry(region)
		if err != nil {
			return err
		}
		recs, err := reg.List(r.Context(), after, limit)
		if err != nil {
			return err
		}
		all = append(all, recs...)
	}
	return mount.WriteJSON(w, http.StatusOK, subscriberPage(all, limit))
}

// subscriberPage merges several regions' pages in (id, region) order. A
// page cut inside a run of one id (the same id in several regions) keeps
// the whole run, so the id cursor never skips a region's subscriber.
func subscriberPage(all []webhook.Record, limit int) subscriberList {
	slices.SortFunc(all, func(a, b webhook.Record) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Region, b.Region))
	})
	out := subscriberList{Subscribers: []SubscriberView{}}
	for i, rec := range all {
		if i >= limit && rec.ID != all[i-1].ID {
			out.NextCursor = all[i-1].ID
			break
		}
		out.Subscribers = append(out.Subscribers, viewSubscriber(rec))
	}
	return out
}

func (s *server) handleDeleteSubscriber(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	reg, id, err := s.subscriberRegistry(r, p)
	if err != nil {
		return err
	}
	if err := reg.Delete(context.WithoutCancel(r.Context()), id); err != nil {
		return subscriberError(err, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) handleRotateSubscriberSecret(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, id, err := s.subscriberTarget(r, p)
	if err != nil {
		return err
	}
	var window time.Duration
	if v := r.URL.Query().Get("window"); v != "" {
		if window, err = time.ParseDuration(v); err != nil || window < time.Minute || window > 30*24*time.Hour {
			return mount.FieldError("window", "window must be a duration from 1m to 720h such as 24h, got %q", v)
		}
	}
	reg, err := s.registry(region)
	if err != nil {
		return err
	}
	rec, secret, err := reg.RotateSecret(context.WithoutCancel(r.Context()), id, window)
	if err != nil {
		return subscriberError(err, id)
	}
	return mount.WriteJSON(w, http.StatusOK, rotateSecretResponse{Subscriber: viewSubscriber(rec), Secret: secret})
}

func (s *server) handleListSubscriberDeliveries(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, id, err := s.subscriberTarget(r, p)
	if err != nil {
		return err
	}
	reg, after, limit, err := s.pagedRegistry(r, region)
	if err != nil {
		return err
	}
	ds, err := reg.SubscriberDeliveries(r.Context(), id, after, limit)
	if err != nil {
		return err
	}
	return mount.WriteJSON(w, http.StatusOK, deliveryPage(ds, limit))
}

// pagedRegistry is the start of a delivery listing: the page the request
// asks for and the registry of region that serves it.
func (s *server) pagedRegistry(r *http.Request, region string) (reg Registry, after string, limit int, err error) {
	if after, limit, err = s.h.Page(r); err != nil {
		return nil, "", 0, err
	}
	reg, err = s.registry(region)
	return reg, after, limit, err
}

func deliveryPage(ds []webhook.DeliveryInfo, limit int) deliveryList {
	out := deliveryList{Deliveries: ds}
	if out.Deliveries == nil {
		out.Deliveries = []webhook.DeliveryInfo{}
	}
	if len(ds) == limit {
		out.NextCursor = ds[len(ds)-1].ID
	}
	return out
}

func (s *server) handleCreateEvent(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req eventRequest
	if err := s.h.Decode(w, r, &req, maxBody, fmt.Sprintf("a payload is at most %d bytes", job.MaxPayloadBytes)); err != nil {
		return err
	}
	if err := s.h.CheckRegion(p, req.Region, "region"); err != nil {
		return err
	}
	tenant, err := eventTenant(p, req.Tenant)
	if err != nil {
		return err
	}
	payload, err := mount.CompactJSON(req.Payload)
	if err != nil {
		return mount.FieldError("payload", "payload is not valid JSON")
	}
	reg, err := s.registry(req.Region)
	if err != nil {
		return err
	}
	res, err := reg.Publish(context.WithoutCancel(r.Context()), webhook.Event{
		Topic: req.Topic, ID: req.ID, Version: req.Version, Tenant: tenant, Payload: payload, Lane: req.Lane,
	})
	if err != nil {
		return err
	}
	return mount.WriteJSON(w, http.StatusAccepted, res)
}

// eventTenant is the tenant an event request acts for: the one named,
// which only admin keys may name, else the key's own, as for jobs and
// reviews (so the bootstrap admin key's events reach the subscribers it
// made and the jobs it enqueued share their tenant).
func eventTenant(p auth.Principal, named string) (string, error) {
	if p.Role == auth.RoleAdmin {
		if named == "" {
			return p.Tenant, nil
		}
		return named, nil
	}
	if named != "" && named != p.Tenant {
		return "", mount.Problemf(http.StatusForbidden, "forbidden", "this API key publishes as tenant %q only; drop the tenant field", p.Tenant)
	}
	return p.Tenant, nil
}

func (s *server) handleListEventDeliveries(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, err := s.h.OneRegion(r, p)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if !mount.ValidID(id) {
		return mount.NotFound("event " + id)
	}
	tenant, err := eventTenant(p, r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	reg, after, limit, err := s.pagedRegistry(r, region)
	if err != nil {
		return err
	}
	ds, err := reg.EventDeliveries(r.Context(), tenant, id, after, limit)
	if errors.Is(err, store.ErrNotFound) {
		return mount.NotFound("event " + id)
	}
	if err != nil {
		return err
	}
	return mount.WriteJSON(w, http.StatusOK, deliveryPage(ds, limit))
}

// delivery resolves the {id} of a delivery route: the delivery job (as
// the core finds a job, so another tenant's reads as missing) and its
// region's registry. A job of another kind is no delivery: 404.
func (s *server) delivery(r *http.Request, p auth.Principal) (*job.Job, Registry, error) {
	j, err := s.h.FindJob(r, p)
	if err != nil {
		return nil, nil, err
	}
	if j.Kind != webhook.Kind {
		return nil, nil, mount.NotFound("delivery " + j.ID)
	}
	reg, err := s.registry(j.Region)
	return j, reg, err
}

func (s *server) handleRedeliverDelivery(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	j, reg, err := s.delivery(r, p)
	if err != nil {
		return err
	}
	d, err := reg.Redeliver(context.WithoutCancel(r.Context()), j.ID)
	if errors.Is(err, store.ErrConflict) {
		return mount.Problemf(http.StatusConflict, "conflict", "delivery %s is %s; only a published or terminal delivery can be sent again", j.ID, j.State)
	}
	if err != nil {
		return err
	}
	return mount.WriteJSON(w, http.StatusOK, d)
}

// handleGetDeliveryResponse shows an operator the bounded last failed
// answer of a delivery. The route is admin-only: a subscriber's answer is
// the subscriber's, and a producer could otherwise read whatever its URL
// reflects back.
func (s *server) handleGetDeliveryResponse(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	j, reg, err := s.delivery(r, p)
	if err != nil {
		return err
	}
	rr, err := reg.LastFailedResponse(r.Context(), j.ID)
	if errors.Is(err, store.ErrNotFound) {
		return mount.NotFound("a failed answer of delivery " + j.ID)
	}
	if err != nil {
		return err
	}
	return mount.WriteJSON(w, http.StatusOK, rr)
}
