package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// problemBase prefixes every problem type URI; the slug after it names the
// problem for clients that branch on it.
const problemBase = "https://ratelane.dev/problems/"

// Problem is an RFC 9457 problem details object, the body of every error
// response (Content-Type application/problem+json).
type Problem struct {
	// Type is https://ratelane.dev/problems/<slug>; clients branch on it.
	Type string `json:"type" doc:"URI naming the kind of problem; branch on it"`
	// Title is fixed per Type.
	Title string `json:"title" doc:"short summary of the kind of problem"`
	// Status repeats the HTTP status code.
	Status int `json:"status" doc:"the HTTP status code"`
	// Detail says what went wrong in this request and what to do about it.
	Detail string `json:"detail,omitempty" doc:"what went wrong in this request and what to do about it"`
	// Instance is the request path, to correlate with logs.
	Instance string `json:"instance,omitempty" doc:"the request path"`
	// Errors lists per-field violations of a request body.
	Errors []job.FieldError `json:"errors,omitempty" doc:"per-field violations"`
	// PredictedWaitSeconds is the queue wait a rejected job would have had.
	PredictedWaitSeconds *float64 `json:"predicted_wait_seconds,omitempty" doc:"predicted queue wait of a job refused for overload"`
	// BudgetSeconds is the lane's latency budget a rejected job would have broken.
	BudgetSeconds *float64 `json:"budget_seconds,omitempty" doc:"the lane's latency budget"`
}

// apiError is an error a handler returns to answer with a problem. header
// holds extra response headers (Retry-After, Allow).
type apiError struct {
	p      Problem
	header http.Header
	cause  error // logged, never shown
}

func (e *apiError) Error() string { return e.p.Title + ": " + e.p.Detail }

func (e *apiError) Unwrap() error { return e.cause }

// problemf builds an apiError with a slug, status and detail.
func problemf(status int, slug, format string, args ...any) *apiError {
	return &apiError{p: Problem{
		Type: problemBase + slug, Title: titles[slug], Status: status, Detail: fmt.Sprintf(format, args...),
	}}
}

// withHeader sets a response header on the problem.
func (e *apiError) withHeader(k, v string) *apiError {
	if e.header == nil {
		e.header = http.Header{}
	}
	e.header.Set(k, v)
	return e
}

// titles gives each problem slug its fixed title (RFC 9457 §3.1.3: the
// title does not change from occurrence to occurrence).
var titles = map[string]string{
	"invalid-request":        "The request is invalid",
	"invalid-schedule":       "The schedule cannot run as described",
	"malformed-json":         "The request body is not valid JSON",
	"unknown-field":          "The request body has an unknown field",
	"payload-too-large":      "The request body or payload is too large",
	"unsupported-media-type": "The request body must be JSON",
	"unauthenticated":        "An API key is required",
	"forbidden":              "This API key may not do that",
	"region-forbidden":       "This API key may not use that region",
	"not-found":              "Not found",
	"method-not-allowed":     "Method not allowed",
	"conflict":               "The job is not in a state that allows this",
	"lease-lost":             "The lease was lost",
	"idempotency-mismatch":   "The idempotency key was used with another request",
	"reserved-kind":          "The job kind is reserved for ratelane's built-in jobs",
	"overloaded":             "The job's predicted queue wait exceeds its lane's latency budget",
	"too-many-requests":      "This API key sent too many requests",
	"unavailable":            "The service is unavailable",
	"internal":               "Internal server error",
	"client-closed-request":  "The client closed the request",
}

// statusClientClosed is the status of a request whose client went
// away (or gave up) before the answer was ready: nginx's 499. It is not a
// server error, so it is neither logged as one nor counted as a 5xx; the
// answer itself is written for the record (metrics, access logs) but
// usually reaches nobody.
const statusClientClosed = 499

// clientClosed is the problem of a canceled request.
func clientClosed(err error) *apiError {
	e := problemf(statusClientClosed, "client-closed-request",
		"the request was canceled before its answer was ready (the client went away or gave up); retry it if the answer is still needed")
	e.cause = err
	return e
}

