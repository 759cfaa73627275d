// Package mount is the HTTP API's plug-in mount point: the shape of a route
// a plug-in (reviews, for one) adds to the server, and the few services of
// the server such a route needs. The server (internal/httpapi) serves a
// mounted route exactly like a core one: the same authentication, role
// check, per-key request rate, tenant and region rules, problem+json
// errors, request metrics, and the same entry in the discovery and OpenAPI
// documents, which are generated from one table.
//
// It sits below internal/httpapi (which imports it) so that a plug-in's
// routes import neither the server nor the root package, and the server's
// own tests can mount them.
package mount

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
)

// Handler is an endpoint: it writes a success response or returns an
// error, which the server answers as problem+json (a *Problem as built,
// store.ErrNotFound as 404 and store.ErrConflict as 409, both naming
// Route.Resource, a job validation error as 400, anything else as a
// logged 500). p is the authenticated key's principal.
type Handler func(w http.ResponseWriter, r *http.Request, p auth.Principal) error

// Route is one endpoint a plug-in mounts. Method and Path form a Go 1.22
// ServeMux pattern; the server refuses a pattern a core route or another
// plug-in already serves.
type Route struct {
	// Method and Path, e.g. "GET" and "/v1/reviews/{id}".
	Method, Path string
	// Name is the OpenAPI operationId and the capability's name in GET /v1.
	Name string
	// Summary documents the route in GET /v1, the OpenAPI document and
	// docs/api.md.
	Summary string
	// Role is the role a key needs (producer, worker or admin); mounted
	// routes are never public.
	Role auth.Role
	// Handle serves the route.
	Handle Handler
	// Request is a zero value of the JSON body type, for the documents;
	// nil for no body.
	Request any
	// Response is a zero value of the success body type; nil for none.
	Response any
	// Media is the success body's media type; default application/json.
	Media string
	// Status is the success status.
	Status int
	// Params are the route's query and header parameters.
	Params []Param
	// Example is the JSON body of the route's curl example; $VARS are left
	// for the shell.
	Example string
	// Vars maps path wildcards to the shell variables the example uses;
	// each variable needs an entry in VarDocs of some mounted route or of
	// the core.
	Vars map[string]string
	// VarDocs says where each shell variable of Vars comes from.
	VarDocs map[string]string
	// Resource names what the route acts on ("subscriber"). A
	// store.ErrNotFound or store.ErrConflict the handler returns
	// untranslated is answered naming it and the path's {id} or {key}:
	// "subscriber acme_sub does not exist, or ...", "subscriber acme_sub
	// changed while this request ran ...". Empty leaves the server's
	// generic wording.
	Resource string
}

// Param is a query or header parameter of a route.
type Param struct {
	// In is "query" or "header".
	In string
	// Name, Doc and, for a closed set of values, Enum.
	Name, Doc string
	Enum      []string
}

// Query returns a query parameter.
func Query(name, doc string, enum ...string) Param {
	return Param{In: "query", Name: name, Doc: doc, Enum: enum}
}

