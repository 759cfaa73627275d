package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/upstream"
)

const bodyText = "SUBSCRIBER-BODY-TEXT" // must reach Response, never Outcome.Err

// newDeliverer returns a Deliverer allowed to reach loopback, closed with
// the test.
func newDeliverer(t *testing.T, cfg Config) *Deliverer {
	t.Helper()
	cfg.AllowPrivate = true
	if cfg.Version == "" {
		cfg.Version = "1.2.3"
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(d.CloseIdleConnections)
	return d
}

// newDelivery returns a valid delivery to url with a fresh secret.
func newDelivery(url string) Delivery {
	return Delivery{
		SubscriberID: "sub_17",
		URL:          url,
		EventID:      uuid.NewString(),
		Topic:        "order.paid",
		Version:      1,
		Body:         json.RawMessage(`{"type":"order.paid","data":{"id":42}}`),
		Secrets:      []string{NewSecret()},
	}
}

// answer returns a handler that answers with status, hdr and bodyText.
func answer(status int, hdr map[string]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, bodyText)
	}
}

func TestDeliverClassification(t *testing.T) {
	t.Parallel()
	type want struct {
		class       job.Class
		reason      job.Reason
		retryAfter  time.Duration
		retrySource string
		hints       []job.Hint
	}
	rl := func(d time.Duration, src string) want {
		return want{class: job.ClassRateLimited, retryAfter: d, retrySource: src}
	}
	transient := want{class: job.ClassTransient}
	perm := want{class: job.ClassPermanent, reason: job.ReasonPermanentError}
	tests := []struct {
		name   string
		status int
		hdr    map[string]string
		want   want
	}{
		{"200", 200, nil, want{class: job.ClassSuccess}},
		{"201", 201, nil, want{class: job.ClassSuccess}},
		{"202", 202, nil, want{class: job.ClassSuccess}},
		{"204", 204, nil, want{class: job.ClassSuccess}},
		{"429 Retry-After seconds", 429, map[string]string{"Retry-After": "7"}, rl(7*time.Second, "retry-after")},
		{"429 retry-after-ms", 429, map[string]string{"Retry-After-Ms": "1500", "Retry-After": "2"}, rl(1500*time.Millisecond, "retry-after-ms")},
		{"429 no Retry-After", 429, nil, rl(0, "")},
		{"429 invalid Retry-After", 429, map[string]string{"Retry-After": "soon"}, rl(0, "")},
		{"429 exhausted x-ratelimit", 429, map[string]string{
			"X-Ratelimit-Limit-Requests": "60", "X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "3s",
		}, want{class: job.ClassRateLimited, retryAfter: 3 * time.Second, retrySource: "x-ratelimit-reset-requests",
			hints: []job.Hint{{Limit: 60, Remaining: 0, Reset: 3 * time.Second}}}},
		{"503 Retry-After", 503, map[string]string{"Retry-After": "30"}, rl(30*time.Second, "retry-after")},
		// The subscriber's clock is years off ours: the HTTP-date counts
		// from its Date header, exactly, to the second it names.
		{"429 Retry-After HTTP-date, skewed Date", 429, map[string]string{
			"Date": "Tue, 01 Jan 2030 00:00:00 GMT", "Retry-After": "Tue, 01 Jan 2030 00:00:02 GMT",
		}, rl(2*time.Second, "retry-after")},
		{"503 Retry-After HTTP-date, skewed Date", 503, map[string]string{
			"Date": "Mon, 01 Jan 2001 00:00:00 GMT", "Retry-After": "Mon, 01 Jan 2001 00:00:05 GMT",
		}, rl(5*time.Second, "retry-after")},
		{"503 no Retry-After", 503, nil, transient},
		{"503 invalid Retry-After", 503, map[string]string{"Retry-After": "-5"}, transient},
		{"408", 408, nil, transient},
		{"500", 500, nil, transient},
		{"502", 502, nil, transient},
		{"504", 504, nil, transient},
		{"500 Retry-After", 500, map[string]string{"Retry-After": "4"}, want{class: job.ClassTransient, retryAfter: 4 * time.Second, retrySource: "retry-after"}},
		{"410", 410, nil, want{class: job.ClassPermanent, reason: job.ReasonSubscriberGone}},
		{"400", 400, nil, perm},
		{"401", 401, nil, perm},
		{"403", 403, nil, perm},
		{"404", 404, nil, perm},
		{"413", 413, nil, perm},
		{"422", 422, map[string]string{"Retry-After": "9"}, perm},
		{"301 not followed", 301, map[string]string{"Location": "http://127.0.0.1:1/elsewhere"}, perm},
		{"200 x-ratelimit hints", 200, map[string]string{
			"X-Ratelimit-Limit-Requests": "100", "X-Ratelimit-Remaining-Requests": "3", "X-Ratelimit-Reset-Requests": "20s",
		}, want{class: job.ClassSuccess, hints: []job.Hint{{Limit: 100, Remaining: 3, Reset: 20 * time.Second}}}},
		{"200 IETF RateLimit hints", 200, map[string]string{
			"RateLimit-Policy": `"default";q=50;w=60`, "RateLimit": `"default";r=10;t=30`,
		}, want{class: job.ClassSuccess, hints: []job.Hint{{Limit: 50, Remaining: 10, Reset: 30 * time.Second, Window: time.Minute}}}},
		{"200 IETF byte quota ignored", 200, map[string]string{
			"RateLimit-Policy": `"bytes";q=5000;qu="content-bytes";w=60`, "RateLimit": `"bytes";r=10;t=30`,
		}, want{class: job.ClassSuccess}},
	}
	d := newDeliverer(t, Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(answer(tt.status, tt.hdr))
			t.Cleanup(srv.Close)
			out, resp := d.Deliver(context.Background(), newDelivery(srv.URL+"/hook?token=xyz"), 1, time.Now())
			if out.Class != tt.want.class || out.Reason != tt.want.reason {
				t.Errorf("class %q reason %q, want %q %q (err %q)", out.Class, out.Reason, tt.want.class, tt.want.reason, out.Err)
			}
			if out.Status != tt.status || resp.Status != tt.status {
				t.Errorf("Outcome.Status %d Response.Status %d, want %d", out.Status, resp.Status, tt.status)
			}
			if out.RetryAfter != tt.want.retryAfter || out.RetrySource != tt.want.retrySource {
				t.Errorf("RetryAfter %v from %q, want %v from %q", out.RetryAfter, out.RetrySource, tt.want.retryAfter, tt.want.retrySource)
			}
			if !equalHints(out.Hints, tt.want.hints) {
				t.Errorf("Hints %+v, want %+v", out.Hints, tt.want.hints)
			}
			wantErr := ""
			if tt.want.class != job.ClassSuccess {
				wantErr = "subscriber answered " + strconv.Itoa(tt.status)
			}
			if out.Err != wantErr {
				t.Errorf("Err %q, want %q", out.Err, wantErr)
			}
			if tt.status != 204 && string(resp.BodyPrefix) != bodyText {
				t.Errorf("BodyPrefix %q, want %q", resp.BodyPrefix, bodyText)
			}
			for k, v := range tt.hdr {
				if resp.Header.Get(k) != v {
					t.Errorf("Response.Header[%s] = %q, want %q", k, resp.Header.Get(k), v)
				}
			}
			if resp.Duration <= 0 {
				t.Errorf("Duration %v", resp.Duration)
			}
		})
	}
}