func badRequest(format string, args ...any) *apiError {
	return problemf(http.StatusBadRequest, "invalid-request", format, args...)
}

// fieldError is a 400 naming one field.
func fieldError(field, format string, args ...any) *apiError {
	e := badRequest("field %s: %s", field, fmt.Sprintf(format, args...))
	e.p.Errors = []job.FieldError{{Field: field, Detail: fmt.Sprintf(format, args...)}}
	return e
}

func notFound(what string) *apiError {
	return problemf(http.StatusNotFound, "not-found", "%s does not exist, or this API key's tenant or regions cannot see it", what)
}

// changedMeanwhile is the 409 of a guarded write that lost: what changed
// between the request's read and its write, and the store kept nothing
// of the request.
func changedMeanwhile(what string) *apiError {
	return problemf(http.StatusConflict, "conflict",
		"%s changed while this request ran (another request, a worker or the scheduler wrote it first); nothing was changed: GET it to see its current state and retry if the request still applies", what)
}

// storeError names what (a route's resource and id: "schedule 0193...")
// in a store.ErrNotFound or store.ErrConflict that reached the HTTP edge
// untranslated, typically a row deleted or changed between a handler's
// read and its write. Errors already translated into a problem, any
// other error and an empty what are returned as they are; toProblem
// answers those.
func storeError(err error, what string) error {
	var ae *apiError
	var mp *mount.Problem
	if what == "" || errors.As(err, &ae) || errors.As(err, &mp) {
		return err
	}
	var e *apiError
	switch {
	case errors.Is(err, store.ErrNotFound):
		e = notFound(what)
	case errors.Is(err, store.ErrConflict):
		e = changedMeanwhile(what)
	default:
		return err
	}
	e.cause = err
	return e
}

func leaseLost(id, why string) *apiError {
	return problemf(http.StatusConflict, "lease-lost",
		"job %s: %s; the outcome was not recorded. Another worker may be running the job: drop your result and lease again", id, why)
}

// toProblem turns any handler error into the apiError to answer with,
// keeping the original cause for the log.
func toProblem(err error) *apiError {
	var ae *apiError
	var ve *job.ValidationError
	var rk *job.ReservedKindError
	var mp *mount.Problem
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mp):
		return mountedProblem(mp)
	case errors.As(err, &rk):
		e := problemf(http.StatusUnprocessableEntity, "reserved-kind", "%s", rk.Error())
		e.p.Errors = []job.FieldError{{Field: rk.Field, Detail: rk.Error()}}
		return e
	case errors.Is(err, job.ErrPayloadTooLarge):
		return problemf(http.StatusRequestEntityTooLarge, "payload-too-large", "%s", err.Error())
	case errors.As(err, &ve):
		e := badRequest("%s", ve.Error())
		e.p.Errors = ve.Fields
		return e
	case errors.Is(err, store.ErrNotFound):
		return notFound("the resource")
	case errors.Is(err, store.ErrConflict):
		// Routes name their resource (storeError); this is the answer
		// of a route without one.
		return changedMeanwhile("what this request changes")
	case errors.Is(err, context.Canceled):
		return clientClosed(err)
	case errors.Is(err, context.DeadlineExceeded):
		e := problemf(http.StatusServiceUnavailable, "unavailable", "the store did not answer in time; retry shortly")
		e.cause = err
		return e.withHeader("Retry-After", "1")
	default:
		e := problemf(http.StatusInternalServerError, "internal", "an internal error occurred; it was logged and retrying may help")
		e.cause = err
		return e
	}
}

// writeProblem answers with a problem+json body.
func writeProblem(w http.ResponseWriter, r *http.Request, e *apiError) {
	p := e.p
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	for k, v := range e.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON answers with a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// retryAfterSeconds renders a wait as whole seconds for Retry-After,
// rounding up and never below 1 (a client told 0 would retry at once).
func retryAfterSeconds(secs float64) string {
	n := int64(secs)
	if float64(n) < secs {
		n++
	}
	return strconv.FormatInt(max(n, 1), 10)
}
