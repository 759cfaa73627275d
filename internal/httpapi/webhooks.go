package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/webhook"
)

// WebhookRegistry is one region's webhook subscribers and events, served
// by /v1/subscribers, /v1/events and /v1/deliveries. *webhook.Registry
// implements it.
type WebhookRegistry interface {
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

var subscriberVars = map[string]string{"id": "SUBSCRIBER_ID"}

// webhookRoutes are the subscriber, event and delivery endpoints, served
// when Config.Webhooks is set.
func (s *Server) webhookRoutes() []route {
	region := s.regions[0]
	return []route{
		{method: "PUT", path: "/v1/subscribers/{id}", name: "putSubscriber", role: auth.RoleAdmin,
			summary: "Create or replace a webhook subscriber and its limit key subscriber:<id>; a generated secret is shown once",
			handle:  s.handlePutSubscriber, request: subscriberRequest{}, response: putSubscriberResponse{}, status: 200,
			params: []param{regionOne}, vars: subscriberVars,
			example: `{"url":"https://hooks.example.com/ratelane","topics":["shipment.updated"],"rate":{"limit":20,"period":"1s","burst":5}}`},
		{method: "GET", path: "/v1/subscribers", name: "listSubscribers", role: auth.RoleAdmin, summary: "List webhook subscribers in id order",
			handle: s.handleListSubscribers, response: subscriberList{}, status: 200, params: []param{regionList, pageAfter, pageLimit}},
		{method: "GET", path: "/v1/subscribers/{id}", name: "getSubscriber", role: auth.RoleAdmin,
			summary: "Get a webhook subscriber: URL, topics, rate, health, disabled reason (never its secret)",
			handle:  s.handleGetSubscriber, response: subscriberView{}, status: 200, params: []param{regionOne}, vars: subscriberVars},
		{method: "POST", path: "/v1/subscribers/{id}/rotate-secret", name: "rotateSubscriberSecret", role: auth.RoleAdmin,
			summary: "Give a subscriber a new signing secret (shown once); the old one keeps signing alongside it for the window",
			handle:  s.handleRotateSubscriberSecret, response: rotateSecretResponse{}, status: 200,
			params: []param{regionOne, query("window", "how long the old secret keeps signing, e.g. 24h; default the server's rotation window")},
			vars:   subscriberVars},
		{method: "GET", path: "/v1/subscribers/{id}/deliveries", name: "listSubscriberDeliveries", role: auth.RoleAdmin,
			summary: "List a subscriber's deliveries, newest first: state, attempts, last status, next attempt",
			handle:  s.handleListSubscriberDeliveries, response: deliveryList{}, status: 200,
			params: []param{regionOne, pageAfter, pageLimit}, vars: subscriberVars},
		{method: "DELETE", path: "/v1/subscribers/{id}", name: "deleteSubscriber", role: auth.RoleAdmin,
			summary: "Delete a webhook subscriber; its queued deliveries end as subscriber_gone",
			handle:  s.handleDeleteSubscriber, status: 204, params: []param{regionOne}, vars: subscriberVars},

		{method: "POST", path: "/v1/events", name: "createEvent", role: auth.RoleProducer,
			summary: "Publish an event: one delivery per enabled subscriber of its topic in the region, in one write; the same id and version again creates nothing",
			handle:  s.handleCreateEvent, request: eventRequest{}, response: webhook.PublishResult{}, status: 202,
			example: `{"topic":"shipment.updated","id":"shp_1042","version":3,"region":"` + region + `","payload":{"status":"in_transit"}}`},
		{method: "GET", path: "/v1/events/{id}/deliveries", name: "listEventDeliveries", role: auth.RoleProducer,
			summary: "List the deliveries of every version of an event, in creation order",
			handle:  s.handleListEventDeliveries, response: deliveryList{}, status: 200,
			params: []param{regionOne, query("tenant", "admin keys only: the event's tenant; default the key's own"), pageAfter, pageLimit},
			vars:   map[string]string{"id": "EVENT_ID"}},
		{method: "POST", path: "/v1/deliveries/{id}/redeliver", name: "redeliverDelivery", role: auth.RoleProducer,
			summary: "Send a delivery again: a terminal one is redriven, a published one copied with the same webhook-id; 409 while in progress",
			handle:  s.handleRedeliverDelivery, response: webhook.DeliveryInfo{}, status: 200, params: []param{regionJob},
			vars: map[string]string{"id": "DELIVERY_ID"}},
		{method: "GET", path: "/v1/deliveries/{id}/response", name: "getDeliveryResponse", role: auth.RoleAdmin,
			summary: "Operators only: the bounded last failed answer of a delivery (status, diagnostic headers, first 4 KiB of the body); producers never see a subscriber's answer",
			handle:  s.handleGetDeliveryResponse, response: webhook.ResponseRecord{}, status: 200, params: []param{regionJob},
			vars: map[string]string{"id": "DELIVERY_ID"}},
	}
}

// subscriberRequest is the body of PUT /v1/subscribers/{id}.
type subscriberRequest struct {
	URL    string   `json:"url" required:"true" doc:"the receiver's http or https URL"`
	Topics []string `json:"topics" required:"true" doc:"event topics to receive (1 to 100); \"*\" receives every topic"`
	Tenant string   `json:"tenant,omitempty" doc:"the tenant whose events the subscriber receives; default the key's own tenant"`
	Rate   *rateDoc `json:"rate,omitempty" doc:"the subscriber's allowance; absent paces nothing"`
	// Concurrency caps deliveries in flight.
	Concurrency int               `json:"concurrency,omitempty" doc:"deliveries in flight at most; 0 means no cap"`
	Adaptive    bool              `json:"adaptive,omitempty" doc:"let 429s lower the pace and successes raise it again up to the rate"`
	Secret      string            `json:"secret,omitempty" doc:"whsec_ signing secret; absent on create generates one (shown once), absent on update keeps it"`
	Headers     map[string]string `json:"headers,omitempty" doc:"static headers sent with every delivery"`
	Enabled     *bool             `json:"enabled,omitempty" doc:"default true; true re-enables a disabled subscriber"`
}

// rateDoc is a subscriber's allowance on the wire.
type rateDoc struct {
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
				return spec, fieldError("rate.period", "period must be a duration such as 1s or 1m, got %q", req.Rate.Period)
			}
			rt.Period = webhook.Period(d)
		}
		spec.Rate = &rt
	}
	return spec, nil
}

