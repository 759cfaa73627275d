package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the tests' clock origin.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Fixed API keys of the in-test Authenticator.
const (
	adminKey   = "rl_admin_secret"
	acmeKey    = "rl_acme_secret"
	globexKey  = "rl_globex_secret"
	euKey      = "rl_eu_secret"
	workerKey  = "rl_worker_secret"
	revokedKey = "rl_revoked_secret"
)

// fakeKeys is a trivial Authenticator and KeyManager with fixed keys.
type fakeKeys struct {
	mu      sync.Mutex
	keys    map[string]auth.Principal
	infos   map[string]*KeyInfo
	revoked map[string]bool
	n       int
}

func newFakeKeys() *fakeKeys {
	k := &fakeKeys{keys: map[string]auth.Principal{}, infos: map[string]*KeyInfo{}, revoked: map[string]bool{}}
	add := func(secret string, p auth.Principal) {
		k.keys[secret] = p
		k.infos[p.KeyID] = &KeyInfo{ID: p.KeyID, Tenant: p.Tenant, Role: p.Role, Regions: p.Regions, CreatedAt: t0}
	}
	add(adminKey, auth.Principal{KeyID: "k_admin", Tenant: "ops", Role: auth.RoleAdmin})
	add(acmeKey, auth.Principal{KeyID: "k_acme", Tenant: "acme", Role: auth.RoleProducer})
	add(globexKey, auth.Principal{KeyID: "k_globex", Tenant: "globex", Role: auth.RoleProducer})
	add(euKey, auth.Principal{KeyID: "k_eu", Tenant: "acme", Role: auth.RoleProducer, Regions: []string{"eu"}})
	add(workerKey, auth.Principal{KeyID: "k_worker", Tenant: "acme", Role: auth.RoleWorker})
	add(revokedKey, auth.Principal{KeyID: "k_revoked", Tenant: "acme", Role: auth.RoleProducer})
	k.revoked["k_revoked"] = true
	return k
}

func (k *fakeKeys) Authenticate(_ context.Context, bearer string) (auth.Principal, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.keys[bearer]
	switch {
	case !ok:
		return auth.Principal{}, fmt.Errorf("look up key: %w", ErrUnknownKey)
	case k.revoked[p.KeyID]:
		return auth.Principal{}, ErrRevokedKey
	}
	return p, nil
}

func (k *fakeKeys) Create(_ context.Context, tenant string, role auth.Role, regions []string, name string) (string, KeyInfo, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.n++
	id := fmt.Sprintf("k_new%d", k.n)
	secret := "rl_" + id + "_secret"
	k.keys[secret] = auth.Principal{KeyID: id, Tenant: tenant, Role: role, Regions: regions}
	info := &KeyInfo{ID: id, Name: name, Tenant: tenant, Role: role, Regions: regions, CreatedAt: t0}
	k.infos[id] = info
	return secret, *info, nil
}

func (k *fakeKeys) List(context.Context) ([]KeyInfo, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []KeyInfo
	for _, i := range k.infos {
		out = append(out, *i)
	}
	return out, nil
}

func (k *fakeKeys) Revoke(_ context.Context, id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	info, ok := k.infos[id]
	if !ok {
		return ErrUnknownKey
	}
	k.revoked[id], info.RevokedAt = true, t0
	return nil
}

// env is one test's setup: real SQLite stores for us and eu, a server on
// loopback and a controllable clock.
type env struct {
	t      *testing.T
	srv    *Server
	hs     *httptest.Server
	stores map[string]store.Store
	clock  *testkit.Clock
	keys   *fakeKeys
}

func newEnv(t *testing.T, tweak ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, stores: map[string]store.Store{}, clock: testkit.NewClock(t0), keys: newFakeKeys()}
	dir := t.TempDir()
	for _, region := range []string{"us", "eu"} {
		st, err := sqlite.Open(context.Background(), sqlite.Config{
			Path: filepath.Join(dir, region+".db"), Region: region, Synchronous: sqlite.SyncNormal,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		e.stores[region] = st
	}
	cfg := Config{Regions: e.stores, Auth: e.keys, Keys: e.keys, Now: e.clock.Now, Version: "test", RequestRate: -1}
	for _, f := range tweak {
		f(&cfg)
	}
	// Every region needs its one writer (the engine's, in production); a
	// test that brings none gets one per region here.
	jobs := map[string]*engine.Jobs{}
	for name, st := range cfg.Regions {
		jobs[name] = cfg.Jobs[name]
		if jobs[name] == nil {
			w, err := engine.NewJobs(engine.JobsConfig{Store: st, InteractiveBudget: cfg.InteractiveBudget, Now: cfg.Now, Logger: cfg.Logger})
			if err != nil {
				t.Fatal(err)
			}
			jobs[name] = w
		}
	}
	cfg.Jobs = jobs
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.hs = httptest.NewServer(srv.Handler())
	t.Cleanup(e.hs.Close)
	return e
}

// response is one answer, read fully.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// do sends a request. body may be nil, a string (sent as is) or a value
// marshalled to JSON; a body is labelled application/json unless a
// Content-Type is in hdr.
func (e *env) do(method, path, key string, body any, hdr ...string) response {
	e.t.Helper()
	resp, raw := testkit.Call(e.t, e.hs.Client(), method, e.hs.URL+path, key, body, hdr...)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// want fails unless the response has the status.
func (r response) want(t *testing.T, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

// wantProblem fails unless the response is a problem+json with the status
// and the problem slug.
func (r response) wantProblem(t *testing.T, status int, slug string) Problem {
	t.Helper()
	r.want(t, status)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, r.body)
	}
	var p Problem
	r.json(t, &p)
	if p.Type != problemBase+slug || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type %s status %d with title and detail", p, slug, status)
	}
	return p
}

// jobBody is a valid create request; tweak it per test.
func jobBody(kind, region string, keys ...string) map[string]any {
	if len(keys) == 0 {
		keys = []string{"smtp:default"}
	}
	return map[string]any{"kind": kind, "region": region, "limit_keys": keys, "payload": map[string]any{"to": "ada@example.com"}}
}

// createJob enqueues a job and returns it.
func (e *env) createJob(key string, body map[string]any) jobView {
	e.t.Helper()
	var v jobView
	e.do("POST", "/v1/jobs", key, body).want(e.t, http.StatusCreated).json(e.t, &v)
	return v
}

// lease leases jobs of the kinds over the API as the worker.
func (e *env) lease(region string, max int, kinds ...string) []jobView {
	e.t.Helper()
	var out leaseResponse
	e.do("POST", "/v1/leases", workerKey, map[string]any{"region": region, "kinds": kinds, "max": max, "lease_seconds": 60}).
		want(e.t, http.StatusOK).json(e.t, &out)
	return out.Jobs
}

// getJob reads a job as the admin.
func (e *env) getJob(id string) jobView {
	e.t.Helper()
	var v jobView
	e.do("GET", "/v1/jobs/"+id, adminKey, nil).want(e.t, http.StatusOK).json(e.t, &v)
	return v
}
