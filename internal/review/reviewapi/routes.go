// Package reviewapi is the HTTP face of the review plug-in: the
// /v1/reviews routes, mounted into the API server through
// internal/httpapi/mount and served over a Service (the review plug-in,
// package review, implements it over its region runtimes). It imports
// neither the server nor the root package, so the server's tests mount the
// real route table over a fake Service.
package reviewapi

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/store"
)

// MaxReviewDiffBytes is the largest diff POST /v1/reviews accepts (413
// past it). The diff is stored once as a region object, never in a job.
const MaxReviewDiffBytes = 8 << 20

// MaxReviewBody bounds the JSON body of POST /v1/reviews: the diff as a
// JSON string (escaping its newlines, tabs and quotes rarely doubles it)
// plus room for the other fields.
const MaxReviewBody = 2*MaxReviewDiffBytes + 64<<10

// ErrNotConfigured is what a Service's error wraps for a region where
// reviews are not enabled; the API answers 501.
var ErrNotConfigured = errors.New("reviews are not configured in this region")

// InputError is a Service's refusal of a submission because of
// one request field (an unknown provider, a publish target it cannot
// honour, a diff that does not parse); the API answers 400 naming Field.
// Err's message is shown to the caller, so it must never quote the diff.
type InputError struct {
	Field string
	Err   error
}

func (e *InputError) Error() string { return e.Field + ": " + e.Err.Error() }

func (e *InputError) Unwrap() error { return e.Err }

// Submission is a validated POST /v1/reviews request: the tenant
// comes from the API key, the region is one the key may use.
type Submission struct {
	Region         string
	Tenant         string
	Lane           job.Lane
	Repo           string
	Change         string
	BaseSHA        string
	HeadSHA        string
	Diff           []byte
	Depth          string
	Provider       string
	Publish        pipeline.Publish
	IdempotencyKey string
}

