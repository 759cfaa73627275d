// Package batchapi is the HTTP face of the batch lane: the /v1/batches
// routes, mounted with the review plug-in's routes through
// internal/httpapi/mount and served over a Service (package review
// implements it). A batch is a manifest of many reviews, or of generic
// extraction items, sent to a provider's batch API; the routes show its
// progress and every item's state (and an extraction item's result), and
// cancel it.
package batchapi

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/review/batchlane"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/reviewapi"
	"github.com/ratelane/ratelane/internal/store"
)

// MaxBatchBody bounds the JSON body of POST /v1/batches: a sweep sends
// many small diffs; a larger sweep is split into several batches.
const MaxBatchBody = 64 << 20

// ErrConflict is what a Service's error wraps for a cancel of a batch that
// is done; the API answers 409.
var ErrConflict = errors.New("conflict")

// Batch is a batch's progress as the API shows it.
type Batch struct {
	ID       string            `json:"id"`
	Region   string            `json:"region"`
	Tenant   string            `json:"tenant"`
	Provider string            `json:"provider" doc:"the provider profile whose batch API the items go to"`
	State    string            `json:"state" enum:"running,canceling,done" doc:"done once every item is succeeded, failed or canceled"`
	Deadline time.Time         `json:"deadline" doc:"past it, items that are not final end with reason deadline_exceeded"`
	Counts   store.BatchCounts `json:"counts" doc:"items by state: pending (waiting for a provider batch), submitted, succeeded, failed, canceled"`
	Summary  batchlane.Summary `json:"summary" doc:"the manifest: reviews (their ids, each a review of GET /v1/reviews/{id}), items, depth, provider"`
	Chunks   []Chunk           `json:"chunks,omitempty" doc:"the provider batches (GET /v1/batches/{id} only)"`
	Items    []Item            `json:"items,omitempty" doc:"a page of the items (GET /v1/batches/{id} only)"`
	// NextItems is the items_after of the next page of items.
	NextItems string    `json:"next_items,omitempty" doc:"pass as items_after= for the next page of items; absent on the last"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Chunk is one provider batch of a batch.
type Chunk struct {
	Key      string            `json:"key"`
	State    string            `json:"state" enum:"planned,uploaded,submitted,in_progress,results_ready,reconciled"`
	BatchID  string            `json:"provider_batch_id,omitempty" doc:"the provider's batch id, once created"`
	Items    int               `json:"items"`
	Refusals int               `json:"refusals,omitempty" doc:"429s on upload and create"`
	Status   llmbatch.Status   `json:"status" doc:"the last polled status"`
	Summary  *llmbatch.Summary `json:"summary,omitempty" doc:"the reconciliation's counts: every item accounted for"`
}

// Item is one item of a batch: one part of one review.
type Item struct {
	CustomID    string `json:"custom_id" doc:"joins the provider's result line to the item"`
	Review      string `json:"review_id"`
	Part        int    `json:"part"`
	State       string `json:"state" enum:"pending,submitted,succeeded,failed,canceled"`
	Attempts    int    `json:"attempts" doc:"provider batches the item went out in"`
	Chunk       string `json:"chunk,omitempty"`
	Disposition string `json:"disposition,omitempty" enum:"succeeded,failed,canceled,requeue"`
	Reason      string `json:"reason,omitempty" doc:"why: expired, errored:<type>, missing_from_results, invalid_output (extractions: invalid_output:malformed|schema|too_large), deadline_exceeded, canceled, attempts_exhausted:<last>"`
	// Result is a succeeded extraction item's published result.
	Result    *batchlane.ExtractionResult `json:"result,omitempty" doc:"a succeeded extraction item's result: output (valid against its schema), provider, input_tokens, output_tokens"`
	UpdatedAt time.Time                   `json:"updated_at"`
}

// Review is one review of a submission: the batch lane's own, so that a
// submission reaches the manifest without a copy.
type Review = batchlane.Review

// Submission is a validated POST /v1/batches request.
type Submission struct {
	Region      string
	Tenant      string
	Provider    string
	Deadline    time.Time
	MaxAttempts int
	// OnOverload is reject (default), degrade or queue
	// (batchlane.Overload*).
	OnOverload string
	Reviews    []Review
	// Extractions are generic extraction items (a manifest carries
	// reviews or extractions, not both).
	Extractions []Extraction
}

// Extraction is one extraction item of a submission (the batch lane's).
type Extraction = batchlane.Extraction

// ItemParams pages a batch's items.
type ItemParams struct {
	State string
	After string
	Limit int
}

// ListParams filters a region's batches.
type ListParams struct {
	Tenant string
	State  string
	Before string
	Limit  int
}

// Service runs batches. Errors: one wrapping reviewapi.ErrNotConfigured
// (501), a *reviewapi.InputError (400), store.ErrNotFound (404), one
// wrapping ErrConflict (409).
type Service interface {
	SubmitBatch(ctx context.Context, sub Submission) (Batch, error)
	Batch(ctx context.Context, region, id string) (Batch, error)
	BatchItems(ctx context.Context, region, id string, p ItemParams) ([]Item, error)
	ListBatches(ctx context.Context, region string, p ListParams) ([]Batch, error)
	CancelBatch(ctx context.Context, region, id string) (Batch, error)
}

// batchRequest is the body of POST /v1/batches.
type batchRequest struct {
	Region      string            `json:"region" required:"true" doc:"the region the diffs, jobs and findings live in"`
	Provider    string            `json:"provider,omitempty" doc:"an openai, openai-compatible or anthropic profile of the region; default the region's default profile"`
	Deadline    *time.Time        `json:"deadline,omitempty" doc:"RFC 3339; default 48 h from now. A manifest predicted to finish past it is refused, degraded or queued by on_overload; an item that can no longer finish before it ends with reason deadline_exceeded"`
	MaxAttempts int               `json:"max_attempts,omitempty" doc:"provider batches one item may go out in (expired or failed transiently, it is requeued); default 3, at most 10"`
	OnOverload  string            `json:"on_overload,omitempty" enum:"reject,degrade,queue" doc:"what a manifest predicted to finish past its deadline gets (the lane's backlog of the provider, the submit key, the provider's batch queue limits): reject (default) answers 429 with Retry-After (400 on deadline when even an idle lane could not make it), degrade plans it at depth fast when that finishes in time, queue accepts it (items that cannot finish end deadline_exceeded). summary.intake shows the prediction"`
	Reviews     []batchReview     `json:"reviews,omitempty" doc:"the manifest: at most 10000 reviews (or extractions instead)"`
	Extractions []batchExtraction `json:"extractions,omitempty" doc:"the manifest as generic extraction items instead of reviews: at most 50000"`
	Tenant      string            `json:"tenant,omitempty" doc:"admin keys only; other keys always use their own tenant"`
}

type batchReview struct {
	Repo    string               `json:"repo,omitempty"`
	Change  string               `json:"change,omitempty"`
	BaseSHA string               `json:"base_sha,omitempty"`
	HeadSHA string               `json:"head_sha,omitempty"`
	Diff    string               `json:"diff" required:"true" doc:"a unified diff, at most 8 MiB; stored once in the region"`
	Publish *reviewPublishOption `json:"publish,omitempty" doc:"where this review's findings go once aggregated; default none"`
}

type batchExtraction struct {
	ID          string          `json:"id" required:"true" doc:"the item's custom_id: ^[a-zA-Z0-9_-]{1,64}$, unique in the manifest"`
	Input       string          `json:"input" required:"true" doc:"the text to extract from, at most 256 KiB; stored once in the region, never logged"`
	Instruction string          `json:"instruction,omitempty" doc:"what to extract, at most 8 KiB; or template"`
	Template    string          `json:"template,omitempty" enum:"classify,extract,summarize" doc:"a named prompt template instead of instruction"`
	Schema      json.RawMessage `json:"schema" required:"true" doc:"the JSON Schema (root type object, at most 64 KiB, $ref only to its own $defs) the answer must satisfy; sent as structured output, checked again on every answer. It must keep the providers' structured-output rules (every object closed with additionalProperties false, every property required: a field that may be absent is a nullable type) and be satisfiable, else the manifest is refused with a 400 on this field"`
}

type reviewPublishOption struct {
	Kind   string `json:"kind" required:"true" enum:"none,rdjsonl,webhook,github"`
	Target string `json:"target,omitempty"`
}

// batchList is a page of GET /v1/batches.
type batchList struct {
	Batches    []Batch `json:"batches"`
	NextCursor string  `json:"next_cursor,omitempty" doc:"pass as after= for the next page; absent on the last page"`
}

var batchVars = map[string]string{"id": "BATCH_ID"}

var batchRegion = mount.Query("region", "the batch's region; without it every region the key may use is searched")

// Routes returns the batch endpoints over svc.
func Routes(svc Service) mount.Mount {
	return func(h mount.Host) []mount.Route {
		s := &server{h: h, svc: svc}
		region := h.Regions()[0]
		return []mount.Route{
			{Method: "POST", Path: "/v1/batches", Name: "createBatch", Resource: "batch", Role: auth.RoleProducer,
				Summary: "Send a manifest of reviews, or of generic extraction items (input, instruction or template, JSON Schema), to the batch lane (a provider's batch API, about half the price, answers within 24 h): returns the batch id. " +
					"provider names a profile of kind openai, openai-compatible or anthropic in the region (the config file's providers; the example's is called openai): the built-in rules provider has no batch API (400 on provider)",
				Handle: s.handleCreate, Request: batchRequest{}, Response: Batch{}, Status: 202,
				Example: `{"region":"` + region + `","provider":"openai","reviews":[{"repo":"acme/app","change":"42","diff":"diff --git a/a.go b/a.go\n--- a/a.go\n+++ b/a.go\n@@ -1 +1,2 @@\n package a\n+// TODO: x\n"}]}`},
			{Method: "GET", Path: "/v1/batches", Name: "listBatches", Role: auth.RoleProducer,
				Summary: "List batches, newest first, with their item counts",
				Handle:  s.handleList, Response: batchList{}, Status: 200,
				Params: []mount.Param{mount.Query("region", "list one region; without it every region the key may use, merged newest first"),
					mount.Query("state", "only batches in this state", "running", "canceling", "done"),
					mount.Query("tenant", "admin keys only: only this tenant's batches"),
					mount.Query("after", "next_cursor of the previous page"), mount.Query("limit", "page size, 1 to 500; default 100")}},
			{Method: "GET", Path: "/v1/batches/{id}", Name: "getBatch", Resource: "batch", Role: auth.RoleProducer,
				Summary: "Get a batch: progress, its provider batches and a page of its items with their state, disposition and reason, and each succeeded extraction item's result (its schema-valid output)",
				Handle:  s.handleGet, Response: Batch{}, Status: 200, Vars: batchVars,
				Params: []mount.Param{batchRegion, mount.Query("items_state", "only items in this state", "pending", "submitted", "succeeded", "failed", "canceled"),
					mount.Query("items_after", "next_items of the previous page"), mount.Query("items_limit", "items per page, 1 to 500; default 100")},
				VarDocs: map[string]string{"BATCH_ID": "a batch id, from POST /v1/batches"}},
			{Method: "POST", Path: "/v1/batches/{id}/cancel", Name: "cancelBatch", Resource: "batch", Role: auth.RoleProducer,
				Summary: "Cancel a batch: pending items end canceled, running provider batches are cancelled (what already finished is still published); 409 once done",
				Handle:  s.handleCancel, Response: Batch{}, Status: 200, Params: []mount.Param{batchRegion}, Vars: batchVars},
		}
	}
}

type server struct {
	h   mount.Host
	svc Service
}

func (s *server) handleCreate(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req batchRequest
	if err := s.h.Decode(w, r, &req, MaxBatchBody, "a manifest may hold at most 64 MiB: split the sweep into several batches"); err != nil {
		return err
	}
	sub := Submission{Region: req.Region, Tenant: p.Tenant, Provider: req.Provider, MaxAttempts: req.MaxAttempts, OnOverload: req.OnOverload}
	if p.Role == auth.RoleAdmin && req.Tenant != "" {
		sub.Tenant = req.Tenant
	}
	if req.Deadline != nil {
		sub.Deadline = *req.Deadline
	}
	switch {
	case sub.Region == "":
		return mount.FieldError("region", "region is required: one of %s", strings.Join(s.h.Regions(), ", "))
	case len(req.Reviews) > 0 && len(req.Extractions) > 0:
		return mount.FieldError("extractions", "a batch carries reviews or extractions, not both: send two batches")
	case len(req.Reviews) == 0 && len(req.Extractions) == 0:
		return mount.FieldError("reviews", "reviews (or extractions) is required: at least one {diff} to review or {id, input, instruction, schema} to extract")
	case len(req.Extractions) > batchlane.MaxExtractions:
		return mount.FieldError("extractions", "a batch holds at most %d extraction items, not %d: split it", batchlane.MaxExtractions, len(req.Extractions))
	case len(req.Reviews) > batchlane.MaxReviews:
		return mount.FieldError("reviews", "a batch holds at most %d reviews, not %d: split the sweep", batchlane.MaxReviews, len(req.Reviews))
	case sub.MaxAttempts < 0 || sub.MaxAttempts > 10:
		return mount.FieldError("max_attempts", "max_attempts must be between 1 and 10 (0 for the default 3), not %d", sub.MaxAttempts)
	case req.Deadline != nil && !req.Deadline.After(time.Now()):
		return mount.FieldError("deadline", "deadline %s has passed", req.Deadline.Format(time.RFC3339))
	case !slices.Contains([]string{"", batchlane.OverloadReject, batchlane.OverloadDegrade, batchlane.OverloadQueue}, req.OnOverload):
		return mount.FieldError("on_overload", "on_overload must be reject, degrade or queue, not %q", req.OnOverload)
	}
	for field, v := range map[string]string{"provider": sub.Provider, "tenant": sub.Tenant} {
		if len(v) > job.MaxNameLen || strings.ContainsAny(v, "\x00\n\r\t") {
			return mount.FieldError(field, "%s must be at most %d bytes without control characters", field, job.MaxNameLen)
		}
	}
	for i, rv := range req.Reviews {
		field := "reviews[" + strconv.Itoa(i) + "]"
		switch {
		case rv.Diff == "":
			return mount.FieldError(field+".diff", "%s.diff is required: the unified diff text, as git diff prints it", field)
		case len(rv.Diff) > reviewapi.MaxReviewDiffBytes:
			return mount.Problemf(http.StatusRequestEntityTooLarge, "payload-too-large",
				"%s.diff is %d bytes; a review takes at most %d bytes (8 MiB)", field, len(rv.Diff), reviewapi.MaxReviewDiffBytes)
		}
		for f, v := range map[string]string{"repo": rv.Repo, "change": rv.Change, "base_sha": rv.BaseSHA, "head_sha": rv.HeadSHA} {
			if len(v) > job.MaxNameLen || strings.ContainsAny(v, "\x00\n\r\t") {
				return mount.FieldError(field+"."+f, "%s.%s must be at most %d bytes without control characters", field, f, job.MaxNameLen)
			}
		}
		pub := pipeline.Publish{Kind: pipeline.PublishNone}
		if rv.Publish != nil {
			pub = pipeline.Publish{Kind: rv.Publish.Kind, Target: rv.Publish.Target}
			if !slices.Contains([]string{pipeline.PublishNone, pipeline.PublishRDJSONL, pipeline.PublishWebhook, pipeline.PublishGitHub}, pub.Kind) {
				return mount.FieldError(field+".publish.kind", "publish.kind must be none, rdjsonl, webhook or github, not %q", pub.Kind)
			}
		}
		sub.Reviews = append(sub.Reviews, Review{Repo: rv.Repo, Change: rv.Change, BaseSHA: rv.BaseSHA, HeadSHA: rv.HeadSHA,
			Diff: []byte(rv.Diff), Publish: pub})
	}
	for _, x := range req.Extractions {
		sub.Extractions = append(sub.Extractions, Extraction(x))
	}
	if err := batchlane.CheckExtractions(sub.Extractions); err != nil {
		var xe *batchlane.ExtractionError
		if errors.As(err, &xe) {
			// The problem names the field; the detail says what is wrong.
			return mount.FieldError("extractions["+strconv.Itoa(xe.Index)+"]."+xe.Field, "%v", xe.Err)
		}
		return err
	}
	if err := s.h.CheckRegion(p, sub.Region, "region"); err != nil {
		return err
	}
	b, err := s.svc.SubmitBatch(context.WithoutCancel(r.Context()), sub)
	if err != nil {
		return batchError(err, sub.Region)
	}
	s.h.Notify(b.Region)
	w.Header().Set("Location", "/v1/batches/"+b.ID+"?region="+url.QueryEscape(b.Region))
	return mount.WriteJSON(w, http.StatusAccepted, b)
}

// tenantScope is the tenant a listing is limited to: a producer's own
// (naming another is a 403), an admin's choice (empty for all).
func tenantScope(r *http.Request, p auth.Principal) (string, error) {
	q := r.URL.Query().Get("tenant")
	if p.Role == auth.RoleAdmin {
		return q, nil
	}
	if q != "" && q != p.Tenant {
		return "", mount.Problemf(http.StatusForbidden, "forbidden", "this API key sees only its own tenant's batches; drop the tenant parameter")
	}
	return p.Tenant, nil
}

func pageLimit(r *http.Request, name string) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 500 {
		return 0, mount.FieldError(name, "%s must be between 1 and 500, not %q", name, v)
	}
	return n, nil
}

func (s *server) handleList(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	regions, err := s.h.SearchRegions(r, p)
	if err != nil {
		return err
	}
	tenant, err := tenantScope(r, p)
	if err != nil {
		return err
	}
	limit, err := pageLimit(r, "limit")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if st := q.Get("state"); st != "" && !slices.Contains([]string{store.BatchRunning, store.BatchCanceling, store.BatchDone}, st) {
		return mount.FieldError("state", "state must be running, canceling or done, not %q", st)
	}
	lp := ListParams{Tenant: tenant, State: q.Get("state"), Before: q.Get("after"), Limit: limit + 1}
	var all []Batch
	for _, region := range regions {
		bs, err := s.svc.ListBatches(r.Context(), region, lp)
		if errors.Is(err, reviewapi.ErrNotConfigured) {
			continue
		} else if err != nil {
			return err
		}
		all = append(all, bs...)
	}
	// Ids are time-ordered (UUIDv7): newest first across regions.
	slices.SortFunc(all, func(a, b Batch) int { return strings.Compare(b.ID, a.ID) })
	out := batchList{Batches: all}
	if len(all) > limit {
		out.Batches, out.NextCursor = all[:limit], all[limit-1].ID
	}
	if out.Batches == nil {
		out.Batches = []Batch{}
	}
	return mount.WriteJSON(w, http.StatusOK, out)
}

func (s *server) handleGet(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	b, err := s.find(r, p)
	if err != nil {
		return err
	}
	limit, err := pageLimit(r, "items_limit")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	items, err := s.svc.BatchItems(r.Context(), b.Region, b.ID, ItemParams{State: q.Get("items_state"), After: q.Get("items_after"), Limit: limit + 1})
	if err != nil {
		return batchError(err, b.Region)
	}
	if len(items) > limit {
		items, b.NextItems = items[:limit], items[limit-1].CustomID
	}
	b.Items = items
	return mount.WriteJSON(w, http.StatusOK, b)
}

func (s *server) handleCancel(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	b, err := s.find(r, p)
	if err != nil {
		return err
	}
	b, err = s.svc.CancelBatch(context.WithoutCancel(r.Context()), b.Region, b.ID)
	if err != nil {
		return batchError(err, b.Region)
	}
	s.h.Notify(b.Region)
	return mount.WriteJSON(w, http.StatusOK, b)
}

// find looks a batch up by id in the request's regions, with the rules of
// jobs: another tenant's batch is a 404 like a missing one.
func (s *server) find(r *http.Request, p auth.Principal) (Batch, error) {
	id := r.PathValue("id")
	regions, err := s.h.SearchRegions(r, p)
	if err != nil {
		return Batch{}, err
	}
	if !mount.ValidID(id) {
		return Batch{}, mount.NotFound("batch " + id)
	}
	for _, region := range regions {
		b, err := s.svc.Batch(r.Context(), region, id)
		switch {
		case errors.Is(err, reviewapi.ErrNotConfigured), errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return Batch{}, batchError(err, region)
		}
		if p.Role != auth.RoleAdmin && b.Tenant != p.Tenant {
			break
		}
		return b, nil
	}
	return Batch{}, mount.NotFound("batch " + id)
}

func batchError(err error, region string) error {
	var in *reviewapi.InputError
	var late *batchlane.LateError
	switch {
	case errors.As(err, &late) && late.Alone:
		return mount.FieldError("deadline", "%s", late.Detail)
	case errors.As(err, &late):
		// As for a job refused for overload: 429 with when to retry.
		e := mount.Problemf(http.StatusTooManyRequests, "batch-late", "%s", late.Detail)
		e.Title = "The batch is predicted to finish past its deadline"
		e.Header = http.Header{"Retry-After": {strconv.FormatInt(int64(math.Ceil(late.RetryAfter.Seconds())), 10)}}
		return e
	case errors.Is(err, reviewapi.ErrNotConfigured):
		e := mount.Problemf(http.StatusNotImplemented, "reviews-not-configured",
			"reviews (and their batch lane) are not configured in region %s on this server", region)
		e.Title = "Reviews are not configured in this region"
		return e
	case errors.As(err, &in):
		return mount.FieldError(in.Field, "%s", in.Err.Error())
	case errors.Is(err, ErrConflict):
		return mount.Problemf(http.StatusConflict, "conflict", "%s", err.Error())
	}
	// store.ErrNotFound (a batch gone between its lookup and this call)
	// is left to the server, which names the route's batch and id.
	return err
}
