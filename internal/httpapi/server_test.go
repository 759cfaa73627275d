package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
)

// TestLongPoll: a waiting lease returns as soon as a job is inserted, and
// a long poll whose client hangs up ends at once on the server.
func TestLongPoll(t *testing.T) {
	t.Parallel()
	notified := make(chan string, 10)
	e := newEnv(t, func(c *Config) { c.Notify = func(region string) { notified <- region } })
	waiting := pollSignal(e, "us")
	done := make(chan leaseResponse, 1)
	start := time.Now()
	go func() {
		var out leaseResponse
		r, err := e.send0("POST", "/v1/leases", workerKey, `{"region":"us","kinds":["poll.me"],"wait_seconds":20}`)
		if err == nil {
			err = json.Unmarshal(r.body, &out)
		}
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	testkit.Recv(t, waiting, testkit.Timeout, "the poll to wait")
	j := e.createJob(acmeKey, jobBody("poll.me", "us"))
	// The poll waits up to 20 s and re-leases every pollEvery anyway; only
	// the insert's wake-up returns it well before that.
	got := testkit.Recv(t, done, testkit.Timeout, "the long poll to return after an insert")
	if len(got.Jobs) != 1 || got.Jobs[0].ID != j.ID {
		t.Fatalf("long poll returned %+v, want job %s", got.Jobs, j.ID)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("long poll took %v after the insert", waited)
	}
	if got := testkit.Recv(t, notified, testkit.Timeout, "Notify"); got != "us" {
		t.Fatalf("Notify got region %q", got)
	}

	// Nothing to lease: the poll ends with no jobs when the time is up.
	var out leaseResponse
	e.do("POST", "/v1/leases", workerKey, map[string]any{"region": "us", "kinds": []string{"poll.me"}, "wait_seconds": 1}).want(t, 200).json(t, &out)
	if len(out.Jobs) != 0 {
		t.Fatalf("empty poll returned %d jobs", len(out.Jobs))
	}

	// A client that hangs up: the handler must stop, which httptest's
	// Close (it waits for every handler) proves by returning quickly.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.hs.URL+"/v1/leases",
		strings.NewReader(`{"region":"us","kinds":["poll.me"],"wait_seconds":30}`))
	req.Header.Set("Authorization", "Bearer "+workerKey)
	req.Header.Set("Content-Type", "application/json")
	errc := make(chan error, 1)
	go func() {
		resp, err := e.hs.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testkit.Recv(t, waiting, testkit.Timeout, "the poll to wait")
	cancel()
	testkit.Recv(t, errc, testkit.Timeout, "the client to give up")
	closed := time.Now()
	e.hs.Close()
	if took := time.Since(closed); took > 5*time.Second {
		t.Fatalf("the abandoned long poll kept its handler for %v", took)
	}
}

// TestServerCloseEndsLongPolls: Close answers waiting polls at once.
func TestServerCloseEndsLongPolls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	waiting := pollSignal(e, "eu")
	done := make(chan int, 1)
	go func() {
		r, err := e.send0("POST", "/v1/leases", workerKey, `{"region":"eu","kinds":["x"],"wait_seconds":30}`)
		if err != nil {
			t.Error(err)
		}
		done <- r.status
	}()
	testkit.Recv(t, waiting, testkit.Timeout, "the poll to wait")
	e.srv.Close()
	e.srv.Close() // idempotent
	// Well under the poll's 30 s, so a poll left to run out still fails,
	// and far above a Close's work, so a loaded machine does not.
	if status := testkit.Recv(t, done, 15*time.Second, "Close to end the long poll"); status != 200 {
		t.Fatalf("closed poll answered %d", status)
	}
}

// pollSignal returns a channel that receives each time a long poll of the
// region has leased nothing and waits: the test signal to act on instead
// of a sleep that guesses when the poll got there.
func pollSignal(e *env, region string) <-chan struct{} {
	waiting := make(chan struct{}, 1)
	k := e.srv.wakers[region]
	k.mu.Lock()
	k.onBlock = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	k.mu.Unlock()
	return waiting
}

