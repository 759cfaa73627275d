package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/webhook"
	"github.com/ratelane/ratelane/internal/webhook/hookapi"
)

// withWebhooks mounts the webhooks plug-in's routes (hookapi) over each
// region's store, as the plug-in does in a client.
func withWebhooks(t *testing.T) func(*Config) { return withWebhooksVia(t, nil) }

// withWebhooksVia is withWebhooks with each region's registry passed
// through wrap (nil for none) before it is mounted.
func withWebhooksVia(t *testing.T, wrap func(hookapi.Registry) hookapi.Registry) func(*Config) {
	return func(c *Config) {
		regs := map[string]hookapi.Registry{}
		if c.Jobs == nil {
			c.Jobs = map[string]*engine.Jobs{}
		}
		for name, st := range c.Regions {
			// The region's one writer, shared with the server (newEnv
			// keeps a writer a tweak set), as a client shares its engine's.
			w := c.Jobs[name]
			if w == nil {
				var err error
				if w, err = engine.NewJobs(engine.JobsConfig{Store: st, InteractiveBudget: c.InteractiveBudget, Now: c.Now, Logger: c.Logger}); err != nil {
					t.Fatal(err)
				}
				c.Jobs[name] = w
			}
			reg, err := webhook.NewRegistry(webhook.RegistryConfig{Store: st, Jobs: w, Now: c.Now, CacheFor: -1})
			if err != nil {
				t.Fatal(err)
			}
			regs[name] = reg
			if wrap != nil {
				regs[name] = wrap(reg)
			}
		}
		c.Mounts = append(c.Mounts, hookapi.Routes(regs))
	}
}

// putSubscriberResponse and deliveryList are the parts of the routes'
// answers the tests read.
type putSubscriberResponse struct {
	Subscriber struct {
		Tenant   string `json:"tenant"`
		LimitKey string `json:"limit_key"`
		Rate     *struct {
			Window string `json:"window"`
			Burst  int    `json:"burst"`
		} `json:"rate"`
	} `json:"subscriber"`
	Created bool   `json:"created"`
	Secret  string `json:"secret"`
}

type deliveryList struct {
	Deliveries []webhook.DeliveryInfo `json:"deliveries"`
}

func newWebhookEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, withWebhooks(t))
}

const hookURL = "https://hooks.example.com/ratelane"

func (e *env) putSubscriber(id string, body map[string]any) putSubscriberResponse {
	e.t.Helper()
	return e.putSubscriberIn("us", id, body)
}

func (e *env) putSubscriberIn(region, id string, body map[string]any) putSubscriberResponse {
	e.t.Helper()
	var out putSubscriberResponse
	e.do("PUT", "/v1/subscribers/"+id+"?region="+region, adminKey, body).want(e.t, 200).json(e.t, &out)
	return out
}

func (e *env) publish(key string, body map[string]any) webhook.PublishResult {
	e.t.Helper()
	var out webhook.PublishResult
	e.do("POST", "/v1/events", key, body).want(e.t, 202).json(e.t, &out)
	return out
}

// webhookExampleVars prepares what one webhook capability's example needs.
func (e *env) webhookExampleVars(c capability) map[string]string {
	e.t.Helper()
	key := map[string]string{"producer": acmeKey, "admin": adminKey}[c.Role]
	vars := map[string]string{"RATELANE_URL": e.hs.URL, "RATELANE_API_KEY": key, "SUBSCRIBER_ID": "store_17"}
	region := e.srv.regions[0] // the region of the examples
	acmeSub := map[string]any{"url": hookURL, "topics": []string{"t"}, "tenant": "acme"}
	switch c.Name {
	case "putSubscriber":
	case "listEventDeliveries":
		vars["EVENT_ID"] = "shp_1"
		e.putSubscriberIn(region, "acme_sub", acmeSub)
		e.publish(acmeKey, map[string]any{"topic": "t", "id": "shp_1", "region": region, "payload": map[string]int{"n": 1}})
	case "redeliverDelivery":
		e.putSubscriberIn(region, "acme_sub", acmeSub)
		res := e.publish(acmeKey, map[string]any{"topic": "t", "id": "shp_2", "region": region, "payload": map[string]int{"n": 2}})
		id := res.Deliveries[0].ID
		if _, err := e.stores[region].Cancel(context.Background(), id, e.clock.Now()); err != nil {
			e.t.Fatal(err)
		}
		vars["DELIVERY_ID"] = id
	case "getDeliveryResponse":
		e.putSubscriberIn(region, "acme_sub", acmeSub)
		res := e.publish(acmeKey, map[string]any{"topic": "t", "id": "shp_3", "region": region, "payload": map[string]int{"n": 3}})
		id := res.Deliveries[0].ID
		rr, _ := json.Marshal(webhook.ResponseRecord{JobID: id, Attempt: 1, At: e.clock.Now(), Status: 503, Error: "server error", Body: "down"})
		if err := e.stores[region].PutObject(context.Background(), store.Object{Kind: webhook.ObjectResponse, ID: id, Body: rr, UpdatedAt: e.clock.Now()}); err != nil {
			e.t.Fatal(err)
		}
		vars["DELIVERY_ID"] = id
	default:
		e.putSubscriberIn(region, "store_17", map[string]any{"url": hookURL, "topics": []string{"shipment.updated"}})
	}
	return vars
}