// Review is a review's progress, and its result once aggregated, as the
// API shows it.
type Review struct {
	ID             string            `json:"id"`
	Region         string            `json:"region"`
	Tenant         string            `json:"tenant"`
	State          job.State         `json:"state" doc:"accepted while parts run; validated once aggregated; published once delivered; terminal when no part succeeded"`
	Reason         string            `json:"reason,omitempty" doc:"why a terminal review ended"`
	Repo           string            `json:"repo,omitempty"`
	Change         string            `json:"change,omitempty"`
	DepthRequested string            `json:"depth_requested" enum:"auto,full,fast"`
	Depth          string            `json:"depth" enum:"full,fast" doc:"the depth used; auto becomes fast when the predicted wait exceeds the lane's budget"`
	Provider       string            `json:"provider" doc:"the provider profile reviewing the parts"`
	Publish        pipeline.Publish  `json:"publish"`
	Parts          pipeline.Progress `json:"parts" doc:"the diff's parts by outcome"`
	Result         *pipeline.Result  `json:"result,omitempty" doc:"present once aggregated: findings, quarantined findings with reasons, failed parts, provider usage"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
}

// Service runs reviews for POST /v1/reviews and GET /v1/reviews/{id}, and
// counts the parts of the running reviews GET /v1/reviews lists.
// Package review implements it over its region runtimes. Errors: one wrapping
// ErrNotConfigured for a region without reviews (501), a
// *InputError for a bad field (400), store.ErrNotFound for an id that
// is not a review of the region (404).
type Service interface {
	// SubmitReview stores the diff in the region and enqueues the review.
	// A submission with the IdempotencyKey of an earlier one of the same
	// tenant returns that earlier review.
	SubmitReview(ctx context.Context, sub Submission) (Review, error)
	// Review returns a review of a region.
	Review(ctx context.Context, region, id string) (Review, error)
	// ReviewSARIF writes an aggregated review's findings as SARIF 2.1.0.
	ReviewSARIF(ctx context.Context, region, id string, w io.Writer) error
	// Providers lists a region's provider profiles, the default first.
	Providers(ctx context.Context, region string) ([]ProviderInfo, error)
	// Progress counts the parts of a review that is not aggregated yet,
	// parent being its job as GET /v1/reviews listed it.
	Progress(ctx context.Context, parent *job.Job) (pipeline.Progress, error)
}

// reviewRequest is the body of POST /v1/reviews.
type reviewRequest struct {
	Region         string         `json:"region" required:"true" doc:"the region the diff, its jobs and the findings live in"`
	Repo           string         `json:"repo,omitempty" doc:"the repository, e.g. acme/app"`
	Change         string         `json:"change,omitempty" doc:"the pull request number or ref"`
	BaseSHA        string         `json:"base_sha,omitempty"`
	HeadSHA        string         `json:"head_sha,omitempty"`
	Diff           string         `json:"diff" required:"true" doc:"the unified diff (git diff or diff -u), at most 8 MiB; stored once in the region, never copied into a job payload or a log"`
	Depth          string         `json:"depth,omitempty" enum:"auto,full,fast" doc:"full: hunks with context; fast: added lines, compact; auto (default): fast when the predicted wait exceeds the lane's budget"`
	Lane           job.Lane       `json:"lane,omitempty" doc:"default interactive"`
	Provider       string         `json:"provider,omitempty" doc:"a provider profile of the region; default the region's default profile"`
	Publish        *reviewPublish `json:"publish,omitempty" doc:"where the findings go once aggregated; default none"`
	Tenant         string         `json:"tenant,omitempty" doc:"admin keys only; other keys always use their own tenant"`
	IdempotencyKey string         `json:"idempotency_key,omitempty" doc:"or the Idempotency-Key header: a retry with the same key returns the first review"`
}

// reviewPublish is where a finished review goes.
type reviewPublish struct {
	Kind   string `json:"kind" required:"true" enum:"none,rdjsonl,webhook,github"`
	Target string `json:"target,omitempty" doc:"rdjsonl: a file name in the tenant's directory of the server's rdjsonl directory; webhook: one of the tenant's subscriber ids; github: owner/repo#number (default repo#change)"`
}

// sarifLog documents the top of a SARIF 2.1.0 log.
type sarifLog struct {
	Version string           `json:"version" doc:"2.1.0"`
	Schema  string           `json:"$schema,omitempty"`
	Runs    []map[string]any `json:"runs" doc:"one run: the tool and its results"`
}

var reviewVars = map[string]string{"id": "REVIEW_ID"}

// reviewExampleDiff is the curl example's diff: it adds a TODO, which the
// built-in rules provider reports. JSON escapes keep it on one line.
const reviewExampleDiff = `diff --git a/app.go b/app.go\n--- a/app.go\n+++ b/app.go\n@@ -1,3 +1,4 @@\n package app\n \n+// TODO: handle retries\n func Run() {}\n`

// Routes returns the review endpoints over svc, for httpapi.Config.Mounts.
func Routes(svc Service) mount.Mount {
	return func(h mount.Host) []mount.Route {
		s := &server{h: h, svc: svc}
		region := h.Regions()[0]
		return []mount.Route{
			{Method: "POST", Path: "/v1/reviews", Name: "createReview", Resource: "review", Role: auth.RoleProducer,
				Summary: "Review a unified diff (at most 8 MiB): it is stored in the region, split into parts reviewed as jobs, validated against the diff and published once",
				Handle:  s.handleCreateReview, Request: reviewRequest{}, Response: Review{}, Status: 202,
				Params: []mount.Param{{In: "header", Name: "Idempotency-Key", Doc: "a retry with the same key returns the first review"}},
				Example: `{"region":"` + region + `","repo":"acme/app","change":"42","diff":"` + reviewExampleDiff +
					`","depth":"auto","lane":"interactive","provider":"rules","publish":{"kind":"none"}}`},
			{Method: "GET", Path: "/v1/reviews", Name: "listReviews", Role: auth.RoleProducer,
				Summary: "List reviews, newest first, with their parts progress and, once aggregated, findings and quarantined counts (GET /v1/reviews/{id} has the findings)",
				Handle:  s.handleListReviews, Response: reviewList{}, Status: 200,
				Params: []mount.Param{mount.Query("region", "list one region; without it every region the key may use, merged newest first"),
					mount.Query("state", "only reviews in this state", "accepted", "validated", "published", "terminal"),
					mount.Query("lane", "only reviews of this lane", "interactive", "batch"),
					mount.Query("tenant", "admin keys only: only this tenant's reviews"),
					mount.Query("after", "next_cursor of the previous page"), mount.Query("limit", "page size, 1 to 500; default 100")}},
			{Method: "GET", Path: "/v1/reviews/providers", Name: "listReviewProviders", Role: auth.RoleProducer,
				Summary: "List the review providers of each region: name, kind, model, region, limit keys and declared limits (never a key or an endpoint)",
				Handle:  s.handleListProviders, Response: providerList{}, Status: 200,
				Params: []mount.Param{mount.Query("region", "list one region; without it every region the key may use")}},
			{Method: "GET", Path: "/v1/reviews/{id}", Name: "getReview", Resource: "review", Role: auth.RoleProducer,
				Summary: "Get a review: state, depth used, parts progress and, once aggregated, findings, quarantined findings with reasons and provider usage",
				Handle:  s.handleGetReview, Response: Review{}, Status: 200, Params: []mount.Param{reviewRegion}, Vars: reviewVars,
				VarDocs: map[string]string{"REVIEW_ID": "a review id, from POST /v1/reviews"}},
			{Method: "GET", Path: "/v1/reviews/{id}/sarif", Name: "getReviewSARIF", Resource: "review", Role: auth.RoleProducer,
				Summary: "Export an aggregated review's findings as SARIF 2.1.0 (409 until the review is validated)",
				Handle:  s.handleGetReviewSARIF, Response: sarifLog{}, Media: "application/sarif+json", Status: 200,
				Params: []mount.Param{reviewRegion}, Vars: reviewVars},
		}
	}
}

// server serves the routes over one host and service.
type server struct {
	h   mount.Host
	svc Service
}

var reviewRegion = mount.Query("region", "the review's region; without it every region the key may use is searched")

func (s *server) handleCreateReview(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req reviewRequest
	if err := s.h.Decode(w, r, &req, MaxReviewBody,
		"a review's diff may hold at most 8388608 bytes (8 MiB): split the change or review it in pieces"); err != nil {
		return err
	}
	sub, err := s.reviewSubmission(r, p, &req)
	if err != nil {
		return err
	}
	rv, err := s.svc.SubmitReview(context.WithoutCancel(r.Context()), sub)
	if err != nil {
		return reviewError(err, sub.Region)
	}
	if sub.IdempotencyKey != "" {
		if diff := reviewDiff(rv, sub); len(diff) > 0 {
			return mount.Problemf(http.StatusUnprocessableEntity, "idempotency-mismatch",
				"idempotency key %q was first used for review %s with a different %s; use a new key for a different request",
				sub.IdempotencyKey, rv.ID, strings.Join(diff, ", "))
		}
	}
	s.h.Notify(rv.Region)
	w.Header().Set("Location", "/v1/reviews/"+rv.ID+"?region="+url.QueryEscape(rv.Region))
	return mount.WriteJSON(w, http.StatusAccepted, rv)
}

// reviewSubmission validates a request and resolves its tenant and region.
func (s *server) reviewSubmission(r *http.Request, p auth.Principal, req *reviewRequest) (Submission, error) {
	idem, err := s.h.IdempotencyKey(r, req.IdempotencyKey)
	if err != nil {
		return Submission{}, err
	}
	sub := Submission{Region: req.Region, Tenant: p.Tenant, Lane: req.Lane, Repo: req.Repo, Change: req.Change,
		BaseSHA: req.BaseSHA, HeadSHA: req.HeadSHA, Diff: []byte(req.Diff), Depth: req.Depth, Provider: req.Provider,
		IdempotencyKey: idem}
	if p.Role == auth.RoleAdmin && req.Tenant != "" {
		sub.Tenant = req.Tenant
	}
	if req.Publish != nil {
		sub.Publish = pipeline.Publish{Kind: req.Publish.Kind, Target: req.Publish.Target}
	}
	sub.Lane = cmp.Or(sub.Lane, job.LaneInteractive)
	sub.Depth = cmp.Or(sub.Depth, pipeline.DepthAuto)
	sub.Publish.Kind = cmp.Or(sub.Publish.Kind, pipeline.PublishNone)
	for field, v := range map[string]string{"repo": sub.Repo, "change": sub.Change, "base_sha": sub.BaseSHA,
		"head_sha": sub.HeadSHA, "provider": sub.Provider, "publish.target": sub.Publish.Target,
		"idempotency_key": sub.IdempotencyKey, "tenant": sub.Tenant} {
		if len(v) > job.MaxNameLen || strings.ContainsAny(v, "\x00\n\r\t") {
			return sub, mount.FieldError(field, "%s must be at most %d bytes without control characters", field, job.MaxNameLen)
		}
	}
	switch {
	case sub.Region == "":
		return sub, mount.FieldError("region", "region is required: one of %s", strings.Join(s.h.Regions(), ", "))
	case len(sub.Diff) == 0:
		return sub, mount.FieldError("diff", "diff is required: the unified diff text, as git diff prints it")
	case len(sub.Diff) > MaxReviewDiffBytes:
		return sub, mount.Problemf(http.StatusRequestEntityTooLarge, "payload-too-large",
			"the diff is %d bytes; a review takes at most %d bytes (8 MiB): split the change or review it in pieces", len(sub.Diff), MaxReviewDiffBytes)
	case !slices.Contains([]string{pipeline.DepthAuto, pipeline.DepthFull, pipeline.DepthFast}, sub.Depth):
		return sub, mount.FieldError("depth", "depth must be auto, full or fast, not %q", sub.Depth)
	case !sub.Lane.Valid():
		return sub, mount.FieldError("lane", "lane must be interactive or batch, not %q", sub.Lane)
	case !slices.Contains([]string{pipeline.PublishNone, pipeline.PublishRDJSONL, pipeline.PublishWebhook, pipeline.PublishGitHub}, sub.Publish.Kind):
		return sub, mount.FieldError("publish.kind", "publish.kind must be none, rdjsonl, webhook or github, not %q", sub.Publish.Kind)
	}
	return sub, s.h.CheckRegion(p, sub.Region, "region")
}

// reviewDiff names the fields in which a retried submission differs from
// the review its idempotency key already created.
func reviewDiff(rv Review, sub Submission) []string {
	var diff []string
	add := func(differs bool, field string) {
		if differs {
			diff = append(diff, field)
		}
	}
	add(rv.Region != sub.Region, "region")
	add(rv.Repo != sub.Repo, "repo")
	add(rv.Change != sub.Change, "change")
	add(rv.DepthRequested != sub.Depth, "depth")
	add(sub.Provider != "" && rv.Provider != sub.Provider, "provider")
	add(rv.Publish != sub.Publish && !(rv.Publish.Kind == "" && sub.Publish.Kind == pipeline.PublishNone), "publish")
	return diff
}

func (s *server) handleGetReview(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	rv, err := s.findReview(r, p)
	if err != nil {
		return err
	}
	return mount.WriteJSON(w, http.StatusOK, rv)
}

func (s *server) handleGetReviewSARIF(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	rv, err := s.findReview(r, p)
	if err != nil {
		return err
	}
	if rv.Result == nil {
		return mount.Problemf(http.StatusConflict, "conflict",
			"review %s is %s and has no findings yet; poll GET /v1/reviews/%s until its state is validated or published", rv.ID, rv.State, rv.ID)
	}
	var buf bytes.Buffer
	if err := s.svc.ReviewSARIF(r.Context(), rv.Region, rv.ID, &buf); err != nil {
		return reviewError(err, rv.Region)
	}
	w.Header().Set("Content-Type", "application/sarif+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(buf.Bytes())
	return err
}

// findReview looks a review up by id in the request's regions, with the
// rules of jobs: another tenant's review is a 404 like a missing one.
// Regions without reviews are skipped when searching; naming one is a 501.
func (s *server) findReview(r *http.Request, p auth.Principal) (Review, error) {
	id := r.PathValue("id")
	regions, err := s.h.SearchRegions(r, p)
	if err != nil {
		return Review{}, err
	}
	if !mount.ValidID(id) {
		return Review{}, mount.NotFound("review " + id)
	}
	explicit := r.URL.Query().Get("region") != ""
	var unconfigured []string
	for _, region := range regions {
		rv, err := s.svc.Review(r.Context(), region, id)
		switch {
		case errors.Is(err, ErrNotConfigured) && !explicit:
			unconfigured = append(unconfigured, region)
			continue
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return Review{}, reviewError(err, region)
		}
		if p.Role != auth.RoleAdmin && rv.Tenant != p.Tenant {
			break
		}
		return rv, nil
	}
	if len(unconfigured) == len(regions) {
		return Review{}, notConfigured(unconfigured...)
	}
	return Review{}, mount.NotFound("review " + id)
}

// reviewError maps a Service error onto a problem.
func reviewError(err error, region string) error {
	var in *InputError
	switch {
	case errors.Is(err, ErrNotConfigured):
		return notConfigured(region)
	case errors.As(err, &in):
		return mount.FieldError(in.Field, "%s", in.Err.Error())
	}
	// store.ErrNotFound (a review gone between its lookup and this call)
	// is left to the server, which names the route's review and id.
	return err
}

func notConfigured(regions ...string) *mount.Problem {
	e := mount.Problemf(http.StatusNotImplemented, "reviews-not-configured",
		"reviews are not configured in region %s on this server; an operator enables them per region (review.Config.Regions)",
		strings.Join(regions, ", "))
	e.Title = "Reviews are not configured in this region"
	return e
}