// subscriberView is a subscriber as the API shows it: never its secret,
// and only the names of its static headers (they may hold credentials).
type subscriberView struct {
	ID                  string         `json:"id"`
	Tenant              string         `json:"tenant"`
	Region              string         `json:"region"`
	URL                 string         `json:"url"`
	Topics              []string       `json:"topics"`
	Rate                *rateDoc       `json:"rate,omitempty"`
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

func viewSubscriber(rec webhook.Record) subscriberView {
	v := subscriberView{ID: rec.ID, Tenant: rec.Tenant, Region: rec.Region, URL: rec.URL, Topics: rec.Topics,
		LimitKey: webhook.LimitKey(rec.ID), Concurrency: rec.Concurrency, Adaptive: rec.Adaptive, Enabled: rec.Enabled,
		DisabledReason: rec.DisabledReason, DisabledAt: rec.DisabledAt, SecretRotatingUntil: rec.SecretRotatingUntil,
		Health: rec.Health, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if rec.Rate != nil {
		v.Rate = &rateDoc{Shape: rec.Rate.Shape, Window: rec.Rate.Window, Limit: rec.Rate.Limit, Period: time.Duration(rec.Rate.Period).String(), Burst: rec.Rate.Burst}
	}
	for name := range rec.Headers {
		v.HeaderNames = append(v.HeaderNames, name)
	}
	return v
}

type putSubscriberResponse struct {
	Subscriber subscriberView `json:"subscriber"`
	Created    bool           `json:"created"`
	Secret     string         `json:"secret,omitempty" doc:"the generated signing secret, shown this once"`
}

type rotateSecretResponse struct {
	Subscriber subscriberView `json:"subscriber"`
	Secret     string         `json:"secret" doc:"the new signing secret, shown this once"`
}

type subscriberList struct {
	Subscribers []subscriberView `json:"subscribers"`
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

// registry returns a region's webhook registry.
func (s *Server) registry(region string) WebhookRegistry { return s.cfg.Webhooks[region] }

// subscriberID reads and bounds the {id} path value.
func subscriberID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !validID(id) {
		return "", notFound("subscriber " + id)
	}
	return id, nil
}

func (s *Server) handlePutSubscriber(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req subscriberRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	region, err := s.oneRegion(r, p)
	if err != nil {
		return err
	}
	spec, err := req.spec(r.PathValue("id"))
	if err != nil {
		return err
	}
	if spec.Tenant == "" {
		spec.Tenant = p.Tenant // one rule for every route: no tenant named is the key's own
	}
	rec, secret, created, err := s.registry(region).Put(context.WithoutCancel(r.Context()), spec)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, putSubscriberResponse{Subscriber: viewSubscriber(rec), Created: created, Secret: secret})
}

func (s *Server) handleGetSubscriber(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, id, err := s.subscriberTarget(r, p)
	if err != nil {
		return err
	}
	rec, err := s.registry(region).Get(r.Context(), id)
	if err != nil {
		return subscriberError(err, id)
	}
	return writeJSON(w, http.StatusOK, viewSubscriber(rec))
}

// subscriberTarget resolves the region and subscriber id of a request.
func (s *Server) subscriberTarget(r *http.Request, p auth.Principal) (string, string, error) {
	region, err := s.oneRegion(r, p)
	if err != nil {
		return "", "", err
	}
	id, err := subscriberID(r)
	return region, id, err
}

// subscriberError names the subscriber in a 404.
func subscriberError(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return notFound("subscriber " + id)
	}
	return err
}