// TestWebhookRoutesDocumented checks the webhook endpoints as the shared
// docs tests check the others: the OpenAPI document is valid and lists
// exactly the served routes, and every example runs and matches it.
func TestWebhookRoutesDocumented(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t)
	v := e.documentedRoutes(t)
	for _, c := range e.capabilities() {
		if !strings.Contains(c.Path, "subscribers") && !strings.Contains(c.Path, "events") && !strings.Contains(c.Path, "deliveries/") {
			continue
		}
		req := parseCurlT(t, c.Example, e.webhookExampleVars(c))
		e.sendValidated(t, v, c.Name, req)
	}
}

// TestSubscribersAndEvents walks the endpoints: a generated secret shown
// once, never again; roles; tenancy; idempotent events; 404s and 409s.
func TestSubscribersAndEvents(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t)
	put := e.putSubscriber("s1", map[string]any{"url": hookURL, "topics": []string{"order.paid"}, "tenant": "acme",
		"rate": map[string]any{"limit": 20, "burst": 5}, "headers": map[string]string{"Authorization": "Bearer t"}})
	if !put.Created || !strings.HasPrefix(put.Secret, "whsec_") || put.Subscriber.LimitKey != "subscriber:s1" {
		t.Fatalf("put = %+v", put)
	}
	got := e.do("GET", "/v1/subscribers/s1?region=us", adminKey, nil).want(t, 200)
	if bytes.Contains(got.body, []byte("whsec_")) || bytes.Contains(got.body, []byte("Bearer t")) {
		t.Fatalf("GET shows a secret or header value: %s", got.body)
	}
	again := e.putSubscriber("s1", map[string]any{"url": hookURL, "topics": []string{"order.paid"}, "tenant": "acme"})
	if again.Created || again.Secret != "" {
		t.Fatalf("update = %+v, want no new secret", again)
	}
	var lim limitView
	e.do("GET", "/v1/limits/subscriber:s1?region=us", adminKey, nil).want(t, 200).json(t, &lim)
	// A fixed-window subscriber: the rate shows it, its key is a fixed window.
	fixed := e.putSubscriber("f1", map[string]any{"url": hookURL, "topics": []string{"inventory.counted"}, "tenant": "acme",
		"rate": map[string]any{"limit": 60, "period": "1m", "window": "fixed"}})
	if fixed.Subscriber.Rate == nil || fixed.Subscriber.Rate.Window != "fixed" || fixed.Subscriber.Rate.Burst != 60 {
		t.Fatalf("fixed-window subscriber = %+v", fixed.Subscriber.Rate)
	}
	e.do("GET", "/v1/limits/subscriber:f1?region=us", adminKey, nil).want(t, 200).json(t, &lim)
	if len(lim.Windows) != 1 || !lim.Windows[0].Fixed || lim.Windows[0].Period != time.Minute {
		t.Fatalf("fixed-window subscriber's key windows = %+v", lim.Windows)
	}
	e.do("PUT", "/v1/subscribers/f2?region=us", adminKey, map[string]any{"url": hookURL, "topics": []string{"x"},
		"rate": map[string]any{"limit": 5, "window": "tumbling"}}).wantProblem(t, 400, "invalid-request")

	e.do("PUT", "/v1/subscribers/s2?region=us", acmeKey, map[string]any{"url": hookURL, "topics": []string{"x"}}).wantProblem(t, 403, "forbidden")
	e.do("PUT", "/v1/subscribers/s2?region=us", adminKey, map[string]any{"url": "ftp://x", "topics": []string{}}).wantProblem(t, 400, "invalid-request")
	e.do("GET", "/v1/subscribers/nope?region=us", adminKey, nil).wantProblem(t, 404, "not-found")

	ev := map[string]any{"topic": "order.paid", "id": "o-1", "version": 2, "region": "us", "payload": map[string]int{"total": 5}}
	first := e.publish(acmeKey, ev)
	if first.Existing || first.Created != 1 || len(first.Deliveries) != 1 || first.Deliveries[0].SubscriberID != "s1" {
		t.Fatalf("first publish = %+v", first)
	}
	second := e.publish(acmeKey, ev)
	if !second.Existing || second.Created != 0 || len(second.Deliveries) != 1 || second.Deliveries[0].ID != first.Deliveries[0].ID {
		t.Fatalf("second publish = %+v", second)
	}
	if other := e.publish(globexKey, ev); other.Existing || other.Created != 0 {
		t.Fatalf("another tenant's publish = %+v, want a new event with no subscriber", other)
	}
	e.do("GET", "/v1/events/o-1/deliveries?region=us", globexKey, nil).want(t, 200)
	var dl deliveryList
	e.do("GET", "/v1/events/o-1/deliveries?region=us", acmeKey, nil).want(t, 200).json(t, &dl)
	if len(dl.Deliveries) != 1 || dl.Deliveries[0].State != "waiting" {
		t.Fatalf("event deliveries = %+v", dl)
	}
	e.do("GET", "/v1/subscribers/s1/deliveries?region=us", adminKey, nil).want(t, 200).json(t, &dl)
	if len(dl.Deliveries) != 1 {
		t.Fatalf("subscriber deliveries = %+v", dl)
	}
	id := dl.Deliveries[0].ID
	e.do("POST", "/v1/deliveries/"+id+"/redeliver", acmeKey, nil).wantProblem(t, 409, "conflict")
	e.do("POST", "/v1/deliveries/"+id+"/redeliver", globexKey, nil).wantProblem(t, 404, "not-found")
	e.do("DELETE", "/v1/subscribers/s1?region=us", adminKey, nil).want(t, 204)
	e.do("DELETE", "/v1/subscribers/s1?region=us", adminKey, nil).wantProblem(t, 404, "not-found")
}

