package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Result is the result of a successful delivery job: the status and the
// timing of the answer, never its body or headers. A job's result is shown
// to the producer that published the event, and what a subscriber answers
// is the subscriber's business (it may hold the subscriber's internals, or
// be the reflected answer of whatever the URL points at), so none of it
// is kept where a producer key can read it.
type Result struct {
	// Status is the HTTP status of the answer.
	Status int `json:"status"`
	// Attempt is the attempt that succeeded, and At when it was made.
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	// DurationMS is the time from sending the request to the end of the
	// bounded body read.
	DurationMS float64 `json:"duration_ms"`
}

// PublicResult re-renders a delivery job's result as a Result, dropping
// every other field: results written before they were bounded held the
// subscriber's headers and body. It returns nil for a result that is not
// a JSON object.
func PublicResult(raw json.RawMessage) json.RawMessage {
	var r Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil
	}
	return b
}

// ResponseRecord is the bounded answer of one failed delivery attempt, kept
// for diagnosis in an ObjectResponse document (id: the job id) for the last
// failed attempt: the status, the diagnostic headers and at most
// MaxBodyPrefix bytes of the body. Only operators see it (admin keys, GET
// /v1/deliveries/{id}/response); it never becomes a job's result and is
// never logged.
type ResponseRecord struct {
	JobID   string    `json:"job_id"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	// Status is the HTTP status; 0 when there was no answer.
	Status int `json:"status"`
	// Error is the outcome's short phrase for a failure.
	Error  string      `json:"error,omitempty"`
	Header http.Header `json:"header,omitempty"`
	// Body is the first 4 KiB of the answer when it is UTF-8;
	// BodyBase64 holds it otherwise.
	Body       string  `json:"body,omitempty"`
	BodyBase64 []byte  `json:"body_base64,omitempty"`
	Truncated  bool    `json:"truncated,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// Handler returns the job handler of Kind for this registry's region. Each
// attempt decodes the job's Payload, resolves the subscriber through the
// registry's cache, makes one delivery through d and then keeps the books:
//
//   - success: the status and timing (a Result, never the body or
//     headers) become the job's result, and the subscriber's failure
//     record is cleared;
//   - 410 Gone: the subscriber is disabled (the outcome ends the job as
//     subscriber_gone);
//   - transient or permanent failure: the bounded answer is stored as the
//     job's ObjectResponse document, and a subscriber failing
//     continuously for RegistryConfig.DisableAfter is disabled;
//   - 429: nothing beyond the outcome; the engine pauses the key.
//
// A bad payload, an unknown, disabled, other-region or other-tenant
// subscriber end the job as permanent, as in Deliverer.Handle.
func (r *Registry) Handler(d *Deliverer) func(ctx context.Context, j *job.Job) job.Outcome {
	return func(ctx context.Context, j *job.Job) job.Outcome { return r.handle(ctx, d, j) }
}

func (r *Registry) handle(ctx context.Context, d *Deliverer, j *job.Job) job.Outcome {
	p, ok := decodePayload(j.Payload)
	if !ok {
		return permanent("invalid webhook payload")
	}
	rec, err := r.lookup(ctx, p.SubscriberID)
	if o, ok := checkSubscriber(j, err, rec.Region, rec.Tenant, rec.Enabled); !ok {
		return o
	}
	now := d.now()
	out, resp := d.Deliver(ctx, p.delivery(rec.URL, rec.Headers, rec.Secrets.Active(now)), j.Attempt, now)
	return r.record(ctx, j, rec, out, resp, now)
}

// decodePayload decodes and checks a delivery job's payload.
func decodePayload(b []byte) (Payload, bool) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil || p.SubscriberID == "" || p.EventID == "" ||
		len(p.Body) == 0 || string(bytes.TrimSpace(p.Body)) == "null" {
		return Payload{}, false
	}
	return p, true
}

