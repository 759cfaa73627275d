package httpapi

// This file holds the batch routes: POST /v1/jobs/batch (many jobs in one
// request and one store transaction) and POST /v1/leases/complete (many
// external workers' outcomes, of any kind, in one request and one guarded
// Finish).
// Both answer per item, so one bad item costs only itself.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Bounds of the batch routes. A batch is one store transaction: large
// enough to amortise a commit and a round trip over many jobs, small
// enough that one request does not hold the region's writer for long.
const (
	// maxBatchJobs is the most jobs one POST /v1/jobs/batch holds.
	maxBatchJobs = 1000
	// maxBatchBody bounds the body of either batch route; a single
	// payload or result is still at most job.MaxPayloadBytes.
	maxBatchBody = 8 << 20
	// maxCompleteJobs is the most outcomes one POST /v1/leases/complete
	// holds: ten full leases of maxLeaseJobs.
	maxCompleteJobs = 10 * maxLeaseJobs
)

// createJobsRequest is the body of POST /v1/jobs/batch.
type createJobsRequest struct {
	Jobs []createJobRequest `json:"jobs" required:"true" doc:"1 to 1000 jobs, each exactly as the body of POST /v1/jobs and all in one region; each idempotency_key applies to its own job (the Idempotency-Key header is refused here)"`
}

// batchItem is one job's answer in a batch: what POST /v1/jobs would have
// answered for it alone, condensed.
type batchItem struct {
	Index                int       `json:"index" doc:"the item's position in the request, from 0"`
	Status               int       `json:"status" doc:"201 created, 200 replayed (its idempotency key's first job), or the 4xx status POST /v1/jobs would have answered"`
	ID                   string    `json:"id,omitempty" doc:"the job's id (for a replay, the first job's)"`
	State                job.State `json:"state,omitempty"`
	Replayed             bool      `json:"replayed,omitempty" doc:"true when the idempotency key had already created this job (earlier, or by an earlier item of this batch)"`
	PredictedWaitSeconds *float64  `json:"predicted_wait_seconds,omitempty" doc:"the predicted queue wait of a created or replayed job"`
	Unserved             *unserved `json:"unserved,omitempty" doc:"as in POST /v1/jobs: when nothing was seen leasing the job's kind, predicted_wait_seconds is a lower bound and the job waits until a worker for its kind runs"`
	Error                *Problem  `json:"error,omitempty" doc:"why the item was not created: the problem POST /v1/jobs would have answered, its detail and fields prefixed with jobs[index]"`
}

// createJobsResponse is the answer of POST /v1/jobs/batch.
type createJobsResponse struct {
	Results  []batchItem `json:"results" doc:"one per request item, in request order"`
	Created  int         `json:"created" doc:"items that created a job"`
	Replayed int         `json:"replayed" doc:"items answered with the job their idempotency key created before"`
	Failed   int         `json:"failed" doc:"items refused (their error says why); nothing was written for them"`
}

// batchRoutes are the batch endpoints, appended to the route table.
func (s *Server) batchRoutes() []route {
	region := s.regions[0]
	return []route{
		{method: "POST", path: "/v1/jobs/batch", name: "createJobs", role: auth.RoleProducer,
			summary: "Enqueue up to 1000 jobs of one region in one request and one transaction. Each item is checked like POST /v1/jobs " +
				"(kind, cost, tenant, region, overload) and answered on its own: a refused item is reported with its index and costs only itself; " +
				"the accepted items are committed together, all or none (a 5xx means none was). More than 1000 jobs or an 8 MiB body is refused with 413",
			handle: s.handleCreateJobs, request: createJobsRequest{}, response: createJobsResponse{}, status: 200,
			example: `{"jobs":[{"kind":"email.send","region":"` + region + `","limit_keys":["smtp:default"],"payload":{"to":"ada@example.com"},"idempotency_key":"welcome-1"},` +
				`{"kind":"email.send","region":"` + region + `","limit_keys":["smtp:default"],"payload":{"to":"grace@example.com"},"idempotency_key":"welcome-2"}]}`},
		{method: "POST", path: "/v1/leases/complete", name: "completeLeases", role: auth.RoleWorker,
			summary: "Report the outcomes of up to 1000 leased jobs of one region in one request and one guarded write: each item is a success, a fail " +
				"(retryable, invalid output or permanent) or rate_limited, with the fields of POST /v1/jobs/{id}/complete, /fail or /rate-limited, and is checked as that route checks it. " +
				"Each item is answered on its own (a lost lease is a 409 item, a bad item a 400 or 422, the others are recorded)",
			handle: s.handleCompleteLeases, request: completeLeasesRequest{}, response: completeLeasesResponse{}, status: 200,
			example: `{"region":"` + region + `","jobs":[{"id":"$JOB_ID","lease_token":"$LEASE_TOKEN","result":{"message_id":"m-1"}}]}`},
	}
}

