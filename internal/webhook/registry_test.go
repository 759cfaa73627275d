package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/postgres/pgtest"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/testkit"
)

func newRegistry(t *testing.T, tweak ...func(*RegistryConfig)) (*Registry, store.Store, *testkit.Clock) {
	t.Helper()
	return newRegistryOn(t, "sqlite", tweak...)
}

// drivers are the stores that the tests of a subscriber's key run on
// (registryOn): SQLite always, PostgreSQL when testkit.PostgresURLEnv
// names one. A Put's save and its key are two transactions on either.
func drivers() []string {
	if os.Getenv(testkit.PostgresURLEnv) != "" {
		return []string{"sqlite", "postgres"}
	}
	return []string{"sqlite"}
}

// eachDriver runs test as a parallel subtest per store of drivers().
func eachDriver(t *testing.T, test func(t *testing.T, driver string)) {
	for _, driver := range drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, driver)
		})
	}
}

// newRegistryOn is newRegistry on a store of driver ("sqlite", or
// "postgres" on a schema of its own, dropped when the test ends).
func newRegistryOn(t *testing.T, driver string, tweak ...func(*RegistryConfig)) (*Registry, store.Store, *testkit.Clock) {
	t.Helper()
	var st store.Store
	if driver == "postgres" {
		url, schema := testkit.PostgresSchema(t, "rl_webhook_")
		st = pgtest.Open(t, url, schema, 8)
	} else {
		sq, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us", Synchronous: sqlite.SyncNormal})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sq.Close() })
		st = sq
	}
	c := testkit.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	cfg := RegistryConfig{Store: st, Now: c.Now, CacheFor: -1}
	for _, f := range tweak {
		f(&cfg)
	}
	if cfg.Jobs == nil {
		cfg.Jobs = newWriter(t, st, c.Now)
	}
	r, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, st, c
}

