package ratelane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/webhook"
	"github.com/ratelane/ratelane/review"
	"github.com/ratelane/ratelane/webhooks"
)

// Canaries: the victim's diff line, the victim's receiver's answer, and
// what the attacker tries to send.
const (
	victimDiffCanary = "VICTIM-DIFF-CANARY-7f3a"
	receiverCanary   = "RECEIVER-ANSWER-CANARY-91c2"
	forgedCanary     = "GLOBEX-FORGED-CANARY-0b5e"
	tenancyAdminKey  = "rl_tenancy1_AdminKeyForTheTenancyForgedRequestTestAbcdefghijk"
)

const victimDiff = `diff --git a/app.go b/app.go
--- a/app.go
+++ b/app.go
@@ -1,3 +1,4 @@
 package app
 
 func Run() {}
+// TODO: ` + victimDiffCanary + `
`

// receiver is the subscribers' webhook endpoint: it answers with a canary
// body and header and remembers every request body.
type receiver struct {
	mu     sync.Mutex
	bodies map[string][]string // path -> bodies
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.bodies[r.URL.Path] = append(rc.bodies[r.URL.Path], string(b))
	rc.mu.Unlock()
	w.Header().Set("X-Internal-Trace", receiverCanary)
	if strings.HasSuffix(r.URL.Path, "-fail") {
		w.WriteHeader(http.StatusBadRequest)
	}
	_, _ = w.Write([]byte(`{"internal":"` + receiverCanary + `"}`))
}

func (rc *receiver) all() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var b strings.Builder
	for _, bs := range rc.bodies {
		for _, s := range bs {
			b.WriteString(s)
		}
	}
	return b.String()
}

// tenancyEnv is a client with webhooks and reviews served over HTTP with
// the real SQLite key store, two tenants (acme, the victim; globex, the
// attacker) with a key of each role, and the victim's records.
type tenancyEnv struct {
	t    *testing.T
	c    *ratelane.Client
	url  string
	recv *receiver
	keys map[string]string // "acme/producer" -> secret
	// rdjsonlDir is where reviews published as rdjsonl are written.
	rdjsonlDir string

	// The victim's records.
	delivery, failedDelivery, review, job, dead, leaseToken, schedule, batch string
	// extraction is the victim's batch of generic extraction items, whose
	// input carries victimDiffCanary.
	extraction string
}

type answer struct {
	status int
	body   []byte
}

func (e *tenancyEnv) do(method, path, key string, body any) answer {
	e.t.Helper()
	resp, raw := callJSON(e.t, method, e.url, path, key, body, nil)
	return answer{status: resp.StatusCode, body: raw}
}

