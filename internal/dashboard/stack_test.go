package dashboard_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/review"
	"github.com/ratelane/ratelane/webhooks"
)

const adminKey = "rl_uitest01_AdminKeyForTheDashboardTestsAbcdefghijklmnopqrs"

// stack is a real ratelane server for one test: SQLite stores for us and
// eu in t.TempDir(), the API and the dashboard on loopback, and producer
// keys for two tenants. Only reviews (the offline rules reviewer, in us)
// run in process; for every other kind the tests play the external worker
// over the API.
type stack struct {
	t            *testing.T
	url          string
	acme, globex string
	// handler is the server's handler, for requests a test must shape
	// beyond what a client can (a context canceled at a chosen point).
	handler http.Handler
	// logs holds everything the server logged, from debug up.
	logs *testkit.Buffer
}

func newStack(t *testing.T, tls bool) *stack {
	t.Helper()
	ctx := context.Background()
	logs := &testkit.Buffer{}
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}, {Name: "eu"}},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	rules, err := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Plugins = append(cfg.Plugins, review.New(review.Config{Regions: map[string]review.RegionConfig{
		"us": {Providers: []review.Provider{rules}, SweepEvery: 100 * time.Millisecond},
	}}))
	// The subscriber routes the browser test drives belong to the webhooks
	// plug-in; it does not deliver here (no Deliver), as before.
	cfg.Plugins = append(cfg.Plugins, webhooks.New(webhooks.Config{}))
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		c.Close()
		t.Fatal(err)
	}
	api, err := c.NewAPI(ctx, ratelane.APIConfig{AdminKey: adminKey, RequestRate: -1, Dashboard: true})
	if err != nil {
		c.Stop(ctx)
		t.Fatal(err)
	}
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(api.Handler)
	} else {
		srv = httptest.NewServer(api.Handler)
	}
	t.Cleanup(func() {
		srv.Close()
		api.Close()
		c.Stop(context.Background())
	})
	s := &stack{t: t, url: srv.URL, handler: api.Handler, logs: logs}
	key := func(tenant, role string) string {
		var out struct {
			Secret string `json:"secret"`
		}
		s.call("POST", "/v1/keys", adminKey, map[string]any{"tenant": tenant, "role": role}, 201, &out)
		return out.Secret
	}
	s.acme, s.globex = key("acme", "producer"), key("globex", "producer")
	return s
}

// call sends an API request with a bearer key and fails unless it answers
// want; the body is decoded into out when set.
func (s *stack) call(method, path, key string, body any, want int, out any) {
	s.t.Helper()
	testkit.CallWant(s.t, insecureClient(nil), method, s.url+path, key, body, want, out)
}

type job struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	Region     string `json:"region"`
	LeaseToken string `json:"lease_token"`
	Lane       string `json:"lane"`
}

// enqueue creates a job as key.
func (s *stack) enqueue(key, kind, limitKey string) job {
	var j job
	s.call("POST", "/v1/jobs", key, map[string]any{"kind": kind, "region": "us", "limit_keys": []string{limitKey},
		"payload": map[string]any{"secret_field": "payload-" + kind}}, 201, &j)
	return j
}

// lease leases up to max jobs of kind as an external worker (the admin key).
func (s *stack) lease(kind string, max int) []job {
	var out struct {
		Jobs []job `json:"jobs"`
	}
	s.call("POST", "/v1/leases", adminKey, map[string]any{"region": "us", "kinds": []string{kind}, "max": max, "lease_seconds": 60}, 200, &out)
	return out.Jobs
}

// browser is a cookie-keeping HTTP client signed in to the dashboard.
type browser struct {
	s      *stack
	client *http.Client
	csrf   string
}

func insecureClient(jar http.CookieJar) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // httptest's self-signed certificate
	return &http.Client{Jar: jar, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var (
	csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	csrfMeta  = regexp.MustCompile(`name="csrf-token" content="([^"]+)"`)
)

// signIn signs in with key through the login form, as a browser would.
func (s *stack) signIn(key string) (*browser, *http.Response) {
	s.t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &browser{s: s, client: insecureClient(jar)}
	form := b.get("/ui/login")
	m := csrfField.FindStringSubmatch(form)
	if m == nil {
		s.t.Fatalf("no csrf field in the login form: %s", form)
	}
	resp, err := b.client.PostForm(s.url+"/ui/login", url.Values{"csrf": {m[1]}, "key": {key}})
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusSeeOther {
		page := b.get("/ui/jobs")
		if m := csrfMeta.FindStringSubmatch(page); m != nil {
			b.csrf = m[1]
		}
	}
	return b, resp
}

func (b *browser) get(path string) string {
	b.s.t.Helper()
	resp, err := b.client.Get(b.s.url + path)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return string(raw)
}

// do sends a dashboard API request; csrf adds the session's token.
func (b *browser) do(method, path string, csrf bool, hdr ...string) (int, string) {
	b.s.t.Helper()
	req, _ := http.NewRequest(method, b.s.url+path, nil)
	if csrf {
		req.Header.Set("X-CSRF-Token", b.csrf)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(raw))
}