// Host is what the server offers the routes it mounts. Every method is
// safe for concurrent use.
type Host interface {
	// Regions returns the server's regions, sorted.
	Regions() []string
	// CheckRegion refuses a region the server does not have (400 naming
	// field) or the key may not use (403).
	CheckRegion(p auth.Principal, region, field string) error
	// SearchRegions returns the regions a request addresses: its region
	// query parameter (checked), else every region the key may use.
	SearchRegions(r *http.Request, p auth.Principal) ([]string, error)
	// Decode reads one JSON object of at most limit bytes from the body
	// into dst, refusing another media type (415), unknown fields and
	// malformed JSON (400) and a larger body (413, with tooLarge as the
	// detail's advice).
	Decode(w http.ResponseWriter, r *http.Request, dst any, limit int64, tooLarge string) error
	// IdempotencyKey returns the request's Idempotency-Key header or the
	// body's key (400 when both are set and differ).
	IdempotencyKey(r *http.Request, body string) (string, error)
	// ListJobs lists jobs of kind across the request's regions, newest
	// first, with the server's list conventions: the limit and after query
	// parameters (at most 500 a page, default 100), next_cursor paging,
	// producers see only their tenant and admins may filter by tenant,
	// state and lane filters. next is empty on the last page.
	ListJobs(r *http.Request, p auth.Principal, kind string) (jobs []*job.Job, next string, err error)
	// Notify wakes the region's long polls and engine after an insert.
	Notify(region string)
	// OneRegion resolves the region of a route about one region's object
	// (a webhook subscriber): the region query parameter (checked), or
	// the only region the key may use; with several it is required (400).
	OneRegion(r *http.Request, p auth.Principal) (string, error)
	// FindJob looks the job of the {id} path value up in the request's
	// regions; another tenant's job answers 404 exactly like a missing one.
	FindJob(r *http.Request, p auth.Principal) (*job.Job, error)
	// Page reads a list route's after (at most 200 bytes) and limit (1 to
	// 500, default 100) query parameters.
	Page(r *http.Request) (after string, limit int, err error)
	// ShowResult makes the server re-render the result of every job of
	// kind before any core route shows it (GET /v1/jobs/{id} and the
	// lists): a plug-in whose results once held what must not be shown
	// (a webhook subscriber's answer) bounds them there. Call it only from
	// the Mount function.
	ShowResult(kind string, show func(json.RawMessage) json.RawMessage)
}

// The query parameters the server's own routes document, for mounted
// routes that read them through Host.
var (
	// RegionOne is the region parameter of OneRegion.
	RegionOne = Query("region", "the region; required unless the key may use only one")
	// RegionJob is the region parameter of FindJob.
	RegionJob = Query("region", "the job's region; without it every region the key may use is searched")
	// RegionList is the region parameter of SearchRegions on a list route.
	RegionList = Query("region", "list one region; without it every region the key may use, merged newest first")
	// RegionEvery is the region parameter of a list that is not ordered
	// by age (limit keys, stats, schedules and subscribers, in name or id
	// order within each region's answer).
	RegionEvery = Query("region", "list one region; without it every region the key may use")
	// PageAfter and PageLimit are Page's parameters.
	PageAfter = Query("after", "next_cursor of the previous page")
	PageLimit = Query("limit", "page size, 1 to 500; default 100")
)

// Mount returns a plug-in's routes for one server. The server calls it once,
// in httpapi.New.
type Mount func(h Host) []Route

// Problem is an error a route returns to answer with an RFC 9457 problem
// of Status; build one with Problemf, FieldError or NotFound.
type Problem struct {
	// Status is the HTTP status.
	Status int
	// Slug names the problem (https://ratelane.dev/problems/<slug>).
	Slug string
	// Title overrides the slug's fixed title; only for a slug of the
	// plug-in's own.
	Title string
	// Detail says what went wrong and what to do; never quote content.
	Detail string
	// Field, when set, is the request field at fault.
	Field string
	// Header holds extra response headers.
	Header http.Header
}

func (e *Problem) Error() string { return e.Slug + ": " + e.Detail }

// Problemf returns a problem of status and slug with a formatted detail.
func Problemf(status int, slug, format string, args ...any) *Problem {
	return &Problem{Status: status, Slug: slug, Detail: fmt.Sprintf(format, args...)}
}

// FieldError is a 400 invalid-request naming one field.
func FieldError(field, format string, args ...any) *Problem {
	return &Problem{Status: http.StatusBadRequest, Slug: "invalid-request", Field: field, Detail: fmt.Sprintf(format, args...)}
}

// NotFound is the 404 of an unknown id, worded like the core's so that
// another tenant's id and a missing one read alike.
func NotFound(what string) *Problem {
	return Problemf(http.StatusNotFound, "not-found", "%s does not exist, or this API key's tenant or regions cannot see it", what)
}

// ValidID bounds path ids so that junk never reaches the stores.
func ValidID(id string) bool {
	return id != "" && len(id) <= 64 && !strings.ContainsAny(id, "\x00/ ")
}

// WriteJSON answers with status and v as a JSON body.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// CompactJSON returns raw without insignificant whitespace, or nil for an
// absent or null value, as the server stores job payloads: compact bodies
// make equal requests compare equal.
func CompactJSON(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