// TestDeliveryResultNeverShown: a delivery job written before results
// were bounded (its result held the subscriber's headers and body) is
// shown with the status and timing alone, to its producer and to admins.
func TestDeliveryResultNeverShown(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t)
	ctx := context.Background()
	st := e.stores["us"]
	const canary = "SUBSCRIBER-ANSWER-CANARY"
	d := &job.Job{Kind: webhook.Kind, Region: "us", Tenant: "acme", LimitKeys: []string{webhook.LimitKey("s")},
		Payload: json.RawMessage(`{"subscriber_id":"s","event_id":"e","body":{}}`)}
	d.Prepare("01900000-0000-7000-8000-0000000000d1", e.clock.Now(), 0, false)
	if _, err := st.Insert(ctx, []*job.Job{d}, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	leased, err := st.Lease(ctx, store.LeaseParams{Now: e.clock.Now(), Max: 1, LeaseFor: time.Minute, Kinds: []string{webhook.Kind}})
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %v, %d jobs", err, len(leased))
	}
	old := `{"job_id":"` + d.ID + `","attempt":1,"at":"2026-11-30T12:00:00Z","status":200,"header":{"X-Trace":["` + canary +
		`"]},"body":"` + canary + `","duration_ms":3.5}`
	errs, err := st.Finish(ctx, []store.Transition{{ID: d.ID, LeaseToken: leased[0].LeaseToken, To: job.StatePublished,
		Result: json.RawMessage(old), Record: job.AttemptRecord{At: e.clock.Now(), Outcome: job.ClassSuccess, Status: 200}}})
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	for _, key := range []string{acmeKey, adminKey} {
		r := e.do("GET", "/v1/jobs/"+d.ID, key, nil).want(t, 200)
		var v struct {
			Result map[string]any `json:"result"`
		}
		r.json(t, &v)
		if strings.Contains(string(r.body), canary) || v.Result["status"] != 200.0 || v.Result["duration_ms"] != 3.5 {
			t.Fatalf("delivery as %s: %s", key, r.body)
		}
	}
}

// TestAdminActsForItsOwnTenant: an admin request that names no tenant acts
// for the key's tenant on every route, so an operator's job, subscriber and
// event land in one tenant and the event reaches the subscriber.
func TestAdminActsForItsOwnTenant(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t)
	if j := e.createJob(adminKey, jobBody("email.send", "us")); j.Tenant != "ops" {
		t.Fatalf("admin's job is of tenant %q, want its key's tenant ops", j.Tenant)
	}
	put := e.putSubscriber("ops_hook", map[string]any{"url": hookURL, "topics": []string{"order.paid"}})
	if put.Subscriber.Tenant != "ops" {
		t.Fatalf("admin's subscriber is of tenant %q, want ops", put.Subscriber.Tenant)
	}
	ev := map[string]any{"topic": "order.paid", "id": "o-9", "region": "us", "payload": map[string]int{"total": 5}}
	if got := e.publish(adminKey, ev); got.Created != 1 || got.Deliveries[0].SubscriberID != "ops_hook" {
		t.Fatalf("admin's event = %+v, want one delivery to its own tenant's subscriber", got)
	}
	var dl deliveryList
	e.do("GET", "/v1/events/o-9/deliveries?region=us", adminKey, nil).want(t, 200).json(t, &dl)
	if len(dl.Deliveries) != 1 {
		t.Fatalf("admin's event deliveries without tenant= : %+v", dl)
	}
	// Naming a tenant still acts for it.
	if got := e.publish(adminKey, map[string]any{"topic": "order.paid", "id": "o-9", "region": "us", "tenant": "acme",
		"payload": map[string]int{"total": 5}}); got.Existing || got.Created != 0 {
		t.Fatalf("admin's event for acme = %+v, want a new event with no subscriber", got)
	}
}