// record keeps the registry's books on one attempt and returns the
// outcome, with the status and timing as the result of a success. Book-keeping
// failures never change the outcome: the delivery happened or not
// regardless.
func (r *Registry) record(ctx context.Context, j *job.Job, rec Record, out job.Outcome, resp Response, now time.Time) job.Outcome {
	diag := responseRecord(j, out, resp, now)
	switch {
	case out.Class == job.ClassSuccess:
		res := Result{Status: diag.Status, Attempt: diag.Attempt, At: diag.At, DurationMS: diag.DurationMS}
		if b, err := json.Marshal(res); err == nil {
			out.Result = b
		}
		r.logged(rec.ID, "record success", r.succeeded(ctx, rec, now))
	case out.Class == job.ClassRateLimited:
	case out.Reason == job.ReasonSubscriberGone && out.Status == http.StatusGone:
		r.logged(rec.ID, "record response", r.saveResponse(ctx, diag))
		_, err := r.Disable(ctx, rec.ID, "subscriber answered 410 Gone")
		r.logged(rec.ID, "disable", err)
	default:
		r.logged(rec.ID, "record response", r.saveResponse(ctx, diag))
		r.logged(rec.ID, "record failure", r.failed(ctx, rec, out, now))
	}
	return out
}

func responseRecord(j *job.Job, out job.Outcome, resp Response, now time.Time) ResponseRecord {
	rr := ResponseRecord{JobID: j.ID, Attempt: j.Attempt, At: now.UTC(), Status: resp.Status, Header: resp.Header,
		Truncated: resp.BodyTruncated, DurationMS: float64(resp.Duration.Microseconds()) / 1000}
	if out.Class != job.ClassSuccess {
		rr.Error = out.Err
	}
	if utf8.Valid(resp.BodyPrefix) {
		rr.Body = string(resp.BodyPrefix)
	} else {
		rr.BodyBase64 = resp.BodyPrefix
	}
	return rr
}

func (r *Registry) saveResponse(ctx context.Context, rr ResponseRecord) error {
	b, err := json.Marshal(rr)
	if err != nil {
		return err
	}
	return r.st.PutObject(ctx, store.Object{Kind: ObjectResponse, ID: rr.JobID, Body: b, UpdatedAt: rr.At})
}

// LastFailedResponse returns the last failed answer of a delivery job, or
// an error wrapping store.ErrNotFound when it has none.
func (r *Registry) LastFailedResponse(ctx context.Context, jobID string) (ResponseRecord, error) {
	return getDoc[ResponseRecord](ctx, r.st, ObjectResponse, jobID, "response")
}

// logged logs a failed write of the registry's own bookkeeping. The
// delivery's outcome stands either way (it is the job's, written by the
// engine), but a health record that could not be written must be seen.
func (r *Registry) logged(subscriberID, what string, err error) {
	if err != nil {
		r.cfg.Logger.Warn("webhook subscriber bookkeeping failed", "subscriber_id", subscriberID, "op", what, "err", err)
	}
}

// succeeded clears a failure record, and refreshes LastSuccessAt at most
// once a minute, so that a busy subscriber costs no write per delivery.
func (r *Registry) succeeded(ctx context.Context, rec Record, now time.Time) error {
	h := rec.Health
	if h.FailingSince.IsZero() && now.Sub(h.LastSuccessAt) < healthEvery {
		return nil
	}
	_, err := r.update(ctx, rec.ID, func(rec *Record, now time.Time) bool {
		h := &rec.Health
		if h.FailingSince.IsZero() && now.Sub(h.LastSuccessAt) < healthEvery {
			return false
		}
		h.LastSuccessAt, h.FailingSince = now, time.Time{}
		return true
	})
	return err
}

// failed records a failure: the first one after a success starts the
// failure period; later ones are written at most once a minute; once the
// period reaches DisableAfter the subscriber is disabled.
func (r *Registry) failed(ctx context.Context, rec Record, out job.Outcome, now time.Time) error {
	h := rec.Health
	if !h.FailingSince.IsZero() && now.Sub(h.LastFailureAt) < healthEvery && now.Sub(h.FailingSince) < r.cfg.DisableAfter {
		return nil
	}
	_, err := r.update(ctx, rec.ID, func(rec *Record, now time.Time) bool {
		h := &rec.Health
		if h.FailingSince.IsZero() {
			h.FailingSince = now
		}
		h.LastFailureAt, h.LastStatus, h.LastError = now, out.Status, out.Err
		if rec.Enabled && now.Sub(h.FailingSince) >= r.cfg.DisableAfter {
			rec.Enabled, rec.DisabledAt = false, now
			rec.DisabledReason = fmt.Sprintf("every delivery failed for %s (since %s)", r.cfg.DisableAfter, h.FailingSince.Format(time.RFC3339))
		}
		return true
	})
	return err
}