func (e *tenancyEnv) must(a answer, status int, out any) {
	e.t.Helper()
	if a.status != status {
		e.t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	if out != nil {
		if err := json.Unmarshal(a.body, out); err != nil {
			e.t.Fatal(err)
		}
	}
}

// newTenancyEnv builds the environment on SQLite regions (and the SQLite
// key store), or with postgres on PostgreSQL regions (and the PostgreSQL
// key store), one schema per region dropped after the test.
func newTenancyEnv(t *testing.T, postgres bool) *tenancyEnv {
	t.Helper()
	ctx := context.Background()
	recv := &receiver{bodies: map[string][]string{}}
	hooks := httptest.NewServer(recv)
	t.Cleanup(hooks.Close)

	regions := []ratelane.Region{{Name: "us", Synchronous: "NORMAL"}, {Name: "eu", Synchronous: "NORMAL"}}
	if postgres {
		for i := range regions {
			url, schema := testkit.PostgresSchema(t, "rl_tenancy_"+regions[i].Name+"_")
			regions[i] = ratelane.Region{Name: regions[i].Name, PostgresURL: url, PostgresSchema: schema}
		}
	}
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: regions,
		Logger:  quiet(),
		Plugins: []ratelane.Plugin{webhooks.New(webhooks.Config{Deliver: true, AllowPrivateTargets: true})}}
	p, err := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	rdjsonlDir := t.TempDir()
	// A batch-capable profile on the batch simulator, for the victim's batch.
	_, bprof := batchSim(t, "openai", nil)
	bp, err := review.NewProvider(bprof)
	if err != nil {
		t.Fatal(err)
	}
	withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{p, bp}, SweepEvery: 50 * time.Millisecond, RDJSONLDir: rdjsonlDir,
		Batch: review.BatchConfig{PollInterval: 100 * time.Millisecond}})
	c, url := serveAPI(t, cfg, tenancyAdminKey)
	e := &tenancyEnv{t: t, c: c, url: url, recv: recv, keys: map[string]string{"admin": tenancyAdminKey}, rdjsonlDir: rdjsonlDir}
	for _, tenant := range []string{"acme", "globex"} {
		for _, role := range []string{"producer", "worker"} {
			var out struct {
				Secret string `json:"secret"`
			}
			e.must(e.do("POST", "/v1/keys", tenancyAdminKey, map[string]any{"tenant": tenant, "role": role}), 201, &out)
			e.keys[tenant+"/"+role] = out.Secret
		}
	}

	// The victim's subscribers, one answering 200 and one 400.
	for _, id := range []string{"acme-hook", "acme-fail"} {
		e.must(e.do("PUT", "/v1/subscribers/"+id+"?region=us", tenancyAdminKey, map[string]any{
			"url": hooks.URL + "/" + id, "topics": []string{"order.paid"}, "tenant": "acme"}), 200, nil)
	}
	e.must(e.do("PUT", "/v1/subscribers/globex-hook?region=us", tenancyAdminKey, map[string]any{
		"url": hooks.URL + "/globex-hook", "topics": []string{"order.paid"}, "tenant": "globex"}), 200, nil)
	var pub webhooks.PublishResult
	e.must(e.do("POST", "/v1/events", e.keys["acme/producer"], map[string]any{
		"topic": "order.paid", "id": "ord-1", "region": "us", "payload": map[string]any{"order": 1}}), 202, &pub)
	for _, d := range pub.Deliveries {
		if d.SubscriberID == "acme-hook" {
			e.delivery = d.ID
		} else {
			e.failedDelivery = d.ID
		}
	}
	e.waitFinal(e.delivery, e.failedDelivery)
	if j, _ := c.Job(ctx, "us", e.failedDelivery); j.State != ratelane.StateTerminal {
		t.Fatalf("acme-fail's delivery is %s, want terminal after its 400", j.State)
	}

	// The victim's review, aggregated.
	var rv struct {
		ID string `json:"id"`
	}
	e.must(e.do("POST", "/v1/reviews", e.keys["acme/producer"], map[string]any{"region": "us", "diff": victimDiff, "provider": "rules",
		"publish": map[string]any{"kind": "rdjsonl", "target": "report.rdjsonl"}}), 202, &rv)
	e.review = rv.ID
	e.waitFinal(e.review)

	// The victim's batch (a sweep of one review in the batch lane).
	var bt struct {
		ID string `json:"id"`
	}
	e.must(e.do("POST", "/v1/batches", e.keys["acme/producer"], map[string]any{"region": "us", "provider": bprof.Name,
		"reviews": []map[string]any{{"repo": "acme/app", "diff": victimDiff}}}), 202, &bt)
	e.batch = bt.ID
	// And its batch of one extraction item (published on the item).
	e.must(e.do("POST", "/v1/batches", e.keys["acme/producer"], map[string]any{"region": "us", "provider": bprof.Name,
		"extractions": []map[string]any{{"id": "inv-1", "input": "invoice " + victimDiffCanary, "template": "extract",
			"schema": json.RawMessage(invoiceSchema)}}}), 202, &bt)
	e.extraction = bt.ID

	// The victim's schedule (a long interval: it never ticks during the test).
	var sc struct {
		ID string `json:"id"`
	}
	e.must(e.do("POST", "/v1/schedules", e.keys["acme/producer"], map[string]any{"name": "acme-nightly", "region": "us", "every_seconds": 86400,
		"job": map[string]any{"kind": "report.build", "limit_keys": []string{"reports:acme"}}}), 201, &sc)
	e.schedule = sc.ID

	// The victim's plain jobs: one running under acme's worker, one dead.
	var j struct {
		ID string `json:"id"`
	}
	e.must(e.do("POST", "/v1/jobs", e.keys["acme/producer"], map[string]any{"kind": "email.send", "region": "us", "limit_keys": []string{"smtp:acme"}}), 201, &j)
	e.job = j.ID
	var leased leaseAnswer
	e.must(e.do("POST", "/v1/leases", e.keys["acme/worker"], map[string]any{"region": "us", "kinds": []string{"email.send"}, "lease_seconds": 600}), 200, &leased)
	if len(leased.Jobs) != 1 || leased.Jobs[0].ID != e.job {
		t.Fatalf("acme's worker leased %+v, want job %s", leased.Jobs, e.job)
	}
	e.leaseToken = leased.Jobs[0].LeaseToken
	e.must(e.do("POST", "/v1/jobs", e.keys["acme/producer"], map[string]any{"kind": "email.send", "region": "us", "limit_keys": []string{"smtp:acme2"}}), 201, &j)
	e.dead = j.ID
	e.must(e.do("POST", "/v1/jobs/"+e.dead+"/cancel", e.keys["acme/producer"], nil), 200, nil)
	return e
}