// equalHints compares hints, allowing a second of slack in Reset for
// headers whose reset the parser measures against a clock.
func equalHints(got, want []job.Hint) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Key != w.Key || g.Limit != w.Limit || g.Remaining != w.Remaining || (g.Reset-w.Reset).Abs() > time.Second {
			return false
		}
	}
	return true
}

// captured is what a recording receiver saw.
type captured struct {
	header http.Header
	body   []byte
}

// recorder returns a loopback server that records requests and answers 204.
func recorder(t *testing.T) (*httptest.Server, <-chan captured) {
	t.Helper()
	ch := make(chan captured, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- captured{header: r.Header.Clone(), body: b}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

// noDelivery fails t, saying what, if the recorder got a request the test
// has not taken.
func noDelivery(t *testing.T, got <-chan captured, what string) {
	t.Helper()
	select {
	case c := <-got:
		t.Errorf("%s: %v", what, c.header)
	default:
	}
}

func TestDeliverRequest(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	d := newDeliverer(t, Config{Version: "1.2.3"})
	dl := newDelivery(srv.URL)
	oldS := NewSecret()
	dl.Secrets = append(dl.Secrets, oldS)
	dl.Headers = map[string]string{
		"Authorization":     "Bearer abc",
		"X-Tenant":          "acme",
		"webhook-signature": "v1,forged",
		"Webhook-Id":        "msg_forged",
		"Content-Type":      "text/plain",
		"Idempotency-Key":   "forged",
		"User-Agent":        "forged",
	}
	now := time.Now()
	out, _ := d.Deliver(context.Background(), dl, 1, now)
	if out.Class != job.ClassSuccess {
		t.Fatalf("outcome %+v", out)
	}
	c := <-got
	h := c.header
	if !bytes.Equal(c.body, dl.Body) {
		t.Errorf("body %q, want %q", c.body, dl.Body)
	}
	wantID := MessageID(dl.EventID, dl.SubscriberID, dl.Version)
	checks := map[string]string{
		"Webhook-Id":        wantID,
		"Webhook-Timestamp": strconv.FormatInt(now.Unix(), 10),
		"Idempotency-Key":   dl.EventID + ":sub_17:1",
		"Content-Type":      "application/json",
		"User-Agent":        "ratelane/1.2.3",
		"Authorization":     "Bearer abc",
		"X-Tenant":          "acme",
	}
	for k, v := range checks {
		if h.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, h.Get(k), v)
		}
	}
	if n := len(strings.Fields(h.Get(HeaderSignature))); n != 2 || len(h.Values(HeaderSignature)) != 1 {
		t.Errorf("webhook-signature %q: want two signatures in one field", h.Values(HeaderSignature))
	}
	for i, s := range dl.Secrets {
		if err := Verify([]string{s}, h, c.body, now, 0); err != nil {
			t.Errorf("Verify with secret %d: %v", i, err)
		}
		wh, _ := standardwebhooks.NewWebhook(s)
		if err := wh.Verify(c.body, h); err != nil {
			t.Errorf("reference verifier with secret %d: %v", i, err)
		}
	}
}

