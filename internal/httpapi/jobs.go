package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Overload policies of POST /v1/jobs.
const (
	overloadReject  = "reject"
	overloadDegrade = "degrade"
	overloadQueue   = "queue"
)

// createJobRequest is the body of POST /v1/jobs.
type createJobRequest struct {
	Kind           string          `json:"kind" required:"true" doc:"job kind, e.g. email.send; the built-in kinds listed as reserved_kinds in GET /v1 are refused with 422"`
	Region         string          `json:"region" required:"true" doc:"region the job, its payload and results live in"`
	Lane           job.Lane        `json:"lane,omitempty" enum:"interactive,batch" doc:"interactive (someone waits; 30 s budget) or batch (default)"`
	Tenant         string          `json:"tenant,omitempty" doc:"admin keys only; other keys always use their own tenant"`
	LimitKeys      []string        `json:"limit_keys" required:"true" doc:"1 to 4 limit keys that must all admit the job"`
	Payload        json.RawMessage `json:"payload,omitempty" doc:"any JSON value, at most 256 KiB; pass a reference to larger content"`
	IdempotencyKey string          `json:"idempotency_key,omitempty" doc:"or the Idempotency-Key header: a retry with the same key and body returns the first job; the overload check comes first, so a retry while the lane is past its budget is refused 429 unless it sends on_overload queue"`
	RunAt          *time.Time      `json:"run_at,omitempty" doc:"when the job becomes eligible (at most 7 days ahead)"`
	DelaySeconds   *float64        `json:"delay_seconds,omitempty" doc:"or: seconds from now until the job becomes eligible"`
	Deadline       *time.Time      `json:"deadline,omitempty" doc:"the job ends as deadline_exceeded if not done by then"`
	Priority       int             `json:"priority,omitempty" doc:"-100..100, higher first within a tenant's group"`
	Cost           int64           `json:"cost,omitempty" doc:"what one start takes from each key's bucket; default 1"`
	Budgets        *job.Budgets    `json:"budgets,omitempty" doc:"maximum attempts per failure class; zero fields take defaults"`
	OnOverload     string          `json:"on_overload,omitempty" enum:"reject,degrade,queue" doc:"what to do when the predicted wait exceeds the lane's budget; default reject for interactive, queue for batch"`
}

// jobView is a job as the API shows it: the job's fields plus, in lease
// responses, the lease token, and in create responses the predicted wait.
type jobView struct {
	*job.Job
	LeaseToken           string       `json:"lease_token,omitempty" doc:"present only in lease responses: pass it with every outcome"`
	PredictedWaitSeconds *float64     `json:"predicted_wait_seconds,omitempty" doc:"present in create responses: the predicted queue wait"`
	Unserved             *unserved    `json:"unserved,omitempty" doc:"create responses only, when nothing was seen leasing the job's kind: predicted_wait_seconds is then a lower bound, and the job waits until a worker for its kind runs"`
	WaitingFor           *waitingFor  `json:"waiting_for,omitempty" doc:"GET /v1/jobs/{id} of a waiting or retry_scheduled job: what it waits for and when it is predicted to start"`
	Schedule             *jobSchedule `json:"schedule,omitempty" doc:"GET /v1/jobs/{id} of a job a schedule produced: the schedule and the tick"`
}

// jobList is the answer of the list endpoints.
type jobList struct {
	Jobs       []jobView `json:"jobs"`
	NextCursor string    `json:"next_cursor,omitempty" doc:"pass as after= for the next page; absent on the last page"`
}

func (s *Server) handleCreateJob(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req createJobRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	now := s.cfg.Now()
	j, err := s.buildJob(r, p, &req, now)
	if err != nil {
		return err
	}
	st := s.cfg.Regions[j.Region]
	limits := s.newLimitMemo(st)
	if err := limits.checkCost(r.Context(), j); err != nil {
		return err
	}
	pred, err := s.predictWait(r.Context(), st, j, limits)
	if err != nil {
		return err
	}
	if err := s.admitOverload(j, req.OnOverload, pred); err != nil {
		return err
	}
	res, err := s.jobs[j.Region].Insert(r.Context(), []*job.Job{j}, s.cfg.DefaultLimit)
	if err != nil {
		return err
	}
	got := res[0].Job
	if res[0].Existing {
		if diff := requestDiff(got, j); len(diff) > 0 {
			return problemf(http.StatusUnprocessableEntity, "idempotency-mismatch",
				"idempotency key %q was first used for job %s with a different %s; use a new key for a different request",
				j.IdempotencyKey, got.ID, strings.Join(diff, ", "))
		}
		w.Header().Set("Idempotent-Replayed", "true")
	} else {
		s.backlog.added(got)
		s.notify(j.Region)
	}
	crashpoint.Hit(crashpoint.CommitBeforeAck)
	secs := pred.Wait.Seconds()
	view := jobView{Job: got, PredictedWaitSeconds: &secs, Unserved: s.unservedNote(got, pred)}
	w.Header().Set("Location", "/v1/jobs/"+got.ID+"?region="+url.QueryEscape(got.Region))
	if crashpoint.Enabled { // test builds only; a constant false elsewhere
		return ackThenCrash(w, http.StatusCreated, view, crashpoint.AckAfterCommit)
	}
	return writeJSON(w, http.StatusCreated, view)
}