// waitFinal waits until every job is published or terminal.
func (e *tenancyEnv) waitFinal(ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		waitForJob(e.t, e.c, id, testkit.Timeout, "the job to end", func(j *ratelane.Job) bool {
			return j.State.Final() || j.State == ratelane.StateValidated
		})
	}
}

// keyID is the public id part of an API key, rl_<id>_<secret>.
func keyID(secret string) string { return strings.Split(secret, "_")[1] }

// waitPublished waits until a review is published.
func (e *tenancyEnv) waitPublished(id string) {
	e.t.Helper()
	j := waitForJob(e.t, e.c, id, testkit.Timeout, "the review to publish", func(j *ratelane.Job) bool { return j.State.Final() })
	if j.State != ratelane.StatePublished {
		e.t.Fatalf("review %s is %s/%s, want published", id, j.State, j.Reason)
	}
}

// forgedCase is one request an attacker (or a careless producer) sends,
// and how it must be answered. hole marks the cases that today's code
// (before issue 10) answered differently, each a real hole; the others
// were already refused and are kept as regression cases.
type forgedCase struct {
	name         string
	hole         bool
	method, path string
	key          string
	body         any
	status       int
	slug         string // problem type, "" for a success status
	field        string // the field a 4xx must name, if any
	// check, when set, inspects the answer further.
	check func(t *testing.T, a answer)
}

// noLeak fails when the answer quotes the victim's diff or a receiver's
// answer.
func noLeak(t *testing.T, a answer) {
	t.Helper()
	for _, c := range []string{victimDiffCanary, receiverCanary, "X-Internal-Trace"} {
		if bytes.Contains(a.body, []byte(c)) {
			t.Errorf("the answer quotes %q: %s", c, a.body)
		}
	}
}

// batchItemNotFound checks a batch complete's answer: its one item is
// refused as an unknown job, and nothing was recorded.
func batchItemNotFound(t *testing.T, a answer) {
	t.Helper()
	var out struct {
		Results []struct {
			Status int `json:"status"`
			Error  *struct {
				Type string `json:"type"`
			} `json:"error"`
		} `json:"results"`
		Completed int `json:"completed"`
	}
	if err := json.Unmarshal(a.body, &out); err != nil {
		t.Fatalf("batch complete answer: %v: %s", err, a.body)
	}
	if out.Completed != 0 || len(out.Results) != 1 || out.Results[0].Status != 404 ||
		out.Results[0].Error == nil || !strings.HasSuffix(out.Results[0].Error.Type, "/not-found") {
		t.Errorf("batch complete of another tenant's job = %s, want its item 404 not-found and nothing completed", a.body)
	}
}

// TestForgedRequests is issue 10's tenancy test: every forged request of
// tenant globex against tenant acme's records, and every attempt to
// create or run a built-in kind from outside, over the real HTTP API with
// the real SQLite key store and in-process through Client.Insert.
func TestForgedRequests(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testForgedRequests(t, newTenancyEnv(t, false)) })
	t.Run("postgres", func(t *testing.T) { testForgedRequests(t, newTenancyEnv(t, true)) })
}

