package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// memDirectory is an in-memory Directory.
type memDirectory struct {
	mu   sync.Mutex
	subs map[string]Subscriber
	err  error // returned for every lookup when set
}

func (m *memDirectory) Subscriber(_ context.Context, id string) (Subscriber, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return Subscriber{}, m.err
	}
	s, ok := m.subs[id]
	if !ok {
		return Subscriber{}, ErrSubscriberNotFound
	}
	return s, nil
}

func webhookJob(t *testing.T, p Payload) *job.Job {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return &job.Job{ID: "job_1", Kind: Kind, Region: "eu", Attempt: 1, Payload: raw}
}

func TestHandle(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	oldS, newS := NewSecret(), NewSecret()
	rotating := Secrets{Current: oldS}.Rotate(newS, t0, time.Hour)
	dir := &memDirectory{subs: map[string]Subscriber{
		"sub_ok":      {ID: "sub_ok", URL: srv.URL, Region: "eu", Secrets: rotating, Enabled: true, Headers: map[string]string{"X-Tenant": "acme"}},
		"sub_expired": {ID: "sub_expired", URL: srv.URL, Region: "eu", Secrets: Secrets{Current: newS, Previous: oldS, PreviousExpiresAt: t0.Add(-time.Second)}, Enabled: true},
		"sub_off":     {ID: "sub_off", URL: srv.URL, Region: "eu", Secrets: rotating},
		"sub_us":      {ID: "sub_us", URL: srv.URL, Region: "us", Secrets: rotating, Enabled: true},
		"sub_any":     {ID: "sub_any", URL: srv.URL, Secrets: rotating, Enabled: true},
	}}
	d := newDeliverer(t, Config{Directory: dir, Now: func() time.Time { return t0 }})
	body := json.RawMessage(`{"type":"order.paid"}`)
	payload := func(sub string) Payload {
		return Payload{SubscriberID: sub, EventID: "evt_1", Topic: "order.paid", Version: 3, Body: body}
	}

	tests := []struct {
		name       string
		j          *job.Job
		class      job.Class
		reason     job.Reason
		err        string
		signatures int // webhook-signature entries the receiver saw; 0 = not sent
	}{
		{"delivered, both secrets sign", webhookJob(t, payload("sub_ok")), job.ClassSuccess, "", "", 2},
		{"expired previous secret", webhookJob(t, payload("sub_expired")), job.ClassSuccess, "", "", 1},
		{"subscriber without region", webhookJob(t, payload("sub_any")), job.ClassSuccess, "", "", 2},
		{"unknown subscriber", webhookJob(t, payload("sub_nope")), job.ClassPermanent, job.ReasonSubscriberGone, "subscriber not found", 0},
		{"disabled subscriber", webhookJob(t, payload("sub_off")), job.ClassPermanent, job.ReasonPermanentError, "subscriber disabled", 0},
		{"other region", webhookJob(t, payload("sub_us")), job.ClassPermanent, job.ReasonPermanentError, "subscriber belongs to another region", 0},
		{"payload not JSON", &job.Job{Region: "eu", Payload: json.RawMessage(`nope`)}, job.ClassPermanent, job.ReasonPermanentError, "invalid webhook payload", 0},
		{"payload without body", webhookJob(t, Payload{SubscriberID: "sub_ok", EventID: "evt_1"}), job.ClassPermanent, job.ReasonPermanentError, "invalid webhook payload", 0},
		{"payload without event", webhookJob(t, Payload{SubscriberID: "sub_ok", Body: body}), job.ClassPermanent, job.ReasonPermanentError, "invalid webhook payload", 0},
	}
	for _, tt := range tests { // sequential: they share the recorder
		out := d.Handle(context.Background(), tt.j)
		if out.Class != tt.class || out.Reason != tt.reason || out.Err != tt.err {
			t.Errorf("%s: outcome %+v, want %s %q %q", tt.name, out, tt.class, tt.reason, tt.err)
		}
		if tt.signatures == 0 {
			continue
		}
		c := <-got
		if n := len(strings.Fields(c.header.Get(HeaderSignature))); n != tt.signatures {
			t.Errorf("%s: %d signatures, want %d", tt.name, n, tt.signatures)
		}
		if err := Verify([]string{newS}, c.header, c.body, t0, 0); err != nil {
			t.Errorf("%s: new secret does not verify: %v", tt.name, err)
		}
		var p Payload
		_ = json.Unmarshal(tt.j.Payload, &p)
		if c.header.Get(HeaderID) != MessageID("evt_1", p.SubscriberID, 3) || string(c.body) != string(body) {
			t.Errorf("%s: webhook-id %q body %q", tt.name, c.header.Get(HeaderID), c.body)
		}
	}
	noDelivery(t, got, "unexpected delivery")
}

func TestHandleLookupFailures(t *testing.T) {
	t.Parallel()
	j := webhookJob(t, Payload{SubscriberID: "sub_1", EventID: "evt_1", Body: json.RawMessage(`{}`)})

	d := newDeliverer(t, Config{Directory: &memDirectory{err: errors.New("database is locked")}})
	if out := d.Handle(context.Background(), j); out.Class != job.ClassTransient || out.Err != "subscriber lookup failed" {
		t.Errorf("failing directory: outcome %+v", out)
	}
	wrapped := newDeliverer(t, Config{Directory: &memDirectory{err: errors.Join(errors.New("cache miss"), ErrSubscriberNotFound)}})
	if out := wrapped.Handle(context.Background(), j); out.Class != job.ClassPermanent || out.Reason != job.ReasonSubscriberGone {
		t.Errorf("wrapped not-found: outcome %+v", out)
	}
	none := newDeliverer(t, Config{})
	if out := none.Handle(context.Background(), j); out.Class != job.ClassPermanent || out.Err != "no subscriber directory configured" {
		t.Errorf("no directory: outcome %+v", out)
	}
}

// TestHandleRateLimited checks that Handle passes Deliver's rate-limit
// classification through unchanged.
func TestHandleRateLimited(t *testing.T) {
	t.Parallel()
	srv := newServer(t, answer(http.StatusTooManyRequests, map[string]string{"Retry-After": "12"}))
	dir := &memDirectory{subs: map[string]Subscriber{
		"sub_1": {ID: "sub_1", URL: srv, Secrets: Secrets{Current: NewSecret()}, Enabled: true},
	}}
	d := newDeliverer(t, Config{Directory: dir})
	out := d.Handle(context.Background(), webhookJob(t, Payload{SubscriberID: "sub_1", EventID: "evt_1", Body: json.RawMessage(`{}`)}))
	if out.Class != job.ClassRateLimited || out.RetryAfter != 12*time.Second || out.Status != 429 {
		t.Errorf("outcome %+v", out)
	}
}