// TestDeliverRetryIsStable checks that a retry carries the same webhook-id
// and Idempotency-Key with a fresh timestamp and signature, and that a new
// Version is a new message.
func TestDeliverRetryIsStable(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	d := newDeliverer(t, Config{})
	dl := newDelivery(srv.URL)
	t0 := time.Now()
	d.Deliver(context.Background(), dl, 1, t0)
	d.Deliver(context.Background(), dl, 2, t0.Add(90*time.Second))
	dl.Version = 2
	d.Deliver(context.Background(), dl, 1, t0)
	a, b, c := (<-got).header, (<-got).header, (<-got).header
	if a.Get(HeaderID) != b.Get(HeaderID) || a.Get("Idempotency-Key") != b.Get("Idempotency-Key") {
		t.Errorf("retry changed ids: %q/%q vs %q/%q", a.Get(HeaderID), a.Get("Idempotency-Key"), b.Get(HeaderID), b.Get("Idempotency-Key"))
	}
	if a.Get(HeaderTimestamp) == b.Get(HeaderTimestamp) || a.Get(HeaderSignature) == b.Get(HeaderSignature) {
		t.Error("retry reused the timestamp or signature")
	}
	if c.Get(HeaderID) == a.Get(HeaderID) || c.Get("Idempotency-Key") == a.Get("Idempotency-Key") {
		t.Error("a new version kept the old ids")
	}
}

func TestMessageID(t *testing.T) {
	t.Parallel()
	id := MessageID("evt_1", "sub_1", 1)
	if !strings.HasPrefix(id, "msg_") || len(id) != 4+32 {
		t.Errorf("MessageID = %q, want msg_ and 32 hex digits", id)
	}
	if id != MessageID("evt_1", "sub_1", 1) {
		t.Error("MessageID is not deterministic")
	}
	distinct := map[string]bool{}
	for _, in := range [][3]string{{"a:b", "c", "1"}, {"a", "b:c", "1"}, {"ab", "c", "1"}, {"a", "bc", "1"}, {"a", "bc", "2"}} {
		v, _ := strconv.ParseInt(in[2], 10, 64)
		distinct[MessageID(in[0], in[1], v)] = true
	}
	if len(distinct) != 5 {
		t.Errorf("MessageID collided on separator-shifted inputs: %d distinct of 5", len(distinct))
	}
}