func testForgedRequests(t *testing.T, e *tenancyEnv) {
	gp, gw, ap, aw, admin := e.keys["globex/producer"], e.keys["globex/worker"], e.keys["acme/producer"], e.keys["acme/worker"], e.keys["admin"]
	forgedBody := map[string]any{"stolen": forgedCanary}
	create := func(kind string, payload any) map[string]any {
		return map[string]any{"kind": kind, "region": "us", "limit_keys": []string{"globex:own"}, "payload": payload}
	}
	jobPath := func(id, rest string) string { return "/v1/jobs/" + id + rest + "?region=us" }
	const unknown = "01900000-0000-7000-8000-000000000000"
	badToken := map[string]any{"lease_token": "not-the-token"}
	stolenToken := map[string]any{"lease_token": e.leaseToken}

	cases := []forgedCase{
		// Built-in kinds through POST /v1/jobs.
		{name: "webhook naming acme's subscriber", hole: true, method: "POST", path: "/v1/jobs", key: gp,
			body:   create("webhook", map[string]any{"subscriber_id": "acme-hook", "event_id": "x", "body": forgedBody}),
			status: 422, slug: "reserved-kind", field: "kind"},
		{name: "review.part naming acme's diff", hole: true, method: "POST", path: "/v1/jobs", key: gp,
			body:   create("review.part", map[string]any{"review": e.review, "index": 0, "object": e.review + "/0", "depth": "full", "provider": "rules"}),
			status: 422, slug: "reserved-kind", field: "kind"},
		{name: "review.github posting acme's review", hole: true, method: "POST", path: "/v1/jobs", key: gp,
			body:   create("review.github", map[string]any{"review": e.review, "target": "globex/app#1"}),
			status: 422, slug: "reserved-kind", field: "kind"},
		{name: "review parent", hole: true, method: "POST", path: "/v1/jobs", key: gp,
			body: create("review", map[string]any{"diff_object": e.review}), status: 422, slug: "reserved-kind", field: "kind"},
		{name: "batch submit job naming acme's batch", hole: true, method: "POST", path: "/v1/jobs", key: gp,
			body: create("review.batch.submit", map[string]any{"batch": e.batch}), status: 422, slug: "reserved-kind", field: "kind"},
		{name: "batch collect job naming acme's batch", hole: true, method: "POST", path: "/v1/jobs", key: gp,
			body: create("review.batch.collect", map[string]any{"batch": e.batch}), status: 422, slug: "reserved-kind", field: "kind"},
		{name: "lease batch collect jobs", hole: true, method: "POST", path: "/v1/leases", key: gw,
			body: map[string]any{"region": "us", "kinds": []string{"review.batch.collect"}}, status: 422, slug: "reserved-kind", field: "kinds"},
		{name: "ratelane. namespace", method: "POST", path: "/v1/jobs", key: gp,
			body: create("ratelane.batch", forgedBody), status: 422, slug: "reserved-kind", field: "kind"},
		{name: "webhook by an admin key", hole: true, method: "POST", path: "/v1/jobs", key: admin,
			body:   create("webhook", map[string]any{"subscriber_id": "acme-hook", "event_id": "y", "body": forgedBody}),
			status: 422, slug: "reserved-kind", field: "kind"},

		// Built-in kinds through the external worker routes.
		{name: "lease webhook jobs", hole: true, method: "POST", path: "/v1/leases", key: gw,
			body: map[string]any{"region": "us", "kinds": []string{"webhook"}}, status: 422, slug: "reserved-kind", field: "kinds"},
		{name: "lease review parts", hole: true, method: "POST", path: "/v1/leases", key: gw,
			body: map[string]any{"region": "us", "kinds": []string{"email.send", "review.part"}}, status: 422, slug: "reserved-kind", field: "kinds"},
		{name: "admin leases webhook jobs", hole: true, method: "POST", path: "/v1/leases", key: admin,
			body: map[string]any{"region": "us", "kinds": []string{"webhook"}}, status: 422, slug: "reserved-kind", field: "kinds"},
		{name: "own worker completes a delivery", hole: true, method: "POST", path: jobPath(e.delivery, "/complete"), key: aw,
			body: badToken, status: 404, slug: "not-found"},

		// Another tenant's job on every outcome route, with a wrong and
		// with the right (stolen) token.
		{name: "heartbeat, wrong token", hole: true, method: "POST", path: jobPath(e.job, "/heartbeat"), key: gw, body: badToken, status: 404, slug: "not-found"},
		{name: "complete, wrong token", hole: true, method: "POST", path: jobPath(e.job, "/complete"), key: gw, body: badToken, status: 404, slug: "not-found"},
		{name: "fail, wrong token", hole: true, method: "POST", path: jobPath(e.job, "/fail"), key: gw, body: badToken, status: 404, slug: "not-found"},
		{name: "rate-limited, wrong token", hole: true, method: "POST", path: jobPath(e.job, "/rate-limited"), key: gw, body: badToken, status: 404, slug: "not-found"},
		{name: "heartbeat, stolen token", hole: true, method: "POST", path: jobPath(e.job, "/heartbeat"), key: gw, body: stolenToken, status: 404, slug: "not-found"},
		{name: "rate-limited, stolen token", hole: true, method: "POST", path: jobPath(e.job, "/rate-limited"), key: gw, body: stolenToken, status: 404, slug: "not-found"},
		{name: "fail, stolen token", hole: true, method: "POST", path: jobPath(e.job, "/fail"), key: gw, body: stolenToken, status: 404, slug: "not-found"},
		{name: "complete, stolen token", hole: true, method: "POST", path: jobPath(e.job, "/complete"), key: gw, body: stolenToken, status: 404, slug: "not-found"},
		{name: "complete, finished foreign job", hole: true, method: "POST", path: jobPath(e.dead, "/complete"), key: gw, body: badToken, status: 404, slug: "not-found"},
		// The batch complete names ids in its body: every outcome of it
		// answers another tenant's job as unknown, and leaves it running.
		{name: "batch complete, stolen token", hole: true, method: "POST", path: "/v1/leases/complete", key: gw,
			body:   map[string]any{"region": "us", "jobs": []map[string]any{{"id": e.job, "lease_token": e.leaseToken, "result": forgedBody}}},
			status: 200, check: batchItemNotFound},
		{name: "batch fail, stolen token", hole: true, method: "POST", path: "/v1/leases/complete", key: gw,
			body:   map[string]any{"region": "us", "jobs": []map[string]any{{"id": e.job, "lease_token": e.leaseToken, "outcome": "fail", "error": "forged"}}},
			status: 200, check: batchItemNotFound},
		{name: "batch rate-limited, stolen token", hole: true, method: "POST", path: "/v1/leases/complete", key: gw,
			body: map[string]any{"region": "us", "jobs": []map[string]any{{"id": e.job, "lease_token": e.leaseToken, "outcome": "rate_limited",
				"headers": map[string]string{"Retry-After": "3600"}}}},
			status: 200, check: batchItemNotFound},
		{name: "batch complete of a delivery", hole: true, method: "POST", path: "/v1/leases/complete", key: aw,
			body:   map[string]any{"region": "us", "jobs": []map[string]any{{"id": e.delivery, "lease_token": "not-the-token", "outcome": "fail"}}},
			status: 200, check: batchItemNotFound},
		{name: "complete, unknown id (control)", method: "POST", path: jobPath(unknown, "/complete"), key: gw, body: badToken, status: 404, slug: "not-found"},

		// Another tenant's ids on the other routes.
		{name: "get job", method: "GET", path: jobPath(e.job, ""), key: gp, status: 404, slug: "not-found"},
		{name: "cancel job", method: "POST", path: jobPath(e.job, "/cancel"), key: gp, status: 404, slug: "not-found"},
		{name: "cancel finished job", method: "POST", path: jobPath(e.dead, "/cancel"), key: gp, status: 404, slug: "not-found"},
		{name: "redrive dead letter", method: "POST", path: "/v1/dead-letters/" + e.dead + "/redrive?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "redrive a running job", method: "POST", path: "/v1/dead-letters/" + e.job + "/redrive?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "delete dead letter", method: "DELETE", path: "/v1/dead-letters/" + e.dead + "?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "get delivery job", method: "GET", path: jobPath(e.delivery, ""), key: gp, status: 404, slug: "not-found"},
		{name: "redeliver delivery", method: "POST", path: "/v1/deliveries/" + e.delivery + "/redeliver?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "event deliveries", method: "GET", path: "/v1/events/ord-1/deliveries?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "event deliveries, tenant param", method: "GET", path: "/v1/events/ord-1/deliveries?region=us&tenant=acme", key: gp, status: 403, slug: "forbidden"},
		{name: "get review", method: "GET", path: "/v1/reviews/" + e.review + "?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "review SARIF", method: "GET", path: "/v1/reviews/" + e.review + "/sarif?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "get batch", method: "GET", path: "/v1/batches/" + e.batch + "?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "get batch, every region", method: "GET", path: "/v1/batches/" + e.batch, key: gp, status: 404, slug: "not-found"},
		{name: "cancel batch", method: "POST", path: "/v1/batches/" + e.batch + "/cancel?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "list batches of acme", method: "GET", path: "/v1/batches?tenant=acme", key: gp, status: 403, slug: "forbidden"},
		{name: "own batches list shows no other tenant's", method: "GET", path: "/v1/batches", key: gp, status: 200,
			check: func(t *testing.T, a answer) {
				if bytes.Contains(a.body, []byte(e.batch)) || bytes.Contains(a.body, []byte(e.extraction)) {
					t.Errorf("globex's list shows acme's batches: %s", a.body)
				}
			}},
		// The victim's extraction batch: its items and results are read
		// through GET /v1/batches/{id}, so the same routes guard them.
		{name: "get extraction batch", method: "GET", path: "/v1/batches/" + e.extraction + "?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "extraction batch's succeeded items", method: "GET", path: "/v1/batches/" + e.extraction + "?items_state=succeeded", key: gp, status: 404, slug: "not-found"},
		{name: "extraction batch's items, from an item", method: "GET", path: "/v1/batches/" + e.extraction + "?region=us&items_after=inv-0&items_limit=500", key: gp, status: 404, slug: "not-found"},
		{name: "cancel extraction batch", method: "POST", path: "/v1/batches/" + e.extraction + "/cancel?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "cancel extraction batch, every region", method: "POST", path: "/v1/batches/" + e.extraction + "/cancel", key: gp, status: 404, slug: "not-found"},
		{name: "list acme's running batches", method: "GET", path: "/v1/batches?tenant=acme&state=running", key: gp, status: 403, slug: "forbidden"},
		{name: "extraction batch submit job naming acme's batch", method: "POST", path: "/v1/jobs", key: gp,
			body: create("review.batch.submit", map[string]any{"batch": e.extraction}), status: 422, slug: "reserved-kind", field: "kind"},
		{name: "extraction batch collect job naming acme's batch", method: "POST", path: "/v1/jobs", key: gp,
			body: create("review.batch.collect", map[string]any{"batch": e.extraction, "chunk": "c0"}), status: 422, slug: "reserved-kind", field: "kind"},
		{name: "extraction batch collect job, acme's own producer", method: "POST", path: "/v1/jobs", key: ap,
			body:   map[string]any{"kind": "review.batch.collect", "region": "us", "limit_keys": []string{"acme:own"}, "payload": map[string]any{"batch": e.extraction}},
			status: 422, slug: "reserved-kind", field: "kind"},
		{name: "lease batch submit jobs", method: "POST", path: "/v1/leases", key: gw,
			body: map[string]any{"region": "us", "kinds": []string{"review.batch.submit"}}, status: 422, slug: "reserved-kind", field: "kinds"},
		{name: "batch review published to acme's subscriber", hole: true, method: "POST", path: "/v1/batches", key: gp,
			body: map[string]any{"region": "us", "provider": "openai-batch", "reviews": []map[string]any{{"diff": victimDiff,
				"publish": map[string]any{"kind": "webhook", "target": "acme-hook"}}}},
			status: 400, slug: "invalid-request", field: "reviews[0].publish.target"},
		{name: "get subscriber", method: "GET", path: "/v1/subscribers/acme-hook?region=us", key: gp, status: 403, slug: "forbidden"},
		{name: "get schedule", method: "GET", path: "/v1/schedules/" + e.schedule + "?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "replace schedule", method: "PUT", path: "/v1/schedules/" + e.schedule + "?region=us", key: gp,
			body: map[string]any{"name": "stolen", "region": "us", "every_seconds": 1, "job": map[string]any{"kind": "report.build"}}, status: 404, slug: "not-found"},
		{name: "pause schedule", method: "POST", path: "/v1/schedules/" + e.schedule + "/pause?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "resume schedule", method: "POST", path: "/v1/schedules/" + e.schedule + "/resume?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "delete schedule", method: "DELETE", path: "/v1/schedules/" + e.schedule + "?region=us", key: gp, status: 404, slug: "not-found"},
		{name: "list schedules of acme", method: "GET", path: "/v1/schedules?tenant=acme", key: gp, status: 403, slug: "forbidden"},
		{name: "delivery response", method: "GET", path: "/v1/deliveries/" + e.failedDelivery + "/response?region=us", key: gp, status: 403, slug: "forbidden"},
		{name: "list jobs of acme", method: "GET", path: "/v1/jobs?tenant=acme", key: gp, status: 403, slug: "forbidden"},
		// Admin-only routes with ids are out of a producer's reach.
		{name: "replace subscriber", method: "PUT", path: "/v1/subscribers/acme-hook?region=us", key: gp,
			body: map[string]any{"url": "https://evil.example/", "topics": []string{"*"}}, status: 403, slug: "forbidden"},
		{name: "rotate subscriber secret", method: "POST", path: "/v1/subscribers/acme-hook/rotate-secret?region=us", key: gp, status: 403, slug: "forbidden"},
		{name: "subscriber deliveries", method: "GET", path: "/v1/subscribers/acme-hook/deliveries?region=us", key: gp, status: 403, slug: "forbidden"},
		{name: "delete subscriber", method: "DELETE", path: "/v1/subscribers/acme-hook?region=us", key: gp, status: 403, slug: "forbidden"},
		{name: "reconfigure subscriber's key", method: "PUT", path: "/v1/limits/subscriber:acme-hook?region=us", key: gp,
			body: map[string]any{"per_second": 1000}, status: 403, slug: "forbidden"},
		{name: "read subscriber's key", method: "GET", path: "/v1/limits/subscriber:acme-hook?region=us", key: gp, status: 403, slug: "forbidden"},
		{name: "revoke a key", method: "DELETE", path: "/v1/keys/" + keyID(e.keys["acme/producer"]), key: gp, status: 403, slug: "forbidden"},

		// A review published to another tenant's subscriber would be
		// signed with its secret.
		{name: "review published to acme's subscriber", hole: true, method: "POST", path: "/v1/reviews", key: gp,
			body:   map[string]any{"region": "us", "diff": victimDiff, "provider": "rules", "publish": map[string]any{"kind": "webhook", "target": "acme-hook"}},
			status: 400, slug: "invalid-request", field: "publish.target"},
		{name: "review published to an unknown subscriber", hole: true, method: "POST", path: "/v1/reviews", key: gp,
			body:   map[string]any{"region": "us", "diff": victimDiff, "provider": "rules", "publish": map[string]any{"kind": "webhook", "target": "nobody"}},
			status: 400, slug: "invalid-request", field: "publish.target"},

		// What a subscriber answered never reaches a producer.
		{name: "own delivery's result", hole: true, method: "GET", path: jobPath(e.delivery, ""), key: ap, status: 200,
			check: func(t *testing.T, a answer) {
				noLeak(t, a)
				var j struct {
					Result map[string]any `json:"result"`
				}
				_ = json.Unmarshal(a.body, &j)
				if j.Result["status"] != 200.0 || j.Result["duration_ms"] == nil {
					t.Errorf("a delivery's result %v lacks its status and timing", j.Result)
				}
			}},
		{name: "own failed delivery", method: "GET", path: jobPath(e.failedDelivery, ""), key: ap, status: 200, check: noLeak},
		{name: "own deliveries list", method: "GET", path: "/v1/jobs?kind=webhook", key: ap, status: 200, check: noLeak},
		{name: "own dead letters", method: "GET", path: "/v1/dead-letters", key: ap, status: 200, check: noLeak},
		{name: "own event deliveries", method: "GET", path: "/v1/events/ord-1/deliveries?region=us", key: ap, status: 200, check: noLeak},
		{name: "own delivery response (producer)", method: "GET", path: "/v1/deliveries/" + e.failedDelivery + "/response?region=us", key: ap, status: 403, slug: "forbidden"},
		{name: "subscriber deliveries (admin)", method: "GET", path: "/v1/subscribers/acme-hook/deliveries?region=us", key: admin, status: 200, check: noLeak},
		{name: "delivery result (admin)", hole: true, method: "GET", path: jobPath(e.delivery, ""), key: admin, status: 200, check: noLeak},
	}

	// Every route that takes an id or a name in its path is tried at
	// least once: the list comes from the discovery document, so a new
	// route without a case fails here.
	var disc struct {
		Capabilities []struct {
			Method string `json:"method"`
			Path   string `json:"path"`
		} `json:"capabilities"`
	}
	e.must(e.do("GET", "/v1", "", nil), 200, &disc)
	for _, c := range disc.Capabilities {
		if !strings.Contains(c.Path, "{") {
			continue
		}
		wild := regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllString(c.Path, "\x00")
		re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(wild), "\x00", `[^/?]+`) + `(\?|$)`)
		covered := false
		for _, tc := range cases {
			covered = covered || tc.method == c.Method && re.MatchString(tc.path)
		}
		if !covered {
			t.Errorf("no forged case for %s %s", c.Method, c.Path)
		}
	}

	holes := 0
	for _, tc := range cases {
		if tc.hole {
			holes++
		}
		t.Run(tc.name, func(t *testing.T) {
			a := e.do(tc.method, tc.path, tc.key, tc.body)
			if a.status != tc.status {
				t.Fatalf("%s %s: %d, want %d: %s", tc.method, tc.path, a.status, tc.status, a.body)
			}
			if tc.slug != "" {
				var p problem
				if err := json.Unmarshal(a.body, &p); err != nil || !strings.HasSuffix(p.Type, "/"+tc.slug) || p.Detail == "" {
					t.Fatalf("answer %s, want a %s problem with a detail", a.body, tc.slug)
				}
				if tc.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != tc.field) {
					t.Fatalf("problem %s does not name the field %s", a.body, tc.field)
				}
			}
			noLeak(t, a)
			if tc.check != nil {
				tc.check(t, a)
			}
		})
	}

	// The same built-in kinds through the library's public insert path.
	ctx := context.Background()
	libCases := map[string]ratelane.InsertParams{
		"Insert webhook":       {Kind: ratelane.WebhookKind, Region: "us", Tenant: "globex", LimitKeys: []string{"globex:own"}, Args: map[string]any{"subscriber_id": "acme-hook", "event_id": "z", "body": forgedBody}},
		"Insert review.part":   {Kind: "review.part", Region: "us", Tenant: "globex", LimitKeys: []string{"globex:own"}, Args: map[string]any{"review": e.review, "object": e.review + "/0"}},
		"Insert review.github": {Kind: "review.github", Region: "us", Tenant: "globex", LimitKeys: []string{"globex:own"}, Args: map[string]any{"review": e.review, "target": "globex/app#1"}},
		"Insert review":        {Kind: "review", Region: "us", Tenant: "globex", LimitKeys: []string{"globex:own"}},
		"Insert review.batch.collect": {Kind: "review.batch.collect", Region: "us", Tenant: "globex", LimitKeys: []string{"globex:own"},
			Args: map[string]any{"batch": e.extraction}},
	}
	for name, p := range libCases {
		holes++
		t.Run(name, func(t *testing.T) {
			_, err := e.c.Insert(ctx, p)
			var rk *ratelane.ReservedKindError
			if !errors.As(err, &rk) || rk.Field != "kind" || rk.Kind.Name != p.Kind {
				t.Fatalf("Insert(%s) = %v, want a ReservedKindError", p.Kind, err)
			}
		})
	}
	holes++
	t.Run("InsertMany with one built-in kind", func(t *testing.T) {
		ok := ratelane.InsertParams{Kind: "email.send", Region: "us", Tenant: "globex", LimitKeys: []string{"globex:many"}}
		bad := libCases["Insert webhook"]
		if _, err := e.c.InsertMany(ctx, []ratelane.InsertParams{ok, bad}); err == nil {
			t.Fatal("InsertMany accepted a built-in kind")
		}
		if js, _ := e.c.List(ctx, "us", ratelane.ListParams{LimitKey: "globex:many"}); len(js) != 0 {
			t.Fatalf("InsertMany inserted %d jobs of a refused batch", len(js))
		}
	})
	holes++
	t.Run("review published over acme's rdjsonl file", func(t *testing.T) {
		diff := strings.ReplaceAll(victimDiff, "app.go", "globex.go")
		var rv struct {
			ID string `json:"id"`
		}
		e.must(e.do("POST", "/v1/reviews", gp, map[string]any{"region": "us", "diff": diff, "provider": "rules",
			"publish": map[string]any{"kind": "rdjsonl", "target": "report.rdjsonl"}}), 202, &rv)
		e.waitPublished(rv.ID)
		e.waitPublished(e.review)
		// Wherever the files are, acme's findings are still in one of them.
		found := false
		_ = filepath.WalkDir(e.rdjsonlDir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, _ := os.ReadFile(path)
				found = found || bytes.Contains(b, []byte(`"app.go"`)) && !bytes.Contains(b, []byte("globex.go"))
			}
			return nil
		})
		if !found {
			t.Fatal("globex's review overwrote acme's rdjsonl publication")
		}
	})
	total := len(cases) + len(libCases) + 2
	t.Logf("forged-request cases: %d tried and refused, of which %d were holes before issue 10", total, holes)

	// Nothing the attacker did changed the victim's records or reached
	// the victim's receiver. Every globex job is waited for, so a forged
	// delivery that had been accepted would have run by now.
	js, err := e.c.List(ctx, "us", ratelane.ListParams{Tenant: "globex", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		if j.Kind != "email.send" {
			e.waitFinal(j.ID)
		}
	}
	if got := e.recv.all(); strings.Contains(got, forgedCanary) || strings.Contains(got, victimDiffCanary) {
		t.Fatalf("a forged delivery reached a receiver: %s", got)
	}
	if j, err := e.c.Job(ctx, "us", e.job); err != nil || j.State != ratelane.StateRunning || j.Attempt != 1 {
		t.Fatalf("acme's running job after the forged outcomes: %+v, %v; want it still running its first attempt", j, err)
	}
	if j, err := e.c.Job(ctx, "us", e.dead); err != nil || j.State != ratelane.StateTerminal {
		t.Fatalf("acme's dead letter after the forged requests: %+v, %v", j, err)
	}
	// acme's extraction batch ran to its end untouched by globex's cancels
	// and collect jobs, and acme reads its published result.
	testkit.Eventually(t, testkit.Timeout, "acme's extraction batch to finish", func() error {
		var b struct {
			State  string `json:"state"`
			Counts struct{ Total, Succeeded, Canceled int }
			Items  []struct {
				CustomID string `json:"custom_id"`
				Result   *struct {
					Output json.RawMessage `json:"output"`
				} `json:"result"`
			} `json:"items"`
		}
		e.must(e.do("GET", "/v1/batches/"+e.extraction+"?region=us", ap, nil), 200, &b)
		if b.State != "done" {
			return fmt.Errorf("state %s, counts %+v", b.State, b.Counts)
		}
		if b.Counts.Total != 1 || b.Counts.Succeeded != 1 || len(b.Items) != 1 || b.Items[0].Result == nil ||
			!sameJSON(b.Items[0].Result.Output, []byte(`{"currency":"EUR","total":0,"vendor":"sim"}`)) {
			t.Fatalf("acme's extraction batch ended %+v with items %+v", b.Counts, b.Items)
		}
		return nil
	})
	// The operator still sees the bounded failed answer.
	a := e.do("GET", "/v1/deliveries/"+e.failedDelivery+"/response?region=us", admin, nil)
	var rr webhooks.DeliveryResponse
	e.must(a, 200, &rr)
	if rr.Status != 400 || !strings.Contains(rr.Body, receiverCanary) || len(rr.Body) > webhook.MaxBodyPrefix {
		t.Fatalf("admin's view of the failed answer: %+v", rr)
	}
}
