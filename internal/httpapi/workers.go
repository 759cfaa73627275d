package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/ratelimit"
	"github.com/ratelane/ratelane/internal/store"
)

// Bounds of the worker endpoints.
const (
	maxLeaseJobs    = 100
	maxLeaseSeconds = 600
	maxWaitSeconds  = 30
	maxKinds        = 50
	maxErrorLen     = 500
	maxHeaders      = 64
	maxHeaderValue  = 4 << 10
	// pollEvery is how often a long poll retries the lease when nothing
	// woke it: another node may have inserted work, or a key refilled.
	pollEvery = 50 * time.Millisecond
)

// leaseRequest is the body of POST /v1/leases.
type leaseRequest struct {
	Region       string   `json:"region" required:"true" doc:"region to lease from"`
	Kinds        []string `json:"kinds" required:"true" doc:"job kinds this worker runs (1 to 50)"`
	Max          int      `json:"max,omitempty" doc:"most jobs to lease, 1 to 100; default 1"`
	LeaseSeconds int      `json:"lease_seconds,omitempty" doc:"lease length, 1 to 600; default 30; extend with heartbeat"`
	WaitSeconds  int      `json:"wait_seconds,omitempty" doc:"long poll: wait up to 30 s for work to be admitted; default 0"`
}

// leaseResponse is the answer of POST /v1/leases.
type leaseResponse struct {
	Jobs []jobView `json:"jobs" doc:"leased jobs with their lease_token; empty when nothing was admitted in time"`
}

// heartbeatRequest is the body of POST /v1/jobs/{id}/heartbeat.
type heartbeatRequest struct {
	LeaseToken   string `json:"lease_token" required:"true" doc:"the token the lease returned"`
	LeaseSeconds int    `json:"lease_seconds,omitempty" doc:"extend the lease to now + this, 1 to 600; default 30"`
}