func TestDeliverResponseIsBounded(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=secret")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, big)
	}))
	t.Cleanup(srv.Close)
	d := newDeliverer(t, Config{})
	out, resp := d.Deliver(context.Background(), newDelivery(srv.URL), 1, time.Now())
	if out.Class != job.ClassTransient || out.Err != "subscriber answered 500" {
		t.Errorf("outcome %+v", out)
	}
	if len(resp.BodyPrefix) != MaxBodyPrefix || !resp.BodyTruncated {
		t.Errorf("BodyPrefix %d bytes, truncated %v; want %d, true", len(resp.BodyPrefix), resp.BodyTruncated, MaxBodyPrefix)
	}
	if resp.Header.Get("Set-Cookie") != "" {
		t.Error("Response kept Set-Cookie")
	}
}

// stalling returns a loopback server that never answers: its handler
// returns when the client goes away or the test ends.
func stalling(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // lets the server notice a closed connection
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	return srv
}

func TestDeliverTransportFailures(t *testing.T) {
	t.Parallel()
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		srv := stalling(t)
		d := newDeliverer(t, Config{Timeout: 50 * time.Millisecond})
		out, resp := d.Deliver(context.Background(), newDelivery(srv.URL), 1, time.Now())
		if out.Class != job.ClassTransient || out.Err != "timeout waiting for subscriber" || out.Status != 0 || resp.Status != 0 {
			t.Errorf("outcome %+v, response status %d", out, resp.Status)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		t.Parallel()
		srv := stalling(t)
		d := newDeliverer(t, Config{})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		out, _ := d.Deliver(ctx, newDelivery(srv.URL), 1, time.Now())
		if out.Class != job.ClassTransient || out.Err != "timeout waiting for subscriber" {
			t.Errorf("outcome %+v", out)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		srv, _ := recorder(t)
		d := newDeliverer(t, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		out, _ := d.Deliver(ctx, newDelivery(srv.URL), 1, time.Now())
		if out.Class != job.ClassTransient || out.Err != "delivery cancelled" {
			t.Errorf("outcome %+v", out)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		d := newDeliverer(t, Config{})
		out, _ := d.Deliver(context.Background(), newDelivery("http://"+addr), 1, time.Now())
		if out.Class != job.ClassTransient || out.Err != "connection refused" {
			t.Errorf("outcome %+v", out)
		}
	})
	t.Run("connection closed", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		t.Cleanup(srv.Close)
		d := newDeliverer(t, Config{})
		out, _ := d.Deliver(context.Background(), newDelivery(srv.URL), 1, time.Now())
		if out.Class != job.ClassTransient || out.Err != "connection closed by subscriber" {
			t.Errorf("outcome %+v", out)
		}
	})
	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewUnstartedServer(answer(200, nil))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake error is expected
		srv.StartTLS()                                   // self-signed: not trusted
		t.Cleanup(srv.Close)
		d := newDeliverer(t, Config{})
		out, _ := d.Deliver(context.Background(), newDelivery(srv.URL), 1, time.Now())
		if out.Class != job.ClassTransient || out.Err != "tls handshake failed" {
			t.Errorf("outcome %+v", out)
		}
	})
}