func (s *Server) handleCreateJobs(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if r.Header.Get("Idempotency-Key") != "" {
		return fieldError("Idempotency-Key", "the Idempotency-Key header names one job; give each job of a batch its own idempotency_key")
	}
	var req createJobsRequest
	if err := decodeBatch(w, r, &req); err != nil {
		return err
	}
	if err := checkBatchLen(len(req.Jobs), maxBatchJobs, "a batch", "jobs"); err != nil {
		return err
	}
	now := s.cfg.Now()
	out := createJobsResponse{Results: make([]batchItem, len(req.Jobs))}
	b := s.newEnqueueBatch(r.Context(), req.Jobs[0].Region)
	var jobs []*job.Job
	var idx []int
	var preds []admission.Prediction
	for i := range req.Jobs {
		j, pred, err := b.admit(r, p, &req.Jobs[i], now)
		if err != nil {
			out.Results[i] = itemError(i, err)
			out.Failed++
			continue
		}
		jobs, idx, preds = append(jobs, j), append(idx, i), append(preds, pred)
	}
	waits := make([]float64, len(preds))
	for k, pred := range preds {
		waits[k] = pred.Wait.Seconds()
	}
	if len(jobs) > 0 {
		res, err := s.jobs[b.region].Insert(r.Context(), jobs, s.cfg.DefaultLimit)
		if err != nil {
			return err // one transaction: nothing of the batch was written
		}
		created := false
		for k, rs := range res {
			i := idx[k]
			// The item says what POST /v1/jobs would have said of it,
			// through the same note.
			item := batchItem{Index: i, ID: rs.Job.ID, State: rs.Job.State, PredictedWaitSeconds: &waits[k], Unserved: s.unservedNote(rs.Job, preds[k])}
			switch {
			case !rs.Existing:
				item.Status = http.StatusCreated
				s.backlog.added(rs.Job)
				out.Created++
				created = true
			case len(requestDiff(rs.Job, jobs[k])) > 0:
				out.Results[i] = itemError(i, problemf(http.StatusUnprocessableEntity, "idempotency-mismatch",
					"idempotency key %q was first used for job %s with a different %s; use a new key for a different request",
					jobs[k].IdempotencyKey, rs.Job.ID, strings.Join(requestDiff(rs.Job, jobs[k]), ", ")))
				out.Failed++
				continue
			default:
				item.Status, item.Replayed = http.StatusOK, true
				out.Replayed++
			}
			out.Results[i] = item
		}
		if created {
			s.notify(b.region)
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

// decodeBatch is decode with the batch routes' larger body bound and a 413
// that names it.
func decodeBatch(w http.ResponseWriter, r *http.Request, dst any) error {
	err := decodeMax(w, r, dst, maxBatchBody)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) || (err != nil && toProblem(err).p.Status == http.StatusRequestEntityTooLarge) {
		return problemf(http.StatusRequestEntityTooLarge, "payload-too-large",
			"the request body exceeds %d bytes; split the batch into smaller requests", maxBatchBody)
	}
	return err
}

// itemError renders err as a batch item's problem, prefixed with its index
// so that a client logging the detail alone still knows which item failed.
func itemError(i int, err error) batchItem {
	p := toProblem(err).p
	prefix := fmt.Sprintf("jobs[%d]", i)
	p.Detail = prefix + ": " + p.Detail
	fields := make([]job.FieldError, len(p.Errors))
	for k, f := range p.Errors {
		fields[k] = job.FieldError{Field: prefix + "." + f.Field, Detail: f.Detail}
	}
	p.Errors = fields
	return batchItem{Index: i, Status: p.Status, Error: &p}
}

// enqueueBatch checks a batch's items one by one with what it learned from
// the earlier ones: the limit keys' states (read once per key) and
// the cost the batch already adds to each key's backlog, so that a batch
// of interactive jobs is refused for overload as the same jobs sent one by
// one would be.
type enqueueBatch struct {
	s      *Server
	ctx    context.Context
	region string
	limits *limitMemo // nil when the region is not served (every item fails before using it)
	// added is the cost of the batch's accepted jobs per lane and key.
	added map[backlogKey]int64
}

func (s *Server) newEnqueueBatch(ctx context.Context, region string) *enqueueBatch {
	b := &enqueueBatch{s: s, ctx: ctx, region: region, added: map[backlogKey]int64{}}
	if st, ok := s.cfg.Regions[region]; ok {
		b.limits = s.newLimitMemo(st)
	}
	return b
}

// admit builds and checks one item exactly as POST /v1/jobs does, and
// returns the job and the prediction that admitted it.
func (b *enqueueBatch) admit(r *http.Request, p auth.Principal, req *createJobRequest, now time.Time) (*job.Job, admission.Prediction, error) {
	var none admission.Prediction
	j, err := b.s.buildJob(r, p, req, now)
	if err != nil {
		return nil, none, err
	}
	if j.Region != b.region {
		return nil, none, fieldError("region", "a batch writes one region's store in one transaction: this batch is for %q (its first job's), not %q; send %q's jobs in another batch",
			b.region, j.Region, j.Region)
	}
	if err := b.limits.checkCost(b.ctx, j); err != nil {
		return nil, none, err
	}
	st := b.s.cfg.Regions[j.Region]
	pred, err := b.s.jobs[j.Region].PredictWait(b.ctx, engine.PredictParams{
		Kind: j.Kind, Lane: j.Lane, Keys: j.LimitKeys, Cost: j.Cost, Default: b.s.cfg.DefaultLimit,
		Backlog: func(ctx context.Context, lane job.Lane, key string) (int64, error) {
			n, err := b.s.backlog.get(ctx, st, lane, key)
			return n + b.added[backlogKey{j.Region, lane, key}], err
		},
		Limit: b.limits.get,
	})
	if err != nil {
		return nil, none, err
	}
	if err := b.s.admitOverload(j, req.OnOverload, pred); err != nil {
		return nil, none, err
	}
	// The job is ahead of later items of its lane and, when interactive,
	// of later batch items too (the backlog cache's rule).
	for _, key := range j.LimitKeys {
		for _, lane := range job.Lanes {
			if lane == job.LaneInteractive && j.Lane == job.LaneBatch {
				continue
			}
			b.added[backlogKey{j.Region, lane, key}] += j.Cost
		}
	}
	return j, pred, nil
}

// completeLeasesRequest is the body of POST /v1/leases/complete.
type completeLeasesRequest struct {
	Region string              `json:"region" required:"true" doc:"the region the jobs were leased from"`
	Jobs   []completeLeaseItem `json:"jobs" required:"true" doc:"1 to 1000 outcomes, each a job id, its lease_token, its outcome and that outcome's fields; an id at most once"`
}

// Outcomes of a batch complete item: the three single outcome routes.
const (
	outcomeSuccess     = "success"
	outcomeFail        = "fail"
	outcomeRateLimited = "rate_limited"
)

// completeLeaseItem is one outcome of a batch complete: the id, the
// outcome, and the body of the single route that outcome names (POST
// /v1/jobs/{id}/complete, /fail or /rate-limited), flattened into one
// object. A field of another outcome is refused rather than ignored: a
// worker that sends a result with "outcome":"fail" has a bug worth
// hearing about.
type completeLeaseItem struct {
	ID         string `json:"id" required:"true" doc:"the leased job's id"`
	Outcome    string `json:"outcome,omitempty" doc:"what the attempt did: success (the default; the fields of POST /v1/jobs/{id}/complete), fail (those of /fail: retryable, invalid_output or permanent) or rate_limited (those of /rate-limited)" enum:"success,fail,rate_limited"`
	LeaseToken string `json:"lease_token" required:"true" doc:"the token the lease returned"`
	// success
	Result json.RawMessage `json:"result,omitempty" doc:"success: the job's result, any JSON value up to 256 KiB"`
	Usage  int64           `json:"usage,omitempty" doc:"success: actual cost of the attempt (e.g. tokens), reconciled against the job's cost"`
	// every outcome
	Headers map[string]string `json:"headers,omitempty" doc:"the upstream's raw response headers, read as by the single route of the outcome"`
	Status  int               `json:"status,omitempty" doc:"fail and rate_limited: the upstream's HTTP status (rate_limited defaults to 429)"`
	// fail
	Retryable     bool   `json:"retryable,omitempty" doc:"fail: true for 5xx, timeouts, connection errors (transient budget); false ends the job as permanent_error"`
	InvalidOutput bool   `json:"invalid_output,omitempty" doc:"fail: the upstream answered but its output failed validation (schema budget)"`
	Error         string `json:"error,omitempty" doc:"fail: a short description, at most 500 bytes; never payload or upstream output"`
	// rate_limited
	RetryAfterSeconds *float64 `json:"retry_after_seconds,omitempty" doc:"rate_limited: the delay the upstream asked for; or send headers"`
	Scope             string   `json:"scope,omitempty" doc:"rate_limited: the one limit key of the job that was limited; default all of them"`
}

// itemOutcome checks the item as its single route would check its body and
// returns the outcome.
func (s *Server) itemOutcome(it *completeLeaseItem) (job.Outcome, error) {
	var other []string // fields set that belong to another outcome
	set := func(name string, isSet bool) {
		if isSet {
			other = append(other, name)
		}
	}
	var o job.Outcome
	var err error
	switch it.Outcome {
	case "", outcomeSuccess:
		set("status", it.Status != 0)
		set("retryable", it.Retryable)
		set("invalid_output", it.InvalidOutput)
		set("error", it.Error != "")
		set("retry_after_seconds", it.RetryAfterSeconds != nil)
		set("scope", it.Scope != "")
		if len(other) == 0 {
			o, err = s.successOutcome(&completeRequest{LeaseToken: it.LeaseToken, Result: it.Result, Usage: it.Usage, Headers: it.Headers})
		}
	case outcomeFail:
		set("result", len(it.Result) > 0)
		set("usage", it.Usage != 0)
		set("retry_after_seconds", it.RetryAfterSeconds != nil)
		set("scope", it.Scope != "")
		if len(other) == 0 {
			o, err = s.failOutcome(&failRequest{LeaseToken: it.LeaseToken, Retryable: it.Retryable, InvalidOutput: it.InvalidOutput,
				Error: it.Error, Status: it.Status, Headers: it.Headers})
		}
	case outcomeRateLimited:
		set("result", len(it.Result) > 0)
		set("usage", it.Usage != 0)
		set("retryable", it.Retryable)
		set("invalid_output", it.InvalidOutput)
		set("error", it.Error != "")
		if len(other) == 0 {
			o, err = s.rateLimitedOutcome(&rateLimitedRequest{LeaseToken: it.LeaseToken, RetryAfterSeconds: it.RetryAfterSeconds,
				Headers: it.Headers, Scope: it.Scope, Status: it.Status})
		}
	default:
		return o, fieldError("outcome", "outcome must be success, fail or rate_limited, not %q", it.Outcome)
	}
	if len(other) > 0 {
		name := it.Outcome
		if name == "" {
			name = outcomeSuccess
		}
		return o, fieldError(other[0], "%s is not a field of a %s outcome (set outcome to the one this attempt had)", other[0], name)
	}
	return o, err
}

// outcomeItem is one job's answer in a batch complete.
type outcomeItem struct {
	Index      int       `json:"index" doc:"the item's position in the request, from 0"`
	Status     int       `json:"status" doc:"200 recorded, or the status the outcome's single route would have answered (400/422 bad item, 404 unknown or foreign job, 409 lease lost)"`
	ID         string    `json:"id"`
	State      job.State `json:"state,omitempty" doc:"where a recorded job went (published, scheduled for a retry, or a terminal state)"`
	Reason     string    `json:"reason,omitempty" doc:"why it went there, as the single routes answer"`
	EligibleAt time.Time `json:"eligible_at,omitzero" doc:"when a rescheduled job becomes eligible again"`
	Error      *Problem  `json:"error,omitempty" doc:"why the outcome was not recorded; detail and fields prefixed with jobs[index]"`
}

// completeLeasesResponse is the answer of POST /v1/leases/complete.
type completeLeasesResponse struct {
	Results   []outcomeItem `json:"results" doc:"one per request item, in request order"`
	Completed int           `json:"completed" doc:"outcomes recorded, whatever the outcome"`
	Failed    int           `json:"failed" doc:"outcomes refused; those jobs are unchanged"`
}

func (s *Server) handleCompleteLeases(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req completeLeasesRequest
	if err := decodeBatch(w, r, &req); err != nil {
		return err
	}
	if err := s.checkRegion(p, req.Region, "region"); err != nil {
		return err
	}
	if err := checkBatchLen(len(req.Jobs), maxCompleteJobs, "a batch complete", "outcomes"); err != nil {
		return err
	}
	out := completeLeasesResponse{Results: make([]outcomeItem, len(req.Jobs))}
	fail := func(i int, err error) {
		it := itemError(i, err)
		out.Results[i] = outcomeItem{Index: i, Status: it.Status, ID: req.Jobs[i].ID, Error: it.Error}
		out.Failed++
	}
	st := s.cfg.Regions[req.Region]
	now := s.cfg.Now()
	seen := make(map[string]int, len(req.Jobs))
	var reports []engine.Report
	var idx []int
	for i := range req.Jobs {
		it := &req.Jobs[i]
		// Only an accepted item claims its id: a refused one wrote
		// nothing, so a corrected repeat later in the batch may stand.
		if k, dup := seen[it.ID]; dup {
			fail(i, fieldError("id", "job %s is already reported by jobs[%d]; report each job once", it.ID, k))
			continue
		}
		j, o, err := s.heldOutcome(r.Context(), st, p, it, now)
		if err != nil {
			fail(i, err)
			continue
		}
		seen[it.ID] = i
		reports, idx = append(reports, engine.Report{Job: j, Outcome: o}), append(idx, i)
	}
	if len(reports) > 0 {
		// As for one outcome: written even if the worker hangs up now.
		done, err := s.jobs[req.Region].Report(context.WithoutCancel(r.Context()), reports)
		if err != nil {
			return err
		}
		for k, d := range done {
			i := idx[k]
			s.leased.done(req.Jobs[i].ID) // recorded, or its lease is gone: either way not to be used again
			s.limits.dropJobs(reports[k].Job)
			if d.Err != nil {
				if errors.Is(d.Err, store.ErrConflict) {
					fail(i, leaseLost(req.Jobs[i].ID, "the lease was lost before the outcome arrived"))
				} else {
					fail(i, storeError(d.Err, "job "+req.Jobs[i].ID))
				}
				continue
			}
			t := d.Transition
			out.Results[i] = outcomeItem{Index: i, Status: http.StatusOK, ID: req.Jobs[i].ID, State: t.To, Reason: string(t.Reason), EligibleAt: t.EligibleAt}
			out.Completed++
		}
		s.notify(req.Region) // keys were released and may admit waiting jobs
	}
	return writeJSON(w, http.StatusOK, out)
}

// heldOutcome checks one item of a batch complete as the single route does:
// the outcome's fields, then that the job is the key's tenant's and that
// the token still holds it.
func (s *Server) heldOutcome(ctx context.Context, st store.Store, p auth.Principal, it *completeLeaseItem, now time.Time) (*job.Job, job.Outcome, error) {
	if err := checkToken(it.LeaseToken); err != nil {
		return nil, job.Outcome{}, err
	}
	o, err := s.itemOutcome(it)
	if err != nil {
		return nil, o, err
	}
	if !validID(it.ID) {
		return nil, o, notFound("job " + it.ID)
	}
	// A job leased through this server with this token is taken as
	// leased (see leasedJobs: Finish still guards the write); any other
	// is read.
	j := s.leased.get(it.ID, it.LeaseToken, now)
	if j != nil && j.Region != st.Region() {
		j = nil
	}
	if j == nil {
		j, err = st.Get(ctx, it.ID)
	}
	if errors.Is(err, store.ErrNotFound) || (err == nil && p.Role != auth.RoleAdmin && j.Tenant != p.Tenant) {
		return nil, o, notFound("job " + it.ID) // a foreign job is answered like an unknown one
	}
	if err != nil {
		return nil, o, err
	}
	if err := checkHeld(j, it.LeaseToken, now); err != nil {
		return nil, o, err
	}
	return j, o, checkScope(j, o)
}

// checkBatchLen refuses a batch request's jobs array of n entries when it
// is empty (422) or longer than most (413, naming the first entry past
// it): what is the request ("a batch"), items what its entries are.
func checkBatchLen(n, most int, what, items string) error {
	switch {
	case n == 0:
		return problemf(http.StatusUnprocessableEntity, "invalid-request", "jobs is empty; send 1 to %d %s", most, items)
	case n > most:
		return problemf(http.StatusRequestEntityTooLarge, "payload-too-large",
			"jobs[%d]: %s holds at most %d %s, this one has %d; send the rest in another request", most, what, most, items, n)
	}
	return nil
}