// heartbeatResponse is the answer of a heartbeat.
type heartbeatResponse struct {
	ID             string    `json:"id"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
}

// completeRequest is the body of POST /v1/jobs/{id}/complete.
type completeRequest struct {
	LeaseToken string            `json:"lease_token" required:"true" doc:"the token the lease returned"`
	Result     json.RawMessage   `json:"result,omitempty" doc:"the job's result, any JSON value up to 256 KiB"`
	Usage      int64             `json:"usage,omitempty" doc:"actual cost of the attempt (e.g. tokens), reconciled against the job's cost"`
	Headers    map[string]string `json:"headers,omitempty" doc:"the upstream's raw response headers; remaining-quota headers slow the key before a 429"`
}

// failRequest is the body of POST /v1/jobs/{id}/fail.
type failRequest struct {
	LeaseToken    string `json:"lease_token" required:"true" doc:"the token the lease returned"`
	Retryable     bool   `json:"retryable" doc:"true for 5xx, timeouts, connection errors (transient budget); false ends the job as permanent_error"`
	InvalidOutput bool   `json:"invalid_output,omitempty" doc:"the upstream answered but its output failed validation (schema budget)"`
	Error         string `json:"error,omitempty" doc:"a short description, at most 500 bytes; never payload or upstream output"`
	Status        int    `json:"status,omitempty" doc:"the upstream's HTTP status, if any"`
	// Headers lets a worker forward a 503 as it came: with a Retry-After
	// it is congestion, not a failure (DESIGN.md, "attempt").
	Headers map[string]string `json:"headers,omitempty" doc:"the upstream's raw response headers; a 503 whose headers carry Retry-After or retry-after-ms is taken as rate limited (the key pauses, congestion budget), as on /rate-limited"`
}

// rateLimitedRequest is the body of POST /v1/jobs/{id}/rate-limited.
type rateLimitedRequest struct {
	LeaseToken        string            `json:"lease_token" required:"true" doc:"the token the lease returned"`
	RetryAfterSeconds *float64          `json:"retry_after_seconds,omitempty" doc:"the delay the upstream asked for; or send headers"`
	Headers           map[string]string `json:"headers,omitempty" doc:"the upstream's raw response headers (Retry-After, retry-after-ms, x-ratelimit-*, anthropic-ratelimit-*, RateLimit)"`
	Scope             string            `json:"scope,omitempty" doc:"the one limit key of the job that was limited; default all of them"`
	Status            int               `json:"status,omitempty" doc:"the upstream's status; default 429"`
}

// outcomeResponse is the answer of the outcome endpoints: where the job went.
type outcomeResponse struct {
	ID         string    `json:"id"`
	State      job.State `json:"state"`
	Reason     string    `json:"reason,omitempty"`
	EligibleAt time.Time `json:"eligible_at,omitzero" doc:"when a rescheduled job becomes eligible again"`
}

func (s *Server) handleCreateLease(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req leaseRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := s.checkLease(p, &req); err != nil {
		return err
	}

	tenant := p.Tenant // a worker key acts for its own tenant's jobs only
	if p.Role == auth.RoleAdmin {
		tenant = ""
	}
	jobs, err := s.leaseWait(r.Context(), req, tenant)
	if err != nil {
		return err
	}
	s.leased.put(jobs, s.cfg.Now())
	s.limits.dropJobs(jobs...)
	out := leaseResponse{Jobs: make([]jobView, len(jobs))}
	for i, j := range jobs {
		out.Jobs[i] = jobView{Job: j, LeaseToken: j.LeaseToken}
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) checkLease(p auth.Principal, req *leaseRequest) error {
	req.Max = defaultInt(req.Max, 1)
	req.LeaseSeconds = defaultInt(req.LeaseSeconds, int(job.DefaultLeaseFor/time.Second))
	switch {
	case req.Region == "":
		return fieldError("region", "region is required")
	case len(req.Kinds) == 0 || len(req.Kinds) > maxKinds:
		// Kinds are required so that an external worker never takes the
		// jobs of kinds an in-process engine runs.
		return fieldError("kinds", "name 1 to %d job kinds this worker runs, got %d", maxKinds, len(req.Kinds))
	case req.Max < 1 || req.Max > maxLeaseJobs:
		return fieldError("max", "max must be from 1 to %d, got %d", maxLeaseJobs, req.Max)
	case req.LeaseSeconds < 1 || req.LeaseSeconds > maxLeaseSeconds:
		return fieldError("lease_seconds", "lease_seconds must be from 1 to %d, got %d", maxLeaseSeconds, req.LeaseSeconds)
	case req.WaitSeconds < 0 || req.WaitSeconds > maxWaitSeconds:
		return fieldError("wait_seconds", "wait_seconds must be from 0 to %d, got %d", maxWaitSeconds, req.WaitSeconds)
	}
	for _, k := range req.Kinds {
		if k == "" || len(k) > job.MaxNameLen {
			return fieldError("kinds", "each kind must be 1 to %d bytes", job.MaxNameLen)
		}
		// Built-in kinds run only in ratelane's own engines: an external
		// worker leasing one would read its payload and could report a
		// delivery or a review part done without doing it.
		if err := job.CheckPublicKind("kinds", k); err != nil {
			return err
		}
	}
	return s.checkRegion(p, req.Region, "region")
}

func defaultInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// leaseWait leases at once and, for a long poll, again whenever the region
// is woken (an insert, a redrive, a finished attempt) or every pollEvery,
// until a job is admitted, the wait is over, the client disconnects or the
// server closes. Waiting uses the wall clock; admission uses Config.Now.
func (s *Server) leaseWait(ctx context.Context, req leaseRequest, tenant string) ([]*job.Job, error) {
	w := s.jobs[req.Region]
	if req.WaitSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.WaitSeconds)*time.Second)
		defer cancel()
	}
	timer := time.NewTimer(pollEvery)
	defer timer.Stop()
	for {
		woken := s.wakers[req.Region].wait() // before leasing, so no wake-up is missed
		// The region's writer applies the engine's batch share, so HTTP
		// workers and in-process ones follow one policy.
		jobs, err := w.Lease(ctx, engine.LeaseParams{
			Max: req.Max, LeaseFor: time.Duration(req.LeaseSeconds) * time.Second, Kinds: req.Kinds, Tenant: tenant,
		})
		if len(jobs) > 0 || req.WaitSeconds == 0 {
			return jobs, err
		}
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		timer.Reset(pollEvery)
		s.wakers[req.Region].blocking()
		select {
		case <-ctx.Done():
			return nil, nil // the wait is over (or the client left): nothing leased
		case <-s.closed:
			return nil, nil
		case <-woken:
		case <-timer.C:
		}
	}
}

func (s *Server) handleHeartbeatJob(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req heartbeatRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	req.LeaseSeconds = defaultInt(req.LeaseSeconds, int(job.DefaultLeaseFor/time.Second))
	if req.LeaseSeconds < 1 || req.LeaseSeconds > maxLeaseSeconds {
		return fieldError("lease_seconds", "lease_seconds must be from 1 to %d, got %d", maxLeaseSeconds, req.LeaseSeconds)
	}
	j, _, _, err := s.leasedJob(r, p, req.LeaseToken)
	if err != nil {
		return err
	}
	until, err := s.jobs[j.Region].Heartbeat(r.Context(), j.ID, req.LeaseToken, time.Duration(req.LeaseSeconds)*time.Second)
	if err != nil {
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			return leaseLost(j.ID, "the lease token no longer holds the job")
		}
		return err
	}
	s.leased.extended(j.ID, req.LeaseToken, until)
	return writeJSON(w, http.StatusOK, heartbeatResponse{ID: j.ID, LeaseExpiresAt: until})
}

func (s *Server) handleCompleteJob(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	return finishReport(s, w, r, p, func(req *completeRequest) (job.Outcome, string, error) {
		o, err := s.successOutcome(req)
		return o, req.LeaseToken, err
	})
}

// successOutcome checks a success report (result, usage, headers) and
// returns its outcome.
func (s *Server) successOutcome(req *completeRequest) (job.Outcome, error) {
	result, err := compactJSON(req.Result)
	if err != nil {
		return job.Outcome{}, fieldError("result", "result is not valid JSON")
	}
	if len(result) > job.MaxPayloadBytes {
		return job.Outcome{}, problemf(http.StatusRequestEntityTooLarge, "payload-too-large",
			"result is %d bytes, the limit is %d; store large results elsewhere and return a reference", len(result), job.MaxPayloadBytes)
	}
	if req.Usage < 0 {
		return job.Outcome{}, fieldError("usage", "usage must not be negative")
	}
	var hints []job.Hint
	if len(req.Headers) > 0 {
		// A success uses only the headers' hints, and no headers give none
		// (ratelimit's TestNoHeadersNoHints): skipping the parse took 3% of
		// the CPU of bench http-workers, half of the batch complete's.
		hints, _, err = s.parseHeaders(req.Headers, "")
		if err != nil {
			return job.Outcome{}, err
		}
	}
	return job.Outcome{Class: job.ClassSuccess, Result: result, Usage: req.Usage, Hints: hints}, nil
}

// finishReport is a worker's report route (complete, fail, rate-limited):
// it decodes the report R, checks it into an outcome with the lease token
// it names (outcome), and ends that attempt with it (finishOutcome), so
// that the three routes differ only in what their report means.
func finishReport[R any](s *Server, w http.ResponseWriter, r *http.Request, p auth.Principal, outcome func(*R) (job.Outcome, string, error)) error {
	var req R
	if err := decode(w, r, &req); err != nil {
		return err
	}
	o, token, err := outcome(&req)
	if err != nil {
		return err
	}
	return s.finishOutcome(w, r, p, token, o)
}

func (s *Server) handleFailJob(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	return finishReport(s, w, r, p, func(req *failRequest) (job.Outcome, string, error) {
		o, err := s.failOutcome(req)
		return o, req.LeaseToken, err
	})
}

// failOutcome checks a failure report (retryable, invalid output or
// permanent; error, status, headers) and returns its outcome. The single
// route and the batch complete share it, so an outcome means the same
// whichever way it arrives.
func (s *Server) failOutcome(req *failRequest) (job.Outcome, error) {
	if len(req.Error) > maxErrorLen {
		return job.Outcome{}, fieldError("error", "error is %d bytes; keep it under %d and never include payload or upstream output", len(req.Error), maxErrorLen)
	}
	if req.Status < 0 || req.Status > 999 {
		return job.Outcome{}, fieldError("status", "status must be an HTTP status code, got %d", req.Status)
	}
	class := job.ClassPermanent
	switch {
	case req.InvalidOutput:
		class = job.ClassInvalidOutput
	case req.Retryable:
		class = job.ClassTransient
	}
	o := job.Outcome{Class: class, Err: req.Error, Status: req.Status}
	hints, info, err := s.parseHeaders(req.Headers, "")
	if err != nil {
		return job.Outcome{}, err
	}
	// A failure reported here takes the 429 path only for what the
	// upstream itself called congestion: a 503 with a server-given delay
	// (RFC 9110 §15.6.4). A 503 without one stays transient, and so does
	// every other status: a 429 belongs on /rate-limited.
	if req.Status == http.StatusServiceUnavailable && info.HasRetryAfter && !req.InvalidOutput {
		o.Class, o.RetryAfter, o.RetrySource = job.ClassRateLimited, info.RetryAfter, info.Source
		o.Hints = hints
	}
	return o, nil
}

func (s *Server) handleReportRateLimited(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	return finishReport(s, w, r, p, func(req *rateLimitedRequest) (job.Outcome, string, error) {
		o, err := s.rateLimitedOutcome(req)
		return o, req.LeaseToken, err
	})
}

// rateLimitedOutcome checks a rate-limited report (the upstream's delay,
// headers, scope, status) and returns its outcome; the scope is checked
// against the job's keys once the job is read (checkScope).
func (s *Server) rateLimitedOutcome(req *rateLimitedRequest) (job.Outcome, error) {
	o := job.Outcome{Class: job.ClassRateLimited, Scope: req.Scope, Status: req.Status}
	if o.Status == 0 {
		o.Status = http.StatusTooManyRequests
	}
	if o.Status < 0 || o.Status > 999 {
		return job.Outcome{}, fieldError("status", "status must be an HTTP status code, got %d", o.Status)
	}
	hints, info, err := s.parseHeaders(req.Headers, req.Scope)
	if err != nil {
		return job.Outcome{}, err
	}
	o.Hints = hints
	if d, src, ok := info.Delay(); ok {
		o.RetryAfter, o.RetrySource = d, src
	}
	if v := req.RetryAfterSeconds; v != nil {
		if *v < 0 || *v > job.MaxDelay.Seconds()*2 {
			return job.Outcome{}, fieldError("retry_after_seconds", "retry_after_seconds must be from 0 to %v, got %v", job.MaxDelay.Seconds()*2, *v)
		}
		o.RetryAfter, o.RetrySource = time.Duration(*v*float64(time.Second)), "retry_after_seconds"
	}
	return o, nil
}

// checkScope refuses a rate-limited outcome whose scope is not one of
// the job's limit keys: pausing a key the job does not use would slow
// other tenants' work for this one's 429.
func checkScope(j *job.Job, o job.Outcome) error {
	if o.Scope != "" && !slices.Contains(j.LimitKeys, o.Scope) {
		return fieldError("scope", "scope must be one of the job's limit keys %v, not %q", j.LimitKeys, o.Scope)
	}
	return nil
}

// parseHeaders reads the upstream's raw headers with internal/ratelimit:
// the server-given delay and remaining-quota hints for the scope key (all
// of the job's keys when scope is empty).
func (s *Server) parseHeaders(raw map[string]string, scope string) ([]job.Hint, ratelimit.Info, error) {
	if len(raw) > maxHeaders {
		return nil, ratelimit.Info{}, fieldError("headers", "send at most %d headers, got %d", maxHeaders, len(raw))
	}
	h := make(http.Header, len(raw))
	for k, v := range raw {
		if len(v) > maxHeaderValue || len(k) > 256 {
			return nil, ratelimit.Info{}, fieldError("headers", "header %.64q is too long (names up to 256 bytes, values up to %d)", k, maxHeaderValue)
		}
		h.Add(k, v)
	}
	info := ratelimit.Parse(h, s.cfg.Now())
	hints := ratelimit.Hints(info, scope)
	return hints, info, nil
}

// leasedJob finds the job of an outcome request and checks that the lease
// token still holds it: same token, still running, lease not expired (the
// reaper may not have recovered it yet, but another worker may already be
// about to).
func (s *Server) leasedJob(r *http.Request, p auth.Principal, token string) (*job.Job, store.Store, time.Time, error) {
	if err := checkToken(token); err != nil {
		return nil, nil, time.Time{}, err
	}
	// Leases are scoped to the key's tenant, so a job of another tenant
	// (or of a built-in kind, which is never leased through this API) is
	// answered exactly like an unknown id, whatever the token: its state
	// is none of this worker's business.
	j, st, err := s.findJob(r.Context(), r, p, ownTenant)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	now := s.cfg.Now()
	if err := checkHeld(j, token, now); err != nil {
		return nil, nil, now, err
	}
	return j, st, now, nil
}

// checkToken checks the shape of an outcome's lease token.
func checkToken(token string) error {
	if token == "" || len(token) > 200 {
		return fieldError("lease_token", "lease_token is required: pass the token the lease returned")
	}
	return nil
}

// checkHeld reports whether token still holds j at now: same token, still
// running, lease not expired (the reaper may not have recovered it yet,
// but another worker may already be about to). A built-in job is answered
// as not found: external workers never lease one.
func checkHeld(j *job.Job, token string, now time.Time) error {
	if _, builtin := job.Reserved(j.Kind); builtin {
		return notFound("job " + j.ID)
	}
	switch {
	case j.State != job.StateRunning || j.LeaseToken != token:
		return leaseLost(j.ID, "this lease token does not hold the job (it is "+string(j.State)+")")
	case !now.Before(j.LeaseExpiresAt):
		return leaseLost(j.ID, "the lease expired at "+j.LeaseExpiresAt.UTC().Format(time.RFC3339)+"; heartbeat sooner or lease for longer")
	}
	return nil
}

// finishOutcome reports an external worker's outcome through the region's
// writer, which classifies it with engine.Decide, writes it with the
// store's guarded Finish and counts it like an in-process attempt.
func (s *Server) finishOutcome(w http.ResponseWriter, r *http.Request, p auth.Principal, token string, o job.Outcome) error {
	j, _, _, err := s.leasedJob(r, p, token)
	if err != nil {
		return err
	}
	if err := checkScope(j, o); err != nil {
		return err
	}
	// External workers deliver results themselves, so success publishes
	// (Validates false). The outcome is written even if the worker hangs
	// up now: it holds the lease, and dropping its outcome would cost the
	// job an attempt.
	done, err := s.jobs[j.Region].Report(context.WithoutCancel(r.Context()), []engine.Report{{Job: j, Outcome: o}})
	if err != nil {
		return err
	}
	s.leased.done(j.ID)
	s.limits.dropJobs(j)
	if err := done[0].Err; err != nil {
		if errors.Is(err, store.ErrConflict) {
			return leaseLost(j.ID, "the lease was lost before the outcome arrived")
		}
		return err
	}
	t := done[0].Transition
	crashpoint.Hit(crashpoint.CASBeforeAck)
	s.notify(j.Region) // keys were released and may admit waiting jobs
	return writeJSON(w, http.StatusOK, outcomeResponse{ID: j.ID, State: t.To, Reason: string(t.Reason), EligibleAt: t.EligibleAt})
}