// buildJob turns a create request into a prepared, validated job: the
// tenant comes from the key (admins may name one), the schedule from run_at
// or delay_seconds, and the region must be one the key may use.
func (s *Server) buildJob(r *http.Request, p auth.Principal, req *createJobRequest, now time.Time) (*job.Job, error) {
	// Built-in kinds name other records (a subscriber, a review) and run
	// with ratelane's credentials; only ratelane creates them, for every
	// role, admins included.
	if err := job.CheckPublicKind("kind", req.Kind); err != nil {
		return nil, err
	}
	idem, err := idempotencyKey(r, req.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	payload, err := payloadBytes(req.Payload)
	if err != nil {
		return nil, err
	}
	delay, err := scheduleDelay(req)
	if err != nil {
		return nil, err
	}
	if !slices.Contains([]string{"", overloadReject, overloadDegrade, overloadQueue}, req.OnOverload) {
		return nil, fieldError("on_overload", "on_overload must be reject, degrade or queue, not %q", req.OnOverload)
	}
	j := &job.Job{
		Kind: req.Kind, Region: req.Region, Lane: req.Lane, Tenant: p.Tenant, LimitKeys: req.LimitKeys,
		Payload: payload, IdempotencyKey: idem, Priority: req.Priority, Cost: req.Cost,
	}
	if p.Role == auth.RoleAdmin && req.Tenant != "" {
		j.Tenant = req.Tenant
	}
	if req.RunAt != nil {
		j.EligibleAt = *req.RunAt
	}
	if req.Deadline != nil {
		j.Deadline = *req.Deadline
	}
	if req.Budgets != nil {
		j.Budgets = *req.Budgets
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	j.Prepare(id.String(), now, delay, false)
	if err := j.Validate(s.regions); err != nil {
		return nil, err
	}
	if err := s.checkRegion(p, j.Region, "region"); err != nil {
		return nil, err
	}
	return j, j.CheckSchedule(now)
}

// idempotencyKey takes the key from the Idempotency-Key header or the body;
// both may be given only when they agree.
func idempotencyKey(r *http.Request, body string) (string, error) {
	header := r.Header.Get("Idempotency-Key")
	if header != "" && body != "" && header != body {
		return "", fieldError("idempotency_key", "the Idempotency-Key header and the idempotency_key field differ; send one of them")
	}
	if header != "" {
		return header, nil
	}
	return body, nil
}

// payloadBytes returns the payload compacted, so that equal payloads are
// equal bytes for the idempotency comparison.
func payloadBytes(raw json.RawMessage) ([]byte, error) {
	out, err := compactJSON(raw)
	if err != nil {
		return nil, fieldError("payload", "payload is not valid JSON")
	}
	return out, nil
}

// scheduleDelay validates delay_seconds against run_at and the 7-day cap.
func scheduleDelay(req *createJobRequest) (time.Duration, error) {
	if req.DelaySeconds == nil {
		return 0, nil
	}
	d := *req.DelaySeconds
	switch {
	case req.RunAt != nil:
		return 0, fieldError("delay_seconds", "send run_at or delay_seconds, not both")
	case d < 0:
		return 0, fieldError("delay_seconds", "delay_seconds must not be negative, got %v", d)
	case d > job.MaxDelay.Seconds():
		return 0, fieldError("delay_seconds", "a job may be delayed at most %v seconds (7 days), got %v", job.MaxDelay.Seconds(), d)
	}
	return time.Duration(d * float64(time.Second)), nil
}

// requestDiff names the fields in which a retried create request differs
// from the job its idempotency key already created. Times are left out:
// delay_seconds makes every retry's eligible time differ.
func requestDiff(existing, retry *job.Job) []string {
	var diff []string
	add := func(differs bool, field string) {
		if differs {
			diff = append(diff, field)
		}
	}
	prev, _ := compactJSON(existing.Payload)
	add(existing.Kind != retry.Kind, "kind")
	add(existing.Lane != retry.Lane, "lane")
	add(!slices.Equal(existing.LimitKeys, retry.LimitKeys), "limit_keys")
	add(!bytes.Equal(prev, retry.Payload), "payload")
	add(existing.Priority != retry.Priority, "priority")
	add(existing.Cost != retry.Cost, "cost")
	add(existing.Budgets != retry.Budgets, "budgets")
	return diff
}

func (s *Server) handleGetJob(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	j, st, err := s.findJob(r.Context(), r, p, ownTenant)
	if err != nil {
		return err
	}
	v := jobView{Job: s.shown(j)}
	if v.Schedule, err = scheduleOf(r.Context(), st, j); err != nil {
		return err
	}
	if j.State == job.StateWaiting || j.State == job.StateRetryScheduled {
		if v.WaitingFor, err = s.explainWait(r.Context(), st, j); err != nil {
			return err
		}
	}
	return writeJSON(w, http.StatusOK, v)
}

// shown is a job as the API returns it: the result of a kind a mounted
// plug-in re-renders (mount.Host.ShowResult) is re-rendered. The webhooks
// plug-in shows a delivery's status and timing alone: rows written before
// results were bounded held the subscriber's answer, and what a subscriber
// answers is never shown to anyone through a job.
func (s *Server) shown(j *job.Job) *job.Job {
	if j == nil || len(j.Result) == 0 {
		return j
	}
	show := s.results[j.Kind]
	if show == nil {
		return j
	}
	cp := *j
	cp.Result = show(j.Result)
	return &cp
}

func (s *Server) handleListJobs(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	lp, err := listParams(r, p)
	if err != nil {
		return err
	}
	regions, err := s.searchRegions(r, p)
	if err != nil {
		return err
	}
	jobs, next, err := s.listAcross(r.Context(), regions, lp, nil)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, summaries(jobs, next))
}

// summaries renders a page of jobs without payloads, results and
// histories, which GET /v1/jobs/{id} returns; a page stays small.
func summaries(jobs []*job.Job, next string) jobList {
	out := jobList{Jobs: make([]jobView, len(jobs)), NextCursor: next}
	for i, j := range jobs {
		cp := *j
		cp.Payload, cp.Result, cp.History = nil, nil, nil
		out.Jobs[i] = jobView{Job: &cp}
	}
	return out
}

// maxPage is the largest page a list endpoint returns (the stores serve
// up to 1000 rows a call and the API asks for one more to find a next page).
const maxPage = 500

// defaultPage is a list endpoint's page size when the request names none:
// the stores' own default page.
const defaultPage = store.DefaultListLimit

// readLimit reads a list endpoint's limit parameter: defaultPage when
// absent, else a whole number from 1 to maxPage.
func readLimit(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return defaultPage, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPage {
		return 0, fieldError("limit", "limit must be a whole number from 1 to %d, got %q", maxPage, v)
	}
	return n, nil
}

// listTenant is the tenant a list request sees: an admin's tenant filter
// (empty: every tenant), or the key's own tenant for any other role, which
// may name no other (403); what names the listed things in the refusal.
func listTenant(p auth.Principal, tenant, what string) (string, error) {
	if p.Role == auth.RoleAdmin {
		return tenant, nil
	}
	if tenant != "" && tenant != p.Tenant {
		return "", problemf(http.StatusForbidden, "forbidden", "this API key sees only its own tenant's %s; drop the tenant parameter", what)
	}
	return p.Tenant, nil
}

// listParams reads the filters and cursor shared by the list endpoints.
// Producers always see only their own tenant.
func listParams(r *http.Request, p auth.Principal) (store.ListParams, error) {
	q := r.URL.Query()
	lp := store.ListParams{
		State: job.State(q.Get("state")), Kind: q.Get("kind"), Lane: job.Lane(q.Get("lane")),
		After: q.Get("after"), LimitKey: q.Get("limit_key"),
	}
	var err error
	if lp.Tenant, err = listTenant(p, q.Get("tenant"), "jobs"); err != nil {
		return lp, err
	}
	switch {
	case lp.State != "" && !lp.State.Valid():
		return lp, fieldError("state", "unknown state %q; states are %s", lp.State, joinStates())
	case lp.Lane != "" && !lp.Lane.Valid():
		return lp, fieldError("lane", "lane must be interactive or batch, not %q", lp.Lane)
	case len(lp.Kind) > job.MaxNameLen || len(lp.Tenant) > job.MaxNameLen || len(lp.LimitKey) > job.MaxNameLen || len(lp.After) > 64:
		return lp, badRequest("kind, tenant and limit_key are at most %d bytes and after at most 64", job.MaxNameLen)
	}
	lp.Limit, err = readLimit(q)
	return lp, err
}

func joinStates() string {
	names := make([]string, len(job.States))
	for i, st := range job.States {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

func (s *Server) handleCancelJob(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	j, _, err := s.findJob(r.Context(), r, p, ownTenant)
	if err != nil {
		return err
	}
	if j.State.Final() {
		return problemf(http.StatusConflict, "conflict", "job %s is already %s; only a job that is not published or terminal can be cancelled", j.ID, j.State)
	}
	got, err := s.jobs[j.Region].Cancel(context.WithoutCancel(r.Context()), j.ID)
	if err != nil {
		return err
	}
	s.notify(j.Region) // a cancelled running job released its keys
	return writeJSON(w, http.StatusOK, jobView{Job: s.shown(got)})
}