// newWriter returns a writer of st's job state, as the region's engine
// would hand the registry.
func newWriter(t *testing.T, st store.Store, now func() time.Time) *engine.Jobs {
	t.Helper()
	w, err := engine.NewJobs(engine.JobsConfig{Store: st, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// node is another node's registry over st: its own writer, no cache.
func node(t *testing.T, st store.Store, now func() time.Time) *Registry {
	t.Helper()
	r, err := NewRegistry(RegistryConfig{Store: st, Jobs: newWriter(t, st, now), Now: now, CacheFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A registry takes the region's one writer of job state; it refuses to
// start without one, or with another store's, rather than make a second
// writer of the region (it used to make one when none was passed).
func TestRegistryNeedsTheRegionsWriter(t *testing.T) {
	t.Parallel()
	_, st, c := newRegistry(t)
	if _, err := NewRegistry(RegistryConfig{Store: st, Now: c.Now}); err == nil || !strings.Contains(err.Error(), "Jobs is required") {
		t.Fatalf("NewRegistry without Jobs = %v, want the writer required", err)
	}
	_, other, _ := newRegistry(t)
	if _, err := NewRegistry(RegistryConfig{Store: st, Jobs: newWriter(t, other, c.Now), Now: c.Now}); err == nil || !strings.Contains(err.Error(), "not Store") {
		t.Fatalf("NewRegistry with another store's writer = %v, want refused", err)
	}
}

func TestRegistryPutValidates(t *testing.T) {
	t.Parallel()
	r, _, _ := newRegistry(t)
	_, _, _, err := r.Put(context.Background(), SubscriberSpec{ID: "bad id", URL: "ftp://x", Topics: nil,
		Rate: &Rate{Limit: 0}, Secret: "whsec_short", Headers: map[string]string{"X": "a\nb"}})
	var ve *job.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a ValidationError", err)
	}
	fields := map[string]bool{}
	for _, f := range ve.Fields {
		fields[f.Field] = true
	}
	for _, want := range []string{"id", "url", "topics", "rate.limit", "secret", "headers"} {
		if !fields[want] {
			t.Errorf("no violation for %s in %v", want, ve.Fields)
		}
	}
}

// TestRegistryPutRefusesMetadataURLs: creating a subscriber refuses, naming
// url, a URL whose host is a literal that can never be delivered to
// (link-local, cloud metadata, unspecified, a non-canonical numeric
// spelling), whatever AllowPrivate says; loopback and private literals and
// hostnames are accepted here and decided at dial time.
func TestRegistryPutRefusesMetadataURLs(t *testing.T) {
	t.Parallel()
	r, _, _ := newRegistry(t)
	ctx := context.Background()
	for i, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/",
		"http://[fd00:ec2::254]/", "http://100.100.100.200/", "http://0.0.0.0:8080/", "http://2852039166/", "http://0x7f000001/"} {
		_, _, _, err := r.Put(ctx, SubscriberSpec{ID: fmt.Sprintf("m%d", i), URL: u, Topics: []string{"t"}})
		var ve *job.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "url" {
			t.Errorf("Put(%s) = %v, want a validation error naming url", u, err)
		}
		if _, err := r.Get(ctx, fmt.Sprintf("m%d", i)); err == nil {
			t.Errorf("Put(%s) was refused but the subscriber exists", u)
		}
	}
	for i, u := range []string{"http://127.0.0.1:9/h", "http://10.0.0.1/h", "https://hooks.example.com/h"} {
		if _, _, _, err := r.Put(ctx, SubscriberSpec{ID: fmt.Sprintf("ok%d", i), URL: u, Topics: []string{"t"}}); err != nil {
			t.Errorf("Put(%s): %v, want it accepted (decided at dial time)", u, err)
		}
	}
}

// TestRegistryPutConfiguresLimitKey: a subscriber's declared allowance
// becomes its limit key: by default a sliding window of the declared limit
// per period (with the jitter guard) that never overruns it, plus a bucket
// less headroom with half the burst; shape "bucket" keeps the bucket alone.
func TestRegistryPutConfiguresLimitKey(t *testing.T) {
	t.Parallel()
	r, st, _ := newRegistry(t)
	rec, secret, created, err := r.Put(context.Background(), SubscriberSpec{ID: "s1", URL: "https://example.com/h",
		Topics: []string{"a"}, Rate: &Rate{Limit: 600, Period: Period(time.Minute), Burst: 10}, Concurrency: 4})
	if err != nil || !created || !strings.HasPrefix(secret, SecretPrefix) || rec.Secrets.Current != secret {
		t.Fatalf("put = %+v, %q, %v, %v", rec, secret, created, err)
	}
	k, err := st.GetLimit(context.Background(), "subscriber:s1")
	if err != nil || k.Rate != 10*(1-DefaultHeadroom) || k.Burst != 5 || k.Concurrency != 4 {
		t.Fatalf("limit key = %+v, %v; want 9.7/s, burst 5, concurrency 4", k, err)
	}
	if len(k.Windows) != 1 || k.Windows[0].Limit != 600 || k.Windows[0].Period != time.Minute {
		t.Fatalf("limit key windows = %+v; want 600 per 1m, exactly", k.Windows)
	}
	if rec.Rate.Shape != ShapeWindow {
		t.Fatalf("stored shape %q, want the window default", rec.Rate.Shape)
	}
	if _, _, _, err := r.Put(context.Background(), SubscriberSpec{ID: "b1", URL: "https://example.com/h", Topics: []string{"a"},
		Rate: &Rate{Shape: ShapeBucket, Limit: 20, Burst: 10}}); err != nil {
		t.Fatal(err)
	}
	if k, err := st.GetLimit(context.Background(), "subscriber:b1"); err != nil || len(k.Windows) != 0 || k.Burst != 5 {
		t.Fatalf("bucket subscriber key = %+v, %v; want a bucket alone", k, err)
	}
	if _, _, _, err := r.Put(context.Background(), SubscriberSpec{ID: "x1", URL: "https://example.com/h", Topics: []string{"a"},
		Rate: &Rate{Shape: "leaky", Limit: 20}}); err == nil || !strings.Contains(err.Error(), "rate.shape") {
		t.Fatalf("unknown shape: %v", err)
	}
	// A fixed window: the guarded aligned window of the declared limit and,
	// with the default burst (the whole limit), no bucket.
	if _, _, _, err := r.Put(context.Background(), SubscriberSpec{ID: "f1", URL: "https://example.com/h", Topics: []string{"a"},
		Rate: &Rate{Window: WindowFixed, Limit: 60, Period: Period(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	k, err = st.GetLimit(context.Background(), "subscriber:f1")
	if err != nil || len(k.Windows) != 1 || !k.Windows[0].Fixed || k.Windows[0].Limit != 60 || k.Windows[0].Period != time.Minute ||
		k.Windows[0].Guard != admission.JitterGuard(time.Minute, DefaultHeadroom) || k.Rate != 0 {
		t.Fatalf("fixed-window subscriber key = %+v, %v; want 60 per aligned minute (guarded) and no bucket", k, err)
	}
	for _, bad := range []Rate{{Window: "tumbling", Limit: 5}, {Shape: ShapeBucket, Window: WindowFixed, Limit: 5}} {
		if _, _, _, err := r.Put(context.Background(), SubscriberSpec{ID: "x2", URL: "https://example.com/h", Topics: []string{"a"},
			Rate: &bad}); err == nil || !strings.Contains(err.Error(), "rate.window") {
			t.Fatalf("rate %+v: %v, want a rate.window error", bad, err)
		}
	}
	rec2, secret2, created2, err := r.Put(context.Background(), SubscriberSpec{ID: "s1", URL: "https://example.com/h2", Topics: []string{"a"}})
	if err != nil || created2 || secret2 != "" || rec2.Secrets.Current != secret || !rec2.CreatedAt.Equal(rec.CreatedAt) {
		t.Fatalf("update = %+v, %q, %v, %v; want the secret kept", rec2, secret2, created2, err)
	}
	b, _ := json.Marshal(rec2)
	if strings.Contains(string(b), secret) {
		t.Fatal("a Record's JSON shows its secret")
	}
}

func TestRegistryRotateAndDisable(t *testing.T) {
	t.Parallel()
	r, _, c := newRegistry(t)
	_, old, _, _ := r.Put(context.Background(), SubscriberSpec{ID: "s", URL: "https://example.com/h", Topics: []string{"a"}})
	rec, next, err := r.RotateSecret(context.Background(), "s", time.Hour)
	if err != nil || next == old {
		t.Fatal(err)
	}
	if got := rec.Secrets.Active(c.Now()); len(got) != 2 || got[0] != next || got[1] != old {
		t.Fatalf("active secrets in the window = %d, want new and old", len(got))
	}
	if got := rec.Secrets.Active(c.Now().Add(2 * time.Hour)); len(got) != 1 {
		t.Fatalf("active secrets after the window = %d, want 1", len(got))
	}
	rec, err = r.Disable(context.Background(), "s", "maintenance")
	if err != nil || rec.Enabled || rec.DisabledReason != "maintenance" {
		t.Fatalf("disable = %+v, %v", rec, err)
	}
	on := true
	rec, _, _, err = r.Put(context.Background(), SubscriberSpec{ID: "s", URL: "https://example.com/h", Topics: []string{"a"}, Enabled: &on})
	if err != nil || !rec.Enabled || rec.DisabledReason != "" {
		t.Fatalf("re-enable = %+v, %v", rec, err)
	}
	if _, err := r.Get(context.Background(), "nope"); !errors.Is(err, ErrSubscriberNotFound) || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown subscriber: %v", err)
	}
}

// TestPublishFansOut: one job per enabled subscriber of the topic and
// tenant, with the documented keys; versions sort numerically.
func TestPublishFansOut(t *testing.T) {
	t.Parallel()
	r, _, _ := newRegistry(t)
	ctx := context.Background()
	for _, s := range []SubscriberSpec{
		{ID: "a", URL: "https://a.example/h", Topics: []string{"order.paid"}},
		{ID: "b", URL: "https://b.example/h", Topics: []string{"*"}},
		{ID: "c", URL: "https://c.example/h", Topics: []string{"other"}},
		{ID: "d", URL: "https://d.example/h", Topics: []string{"order.paid"}, Tenant: "globex"},
	} {
		if _, _, _, err := r.Put(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Disable(ctx, "b", "off"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int64{10, 2} {
		res, err := r.Publish(ctx, Event{Topic: "order.paid", ID: "o-1", Version: v, Payload: json.RawMessage(`{"x":1}`)})
		if err != nil || res.Created != 1 || res.Deliveries[0].SubscriberID != "a" {
			t.Fatalf("publish v%d = %+v, %v", v, res, err)
		}
	}
	ds, err := r.EventDeliveries(ctx, "", "o-1", "", 0)
	if err != nil || len(ds) != 2 || ds[0].Version != 10 || ds[1].Version != 2 {
		t.Fatalf("event deliveries = %+v, %v (creation order)", ds, err)
	}
	j, _ := r.st.Get(ctx, ds[1].ID)
	if j.IdempotencyKey != "o-1:a:2" || j.LimitKeys[0] != "subscriber:a" || j.Lane != job.LaneBatch || j.Kind != Kind {
		t.Fatalf("job = %+v", j)
	}
	if _, err := r.EventDeliveries(ctx, "", "o-2", "", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown event: %v", err)
	}
	if _, err := r.Publish(ctx, Event{Topic: "*", ID: "a/b", Payload: json.RawMessage(`null`)}); err == nil {
		t.Fatal("an invalid event was published")
	}
}

// Two nodes' Publishes of one event version, the second landing between
// the first's insert and its document write with a subscriber the first
// did not see: the event's document lists both deliveries, and a repeat
// Publish answers both. The document used to be written from the
// writer's own insert, unconditionally, so the first node's late write
// replaced the other's and the second subscriber's delivery (which runs)
// vanished from GET /v1/events/{id}/deliveries and from repeats.
func TestConcurrentPublishesKeepEveryDelivery(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		st, hs, c := hooked(t, driver)
		a, b := node(t, hs, c.Now), node(t, st, c.Now)
		ev := Event{Topic: "t", ID: "e1", Version: 1, Payload: json.RawMessage(`{}`)}
		if _, _, _, err := b.Put(ctx, SubscriberSpec{ID: "x", URL: "https://x.example/h", Topics: []string{"t"}}); err != nil {
			t.Fatal(err)
		}
		var second PublishResult
		hs.onEvent = func() error { // before a's document write
			if _, _, _, err := b.Put(ctx, SubscriberSpec{ID: "z", URL: "https://z.example/h", Topics: []string{"t"}}); err != nil {
				return err
			}
			var err error
			second, err = b.Publish(ctx, ev)
			return err
		}
		first, err := a.Publish(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if hs.onEvent != nil || len(first.Deliveries) != 1 || len(second.Deliveries) != 2 || second.Existing {
			t.Fatalf("first %+v, second %+v: want the second Publish inside the first, with one more subscriber", first, second)
		}
		subs := func(ds []DeliveryInfo) []string {
			var ids []string
			for _, d := range ds {
				ids = append(ids, d.SubscriberID)
			}
			slices.Sort(ids)
			return ids
		}
		ds, err := a.EventDeliveries(ctx, "", "e1", "", 0)
		if err != nil || !slices.Equal(subs(ds), []string{"x", "z"}) {
			t.Fatalf("event deliveries to %v, %v; want x and z", subs(ds), err)
		}
		again, err := a.Publish(ctx, ev)
		if err != nil || !again.Existing || !slices.Equal(subs(again.Deliveries), []string{"x", "z"}) {
			t.Fatalf("a repeat Publish answered %+v, %v; want the existing deliveries to x and z", again, err)
		}
	})
}

// TestHandlerRecordsResponses: a success keeps the status and timing as
// the result, never the receiver's body or headers (a producer reads the
// result); a 410 disables the subscriber and keeps the bounded answer as
// an object only operators read.
func TestHandlerRecordsResponses(t *testing.T) {
	t.Parallel()
	const canary = "receiver-canary-4b1d"
	status := atomic.Int64{}
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "https://internal.example/"+canary)
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(`{"ok":true,"secret":"` + canary + `"}`))
	}))
	defer srv.Close()
	r, st, _ := newRegistry(t)
	ctx := context.Background()
	if _, _, _, err := r.Put(ctx, SubscriberSpec{ID: "s", URL: srv.URL, Topics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.CloseIdleConnections()
	handle := r.Handler(d)
	run := func(id string) (job.Outcome, string) {
		res, err := r.Publish(ctx, Event{Topic: "t", ID: id, Payload: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		j, _ := st.Get(ctx, res.Deliveries[0].ID)
		return handle(ctx, j), j.ID
	}
	out, _ := run("e1")
	var res Result
	if err := json.Unmarshal(out.Result, &res); out.Class != job.ClassSuccess || err != nil || res.Status != 200 || res.At.IsZero() {
		t.Fatalf("success outcome %+v, result %s", out, out.Result)
	}
	if strings.Contains(string(out.Result), canary) || strings.Contains(string(out.Result), "header") ||
		strings.Contains(string(out.Result), "body") {
		t.Fatalf("the result of a delivery keeps the receiver's answer: %s", out.Result)
	}
	status.Store(410)
	out, id := run("e2")
	if out.Reason != job.ReasonSubscriberGone || strings.Contains(string(out.Result)+out.Err, canary) {
		t.Fatalf("410 outcome %+v", out)
	}
	if rec, _ := r.Get(ctx, "s"); rec.Enabled {
		t.Fatal("a 410 left the subscriber enabled")
	}
	rr, err := r.LastFailedResponse(ctx, id)
	if err != nil || rr.Status != 410 || !strings.Contains(rr.Body, canary) || len(rr.Body) > MaxBodyPrefix {
		t.Fatalf("last failed response %+v, %v; want the bounded 410 answer for operators", rr, err)
	}
}

// TestHandlerRefusesForeignSubscriber is the handler's defence in depth:
// a delivery job that names a subscriber of another tenant or region (a
// forged row, as a bug in ratelane's own paths would insert) ends
// permanent, and the receiver is never called.
func TestHandlerRefusesForeignSubscriber(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()
	r, st, c := newRegistry(t)
	ctx := context.Background()
	if _, _, _, err := r.Put(ctx, SubscriberSpec{ID: "victim", Tenant: "acme", URL: srv.URL, Topics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{AllowPrivate: true, Directory: r})
	if err != nil {
		t.Fatal(err)
	}
	defer d.CloseIdleConnections()
	payload := json.RawMessage(`{"subscriber_id":"victim","event_id":"e1","body":{"steal":true}}`)
	for name, forged := range map[string]*job.Job{
		"other tenant": {Kind: Kind, Region: "us", Tenant: "globex", LimitKeys: []string{"globex:own"}, Payload: payload},
		"other region": {Kind: Kind, Region: "eu", Tenant: "acme", LimitKeys: []string{LimitKey("victim")}, Payload: payload},
	} {
		forged.Prepare(name, c.Now(), 0, false)
		if forged.Region == "us" {
			// Inserted through the internal path, as a bug would.
			if _, err := st.Insert(ctx, []*job.Job{forged}, admission.Config{}); err != nil {
				t.Fatal(err)
			}
		}
		for handler, handle := range map[string]func(context.Context, *job.Job) job.Outcome{
			"Registry.Handler": r.Handler(d), "Deliverer.Handle": d.Handle,
		} {
			out := handle(ctx, forged)
			if out.Class != job.ClassPermanent || out.Reason != job.ReasonPermanentError || !strings.Contains(out.Err, "another") {
				t.Errorf("%s, %s: outcome %+v, want permanent_error naming the mismatch", name, handler, out)
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the receiver was called %d times for forged deliveries", n)
	}
	if rec, _ := r.Get(ctx, "victim"); !rec.Health.FailingSince.IsZero() || !rec.Enabled {
		t.Fatalf("a forged delivery changed the victim's health: %+v", rec.Health)
	}
}