func (s *Server) handleListSubscribers(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	regions, err := s.searchRegions(r, p)
	if err != nil {
		return err
	}
	after, limit, err := pageOf(r)
	if err != nil {
		return err
	}
	var all []webhook.Record
	for _, region := range regions {
		recs, err := s.registry(region).List(r.Context(), after, limit)
		if err != nil {
			return err
		}
		all = append(all, recs...)
	}
	return writeJSON(w, http.StatusOK, subscriberPage(all, limit))
}

// subscriberPage merges several regions' pages in (id, region) order. A
// page cut inside a run of one id (the same id in several regions) keeps
// the whole run, so the id cursor never skips a region's subscriber.
func subscriberPage(all []webhook.Record, limit int) subscriberList {
	slices.SortFunc(all, func(a, b webhook.Record) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Region, b.Region))
	})
	out := subscriberList{Subscribers: []subscriberView{}}
	for i, rec := range all {
		if i >= limit && rec.ID != all[i-1].ID {
			out.NextCursor = all[i-1].ID
			break
		}
		out.Subscribers = append(out.Subscribers, viewSubscriber(rec))
	}
	return out
}

// pageOf reads after and limit (see readLimit).
func pageOf(r *http.Request) (string, int, error) {
	q := r.URL.Query()
	after := q.Get("after")
	if len(after) > 200 {
		return "", 0, fieldError("after", "after is at most 200 bytes")
	}
	limit, err := readLimit(q)
	return after, limit, err
}

func (s *Server) handleDeleteSubscriber(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, id, err := s.subscriberTarget(r, p)
	if err != nil {
		return err
	}
	if err := s.registry(region).Delete(context.WithoutCancel(r.Context()), id); err != nil {
		return subscriberError(err, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handleRotateSubscriberSecret(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, id, err := s.subscriberTarget(r, p)
	if err != nil {
		return err
	}
	var window time.Duration
	if v := r.URL.Query().Get("window"); v != "" {
		if window, err = time.ParseDuration(v); err != nil || window < time.Minute || window > 30*24*time.Hour {
			return fieldError("window", "window must be a duration from 1m to 720h such as 24h, got %q", v)
		}
	}
	rec, secret, err := s.registry(region).RotateSecret(context.WithoutCancel(r.Context()), id, window)
	if err != nil {
		return subscriberError(err, id)
	}
	return writeJSON(w, http.StatusOK, rotateSecretResponse{Subscriber: viewSubscriber(rec), Secret: secret})
}

func (s *Server) handleListSubscriberDeliveries(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, id, err := s.subscriberTarget(r, p)
	if err != nil {
		return err
	}
	after, limit, err := pageOf(r)
	if err != nil {
		return err
	}
	ds, err := s.registry(region).SubscriberDeliveries(r.Context(), id, after, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, deliveryPage(ds, limit))
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

func (s *Server) handleCreateEvent(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req eventRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := s.checkRegion(p, req.Region, "region"); err != nil {
		return err
	}
	tenant, err := eventTenant(p, req.Tenant)
	if err != nil {
		return err
	}
	payload, err := compactJSON(req.Payload)
	if err != nil {
		return fieldError("payload", "payload is not valid JSON")
	}
	res, err := s.registry(req.Region).Publish(context.WithoutCancel(r.Context()), webhook.Event{
		Topic: req.Topic, ID: req.ID, Version: req.Version, Tenant: tenant, Payload: payload, Lane: req.Lane,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, res)
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
		return "", problemf(http.StatusForbidden, "forbidden", "this API key publishes as tenant %q only; drop the tenant field", p.Tenant)
	}
	return p.Tenant, nil
}

func (s *Server) handleListEventDeliveries(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, err := s.oneRegion(r, p)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if !validID(id) {
		return notFound("event " + id)
	}
	tenant, err := eventTenant(p, r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	after, limit, err := pageOf(r)
	if err != nil {
		return err
	}
	ds, err := s.registry(region).EventDeliveries(r.Context(), tenant, id, after, limit)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("event " + id)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, deliveryPage(ds, limit))
}

func (s *Server) handleRedeliverDelivery(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	j, _, err := s.findJob(r.Context(), r, p, ownTenant)
	if err != nil {
		return err
	}
	if j.Kind != webhook.Kind {
		return notFound("delivery " + j.ID)
	}
	d, err := s.registry(j.Region).Redeliver(context.WithoutCancel(r.Context()), j.ID)
	if errors.Is(err, store.ErrConflict) {
		return problemf(http.StatusConflict, "conflict", "delivery %s is %s; only a published or terminal delivery can be sent again", j.ID, j.State)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, d)
}

// handleGetDeliveryResponse shows an operator the bounded last failed
// answer of a delivery. The route is admin-only: a subscriber's answer is
// the subscriber's, and a producer could otherwise read whatever its URL
// reflects back.
func (s *Server) handleGetDeliveryResponse(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	j, _, err := s.findJob(r.Context(), r, p, ownTenant)
	if err != nil {
		return err
	}
	if j.Kind != webhook.Kind {
		return notFound("delivery " + j.ID)
	}
	rr, err := s.registry(j.Region).LastFailedResponse(r.Context(), j.ID)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("a failed answer of delivery " + j.ID)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, rr)
}