// TestDeliverSSRFRefused uses the default, guarded client against a real
// loopback server that must never be reached.
func TestDeliverSSRFRefused(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.CloseIdleConnections)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, u := range []string{srv.URL, "http://localhost:" + port, "http://[::ffff:127.0.0.1]:" + port, "http://169.254.169.254/latest/meta-data/"} {
		out, _ := d.Deliver(context.Background(), newDelivery(u), 1, time.Now())
		if out.Class != job.ClassPermanent || out.Reason != job.ReasonPermanentError || out.Err != "destination address not allowed" {
			t.Errorf("%s: outcome %+v", u, out)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 0 {
		t.Errorf("guarded server was reached %d times", hits)
	}
}

func TestDeliverInvalid(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	d := newDeliverer(t, Config{})
	tests := []struct {
		name   string
		modify func(*Delivery)
		err    string
	}{
		{"ftp url", func(dl *Delivery) { dl.URL = "ftp://example.com/x" }, "invalid subscriber url"},
		{"relative url", func(dl *Delivery) { dl.URL = "/hooks" }, "invalid subscriber url"},
		{"garbage url", func(dl *Delivery) { dl.URL = "http://[::1" }, "invalid subscriber url"},
		{"no secret", func(dl *Delivery) { dl.Secrets = nil }, "no signing secret"},
		{"bad secret", func(dl *Delivery) { dl.Secrets = []string{"whsec_short"} }, "invalid signing secret"},
		{"body not JSON", func(dl *Delivery) { dl.Body = json.RawMessage("not json") }, "webhook body is not valid JSON"},
		{"empty body", func(dl *Delivery) { dl.Body = nil }, "webhook body is not valid JSON"},
		{"no event id", func(dl *Delivery) { dl.EventID = "" }, "delivery without event or subscriber id"},
		{"header injection", func(dl *Delivery) { dl.Headers = map[string]string{"X-A": "b\r\nX-Evil: 1"} }, "invalid subscriber header"},
		{"bad header name", func(dl *Delivery) { dl.Headers = map[string]string{"X A": "b"} }, "invalid subscriber header"},
	}
	for _, tt := range tests {
		dl := newDelivery(srv.URL)
		tt.modify(&dl)
		out, _ := d.Deliver(context.Background(), dl, 1, time.Now())
		if out.Class != job.ClassPermanent || out.Err != tt.err {
			t.Errorf("%s: outcome %+v, want permanent %q", tt.name, out, tt.err)
		}
	}
	noDelivery(t, got, "an invalid delivery was sent")
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Version: "1 2"}, {Version: "v\n"}, {Timeout: -time.Second}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// TestDeliverUpstream runs deliveries against the upstream simulator, which
// verifies signatures itself and counts duplicate webhook-ids.
func TestDeliverUpstream(t *testing.T) {
	t.Parallel()
	oldS, newS := NewSecret(), NewSecret()
	sim, err := upstream.New(upstream.Config{Routes: map[string]upstream.RouteConfig{
		"rotating": {Secrets: []string{oldS}}, // the receiver has not switched yet
		"switched": {Secrets: []string{newS}},
		"limited":  {Rate: 0.01, Burst: 1, Headers: upstream.HeaderStyleXRateLimit},
		"gone":     {StatusOverride: 410},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	d := newDeliverer(t, Config{})
	now := time.Now()
	secrets := Secrets{Current: oldS}.Rotate(newS, now, time.Hour).Active(now)

	for _, route := range []string{"rotating", "switched"} {
		dl := newDelivery(sim.RouteURL(route))
		dl.Secrets = secrets
		for attempt := 1; attempt <= 2; attempt++ { // the second is a retry after a lost answer
			if out, resp := d.Deliver(context.Background(), dl, attempt, time.Now()); out.Class != job.ClassSuccess {
				t.Fatalf("%s attempt %d: outcome %+v body %q", route, attempt, out, resp.BodyPrefix)
			}
		}
		dl.Secrets = []string{NewSecret()}
		dl.Version++
		if out, _ := d.Deliver(context.Background(), dl, 1, time.Now()); out.Class != job.ClassPermanent || out.Status != 401 {
			t.Errorf("%s with a wrong secret: outcome %+v", route, out)
		}
	}
	rep := sim.Stats()
	for _, route := range []string{"rotating", "switched"} {
		r := rep.Routes[route]
		if r.Accepted != 2 || r.Duplicates != 1 || r.UniqueIDs != 1 || r.BadSignatures != 1 {
			t.Errorf("%s: accepted %d duplicates %d unique %d bad signatures %d; want 2 1 1 1",
				route, r.Accepted, r.Duplicates, r.UniqueIDs, r.BadSignatures)
		}
	}

	dl := newDelivery(sim.RouteURL("limited"))
	first, _ := d.Deliver(context.Background(), dl, 1, time.Now())
	if first.Class != job.ClassSuccess || len(first.Hints) != 1 || first.Hints[0].Remaining != 0 {
		t.Errorf("limited first: outcome %+v", first)
	}
	second, _ := d.Deliver(context.Background(), dl, 2, time.Now())
	if second.Class != job.ClassRateLimited || second.Status != 429 || second.RetryAfter < time.Second || second.RetrySource != "retry-after" {
		t.Errorf("limited second: outcome %+v", second)
	}

	gone, _ := d.Deliver(context.Background(), newDelivery(sim.RouteURL("gone")), 1, time.Now())
	if gone.Class != job.ClassPermanent || gone.Reason != job.ReasonSubscriberGone {
		t.Errorf("gone: outcome %+v", gone)
	}
}

// newServer starts a loopback server for h, closed with the test, and
// returns its URL.
func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