// TestRequestRateLimit: each API key has its own token bucket; over it, a
// 429 with Retry-After and the IETF RateLimit fields.
func TestRequestRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.RequestRate, c.RequestBurst = 1, 2 })
	for range 2 {
		r := e.do("GET", "/v1/jobs", acmeKey, nil).want(t, 200)
		if r.header.Get("RateLimit") == "" || r.header.Get("RateLimit-Policy") == "" {
			t.Fatalf("no RateLimit headers: %v", r.header)
		}
	}
	r := e.do("GET", "/v1/jobs", acmeKey, nil)
	r.wantProblem(t, http.StatusTooManyRequests, "too-many-requests")
	if r.header.Get("Retry-After") != "1" || !strings.Contains(r.header.Get("RateLimit"), "r=0") {
		t.Fatalf("429 headers: Retry-After %q, RateLimit %q", r.header.Get("Retry-After"), r.header.Get("RateLimit"))
	}
	e.do("GET", "/v1/jobs", globexKey, nil).want(t, 200) // another key has its own bucket
	e.clock.Add(time.Second)
	e.do("GET", "/v1/jobs", acmeKey, nil).want(t, 200)
}

// TestMetrics: requests are counted by route pattern, never raw path, and
// GET /metrics serves the gatherer (404 without one).
func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) { c.Registerer, c.Gatherer = reg, reg })
	j := e.createJob(acmeKey, jobBody("email.send", "us"))
	e.do("GET", "/v1/jobs/"+j.ID, acmeKey, nil).want(t, 200)
	e.do("GET", "/v1/jobs/nope", acmeKey, nil).want(t, 404)
	e.do("GET", "/v1/missing/"+j.ID, acmeKey, nil).want(t, 404)
	r := e.do("GET", "/metrics", "", nil).want(t, 200)
	for _, want := range []string{
		`ratelane_api_requests_total{route="POST /v1/jobs",status="201"} 1`,
		`ratelane_api_requests_total{route="GET /v1/jobs/{id}",status="200"} 1`,
		`ratelane_api_requests_total{route="GET /v1/jobs/{id}",status="404"} 1`,
		`ratelane_api_requests_total{route="unmatched",status="404"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Fatalf("metrics lack %s:\n%s", want, r.body)
		}
	}
	if strings.Contains(string(r.body), j.ID) {
		t.Fatal("a metric label carries a job id")
	}
	// A second server on the same registry shares the counter.
	if _, err := New(Config{Regions: e.stores, Jobs: e.srv.cfg.Jobs, Auth: e.keys, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	bare := newEnv(t)
	bare.do("GET", "/metrics", "", nil).wantProblem(t, 404, "not-found")
}

func TestKeysEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var k createKeyResponse
	r := e.do("POST", "/v1/keys", adminKey, map[string]any{"tenant": "initech", "role": "producer", "regions": []string{"eu"}, "name": "svc"}).want(t, 201)
	r.json(t, &k)
	if k.Secret == "" || k.Key.Tenant != "initech" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("created %+v (Cache-Control %q)", k, r.header.Get("Cache-Control"))
	}
	e.createJob(k.Secret, jobBody("email.send", "eu"))
	e.do("POST", "/v1/jobs", k.Secret, jobBody("email.send", "us")).wantProblem(t, 403, "region-forbidden")
	var list keyList
	e.do("GET", "/v1/keys", adminKey, nil).want(t, 200).json(t, &list)
	if len(list.Keys) < 7 {
		t.Fatalf("listed %d keys", len(list.Keys))
	}
	e.do("DELETE", "/v1/keys/"+k.Key.ID, adminKey, nil).want(t, 204)
	e.do("GET", "/v1/jobs", k.Secret, nil).wantProblem(t, 401, "unauthenticated")
	e.do("DELETE", "/v1/keys/k_nobody", adminKey, nil).wantProblem(t, 404, "not-found")
	e.do("POST", "/v1/keys", adminKey, map[string]any{"tenant": "x", "role": "root"}).wantProblem(t, 400, "invalid-request")
	e.do("POST", "/v1/keys", adminKey, map[string]any{"tenant": "x", "role": "worker", "regions": []string{"mars"}}).wantProblem(t, 400, "invalid-request")

	// Without a KeyManager the key routes do not exist.
	bare := newEnv(t, func(c *Config) { c.Keys = nil })
	bare.do("GET", "/v1/keys", adminKey, nil).wantProblem(t, 404, "not-found")
}

func TestLimitsEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var v limitView
	e.do("PUT", "/v1/limits/openai:gpt-4o?region=us", adminKey, map[string]any{"rate": 600, "period": "1m", "burst": 20, "concurrency": 4, "adaptive": true}).
		want(t, 200).json(t, &v)
	// An adaptive key bursts at most admission.AdaptiveBurst of its learned
	// rate (10/s x 0.1 s, at least 2), not its declared Burst: tokens show
	// the burst in force.
	if v.Rate != 10 || v.Burst != 20 || v.Concurrency != 4 || !v.Adaptive || v.Region != "us" || v.Tokens != 2 {
		t.Fatalf("put limit -> %+v", v)
	}
	body := jobBody("llm.call", "us", "openai:gpt-4o")
	body["cost"] = 3
	e.createJob(acmeKey, body)
	e.do("GET", "/v1/limits/openai:gpt-4o?region=us", adminKey, nil).want(t, 200).json(t, &v)
	if v.WaitingCost != 3 || v.LearnedRate != 10 || v.InFlight != 0 {
		t.Fatalf("get limit -> %+v", v)
	}
	e.do("GET", "/v1/limits/openai:gpt-4o", adminKey, nil).wantProblem(t, 400, "invalid-request") // two regions
	e.do("GET", "/v1/limits/openai:gpt-4o?region=eu", adminKey, nil).wantProblem(t, 404, "not-found")
	var list limitList
	e.do("GET", "/v1/limits", adminKey, nil).want(t, 200).json(t, &list)
	if len(list.Limits) != 1 || list.Limits[0].Name != "openai:gpt-4o" {
		t.Fatalf("limits %+v, want the one key", list.Limits)
	}
	for _, bad := range []map[string]any{
		{"per_second": -1},
		{"per_second": 1, "rate": 5},
		{"rate": 5, "period": "fortnight"},
		{"adaptive": true},
		{"shape": "leaky", "rate": 5},
		{"shape": "window"},
		{"shape": "window", "rate": 5, "burst": 2},
		{"windows": []map[string]any{{"limit": 0, "period": "1s"}}},
		{"windows": []map[string]any{{"limit": 5, "period": "1y"}}},
		{"shape": "window", "rate": 5, "window": "tumbling"},
		{"rate": 5, "window": "fixed"},                                               // window applies to shape window
		{"windows": []map[string]any{{"limit": 5, "period": "1s", "guard": "30ms"}}}, // a guard on a sliding window
		{"windows": []map[string]any{{"limit": 5, "period": "1s", "fixed": true, "guard": "2s"}}}, // a guard beyond the period
		{"windows": []map[string]any{{"limit": 5, "period": "1s", "fixed": true, "guard": "soon"}}},
	} {
		e.do("PUT", "/v1/limits/k?region=us", adminKey, bad).wantProblem(t, 400, "invalid-request")
	}
	// A window shape, and a bucket with a further window.
	e.do("PUT", "/v1/limits/partner?region=us", adminKey, map[string]any{"shape": "window", "rate": 20, "period": "1s"}).
		want(t, 200).json(t, &v)
	if v.Rate != 0 || len(v.Windows) != 1 || v.Windows[0].Limit != 20 || v.Windows[0].Period != time.Second || v.Tokens != 20 {
		t.Fatalf("window limit -> %+v", v)
	}
	e.do("PUT", "/v1/limits/both?region=us", adminKey, map[string]any{"per_second": 5, "burst": 5,
		"windows": []map[string]any{{"limit": 200, "period": "1m"}}}).want(t, 200).json(t, &v)
	if v.Rate != 5 || len(v.Windows) != 1 || v.Windows[0].Limit != 200 || v.Windows[0].Period != time.Minute {
		t.Fatalf("bucket + window -> %+v", v)
	}
	// A fixed window, and a bucket with a further fixed window; GET shows
	// them as set.
	e.do("PUT", "/v1/limits/reset-at-00?region=us", adminKey, map[string]any{"shape": "window", "window": "fixed", "rate": 60, "period": "1m"}).
		want(t, 200).json(t, &v)
	if v.Rate != 0 || len(v.Windows) != 1 || !v.Windows[0].Fixed || v.Windows[0].Limit != 60 || v.Windows[0].Period != time.Minute {
		t.Fatalf("fixed window limit -> %+v", v)
	}
	e.do("PUT", "/v1/limits/both-fixed?region=us", adminKey, map[string]any{"per_second": 5,
		"windows": []map[string]any{{"limit": 200, "period": "1m", "fixed": true, "guard": "500ms"}}}).want(t, 200)
	e.do("GET", "/v1/limits/both-fixed?region=us", adminKey, nil).want(t, 200).json(t, &v)
	if len(v.Windows) != 1 || !v.Windows[0].Fixed || v.Windows[0].Guard != 500*time.Millisecond {
		t.Fatalf("bucket + fixed window read back as %+v", v.Windows)
	}
	// A cost the key can never admit is refused at insert, naming the field.
	over := jobBody("llm.call", "us", "both")
	over["cost"] = 6
	p := e.do("POST", "/v1/jobs", acmeKey, over).wantProblem(t, 400, "invalid-request")
	if len(p.Errors) != 1 || p.Errors[0].Field != "cost" || !strings.Contains(p.Detail, "burst") {
		t.Fatalf("cost above the burst: %+v", p)
	}
	over["limit_keys"], over["cost"] = []string{"partner"}, 21
	if p := e.do("POST", "/v1/jobs", acmeKey, over).wantProblem(t, 400, "invalid-request"); len(p.Errors) != 1 || p.Errors[0].Field != "cost" {
		t.Fatalf("cost above a window's limit: %+v", p)
	}
	over["cost"] = 20
	e.do("POST", "/v1/jobs", acmeKey, over).want(t, 201)
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var h healthResponse
	e.do("GET", "/healthz", "", nil).want(t, 200).json(t, &h)
	if h.Status != "ok" || h.Version != "test" {
		t.Fatalf("healthz %+v", h)
	}
	e.do("GET", "/readyz", "", nil).want(t, 200).json(t, &h)
	if h.Regions["us"] != "ok" || h.Regions["eu"] != "ok" {
		t.Fatalf("readyz %+v", h)
	}
	e.stores["eu"].Close()
	// The answer is cached for a second: poll until the probe sees it.
	r := waitReady(t, e, 503)
	r.wantProblem(t, 503, "unavailable")
	var p readyProblem
	r.json(t, &p)
	if p.Regions["eu"] == "ok" || p.Regions["us"] != "ok" {
		t.Fatalf("readyz with eu closed: %+v", p)
	}
}

// otherRegion is a store that claims another region, to test the wiring
// check without a second database.
type otherRegion struct{ store.Store }

func (otherRegion) Region() string { return "us" }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, cfg := range map[string]Config{
		"no regions":        {Auth: e.keys},
		"no auth":           {Regions: e.stores, Jobs: e.srv.cfg.Jobs},
		"cross-region wire": {Regions: map[string]store.Store{"eu": otherRegion{e.stores["eu"]}}, Jobs: e.srv.cfg.Jobs, Auth: e.keys},
		"tiny budget":       {Regions: e.stores, Jobs: e.srv.cfg.Jobs, Auth: e.keys, InteractiveBudget: time.Millisecond},
		// Without the engine's writer the server would build a second
		// writer of the region's job state; it refuses instead.
		"no writer":  {Regions: e.stores, Auth: e.keys},
		"one writer": {Regions: e.stores, Jobs: map[string]*engine.Jobs{"us": e.srv.cfg.Jobs["us"]}, Auth: e.keys},
		"wrong writer": {Regions: e.stores, Jobs: map[string]*engine.Jobs{"us": e.srv.cfg.Jobs["eu"], "eu": e.srv.cfg.Jobs["eu"]},
			Auth: e.keys},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted the config", name)
		} else if name == "cross-region wire" && !strings.Contains(err.Error(), `"eu"`) {
			t.Errorf("cross-region error %q does not name the region", err)
		} else if name == "one writer" && !strings.Contains(err.Error(), `region "eu" has no writer`) {
			t.Errorf("missing writer error %q does not name the region", err)
		}
	}
}

// failingAuth answers every token with an outage.
type failingAuth struct{}

func (failingAuth) Authenticate(context.Context, string) (auth.Principal, error) {
	return auth.Principal{}, context.DeadlineExceeded
}

func TestAuthOutageIs503(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Auth = failingAuth{} })
	e.do("GET", "/v1/jobs", acmeKey, nil).wantProblem(t, 503, "unavailable")
	e.do("GET", "/v1", "", nil).want(t, 200) // public docs need no key
}

// send0 sends a JSON request without failing the test, for goroutines
// (t.Fatal must run on the test's goroutine).
func (e *env) send0(method, path, key, body string) (response, error) {
	req, err := http.NewRequest(method, e.hs.URL+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.hs.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}, err
}

// TestCanceledRequestIs499: a request whose client went away before the
// store answered (the dashboard's reads when a page is closed) is answered
// 499 client-closed-request and logged at debug, not as a 500 error. A
// real store error on a live request is still a logged 500.
func TestCanceledRequestIs499(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	e := newEnv(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	for _, tc := range []struct {
		method, path string
		body         string
	}{
		{"GET", "/v1/jobs?region=us", ""},
		{"GET", "/v1/stats", ""},
		{"GET", "/v1/limits?region=us", ""},
		{"POST", "/v1/jobs", `{"kind":"email.send","region":"us","limit_keys":["smtp:default"]}`},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the client is gone before the handler reads the store
		var rd io.Reader
		if tc.body != "" && tc.method == "POST" {
			rd = strings.NewReader(tc.body)
		}
		req := httptest.NewRequestWithContext(ctx, tc.method, tc.path, rd)
		req.Header.Set("Authorization", "Bearer "+adminKey)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.srv.Handler().ServeHTTP(rec, req)
		var p Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("%s %s: %d %s", tc.method, tc.path, rec.Code, rec.Body)
		}
		if rec.Code != statusClientClosed || p.Type != problemBase+"client-closed-request" || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s canceled: %d %+v, want 499 client-closed-request", tc.method, tc.path, rec.Code, p)
		}
	}
	out := logs.String()
	if strings.Contains(out, "level=ERROR") || strings.Contains(out, "level=WARN") {
		t.Errorf("canceled requests were logged as errors:\n%s", out)
	}
	if n := strings.Count(out, "request canceled by the client"); n != 4 {
		t.Errorf("%d debug lines for 4 canceled requests:\n%s", n, out)
	}
	// The control: a store that fails on a live request is a logged 500.
	e.stores["us"].Close()
	e.do("GET", "/v1/jobs?region=us", adminKey, nil).wantProblem(t, 500, "internal")
	if !strings.Contains(logs.String(), "level=ERROR msg=\"request failed\"") {
		t.Errorf("a live request's store failure was not logged as an error:\n%s", logs.String())
	}
}

// TestStatusWriter pins what the API's metrics and the dashboard's proxy
// read from StatusWriter: 0 before anything is written, 200 for a body
// written without WriteHeader, the first status when there are two, and
// the writer beneath reachable for http.ResponseController.
func TestStatusWriter(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	sw := &StatusWriter{ResponseWriter: rec}
	if sw.Status != 0 || sw.Unwrap() != rec {
		t.Fatalf("fresh: Status %d, Unwrap %v", sw.Status, sw.Unwrap())
	}
	_, _ = sw.Write([]byte("x"))
	sw.WriteHeader(http.StatusTeapot)
	if sw.Status != http.StatusOK {
		t.Errorf("body first: Status %d, want 200", sw.Status)
	}
	sw = &StatusWriter{ResponseWriter: httptest.NewRecorder()}
	sw.WriteHeader(http.StatusUnauthorized)
	sw.WriteHeader(http.StatusInternalServerError)
	if sw.Status != http.StatusUnauthorized {
		t.Errorf("two statuses: Status %d, want the first, 401", sw.Status)
	}
}
