package httpapi

// This file holds the batch routes: POST /v1/jobs/batch (many jobs in one
// request and one store transaction) and POST /v1/leases/complete (many
// external workers' successes in one request and one guarded Finish).
// Both answer per item, so one bad item costs only itself.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

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
	PredictedWaitSeconds *float64  `json:"predicted_wait_seconds,omitempty" doc:"the predicted queue wait of a created job"`
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
			example: `{"jobs":[{"kind":"email.send","region":"` + region + `","limit_keys":["smtp:default"],"payload":{"to":"ada@example.com"},"idempotency_key":"signup-42"},` +
				`{"kind":"email.send","region":"` + region + `","limit_keys":["smtp:default"],"payload":{"to":"grace@example.com"},"idempotency_key":"signup-43"}]}`},
		{method: "POST", path: "/v1/leases/complete", name: "completeLeases", role: auth.RoleWorker,
			summary: "Report the success of up to 1000 leased jobs of one region in one request; they are published in one guarded write. " +
				"Each item is answered on its own (a lost lease is a 409 item, the others are recorded)",
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
	switch n := len(req.Jobs); {
	case n == 0:
		return problemf(http.StatusUnprocessableEntity, "invalid-request", "jobs is empty; send 1 to %d jobs", maxBatchJobs)
	case n > maxBatchJobs:
		return problemf(http.StatusRequestEntityTooLarge, "payload-too-large",
			"jobs[%d]: a batch holds at most %d jobs, this one has %d; send the rest in another request", maxBatchJobs, maxBatchJobs, n)
	}
	now := s.cfg.Now()
	out := createJobsResponse{Results: make([]batchItem, len(req.Jobs))}
	b := s.newEnqueueBatch(r.Context(), req.Jobs[0].Region)
	var jobs []*job.Job
	var idx []int
	var waits []float64
	for i := range req.Jobs {
		j, wait, err := b.admit(r, p, &req.Jobs[i], now)
		if err != nil {
			out.Results[i] = itemError(i, err)
			out.Failed++
			continue
		}
		jobs, idx, waits = append(jobs, j), append(idx, i), append(waits, wait)
	}
	if len(jobs) > 0 {
		res, err := s.jobs[b.region].Insert(r.Context(), jobs, s.cfg.DefaultLimit)
		if err != nil {
			return err // one transaction: nothing of the batch was written
		}
		created := false
		for k, rs := range res {
			i := idx[k]
			item := batchItem{Index: i, ID: rs.Job.ID, State: rs.Job.State}
			switch {
			case !rs.Existing:
				item.Status, item.PredictedWaitSeconds = http.StatusCreated, &waits[k]
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
		b.limits = newLimitMemo(st, s.cfg.DefaultLimit)
	}
	return b
}

// admit builds and checks one item exactly as POST /v1/jobs does, and
// returns the job and its predicted wait in seconds.
func (b *enqueueBatch) admit(r *http.Request, p auth.Principal, req *createJobRequest, now time.Time) (*job.Job, float64, error) {
	j, err := b.s.buildJob(r, p, req, now)
	if err != nil {
		return nil, 0, err
	}
	if j.Region != b.region {
		return nil, 0, fieldError("region", "a batch writes one region's store in one transaction: this batch is for %q (its first job's), not %q; send %q's jobs in another batch",
			b.region, j.Region, j.Region)
	}
	if err := b.limits.checkCost(b.ctx, j); err != nil {
		return nil, 0, err
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
		return nil, 0, err
	}
	if err := b.s.admitOverload(j, req.OnOverload, pred); err != nil {
		return nil, 0, err
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
	return j, pred.Wait.Seconds(), nil
}

// completeLeasesRequest is the body of POST /v1/leases/complete.
type completeLeasesRequest struct {
	Region string              `json:"region" required:"true" doc:"the region the jobs were leased from"`
	Jobs   []completeLeaseItem `json:"jobs" required:"true" doc:"1 to 1000 successes, each a job id with the body of POST /v1/jobs/{id}/complete; an id at most once"`
}

// completeLeaseItem is one success of a batch complete.
type completeLeaseItem struct {
	ID string `json:"id" required:"true" doc:"the leased job's id"`
	completeRequest
}

// outcomeItem is one job's answer in a batch complete.
type outcomeItem struct {
	Index  int       `json:"index" doc:"the item's position in the request, from 0"`
	Status int       `json:"status" doc:"200 recorded, or the status POST /v1/jobs/{id}/complete would have answered (404 unknown or foreign job, 409 lease lost)"`
	ID     string    `json:"id"`
	State  job.State `json:"state,omitempty" doc:"where a recorded job went (published)"`
	Error  *Problem  `json:"error,omitempty" doc:"why the outcome was not recorded; detail and fields prefixed with jobs[index]"`
}

// completeLeasesResponse is the answer of POST /v1/leases/complete.
type completeLeasesResponse struct {
	Results   []outcomeItem `json:"results" doc:"one per request item, in request order"`
	Completed int           `json:"completed" doc:"outcomes recorded"`
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
	switch n := len(req.Jobs); {
	case n == 0:
		return problemf(http.StatusUnprocessableEntity, "invalid-request", "jobs is empty; send 1 to %d outcomes", maxCompleteJobs)
	case n > maxCompleteJobs:
		return problemf(http.StatusRequestEntityTooLarge, "payload-too-large",
			"jobs[%d]: a batch complete holds at most %d outcomes, this one has %d; send the rest in another request", maxCompleteJobs, maxCompleteJobs, n)
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
		if k, dup := seen[it.ID]; dup {
			fail(i, fieldError("id", "job %s is already reported by jobs[%d]; report each job once", it.ID, k))
			continue
		}
		seen[it.ID] = i
		j, o, err := s.heldOutcome(r.Context(), st, p, it, now)
		if err != nil {
			fail(i, err)
			continue
		}
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
			if d.Err != nil {
				if errors.Is(d.Err, store.ErrConflict) {
					fail(i, leaseLost(req.Jobs[i].ID, "the lease was lost before the outcome arrived"))
				} else {
					fail(i, d.Err)
				}
				continue
			}
			out.Results[i] = outcomeItem{Index: i, Status: http.StatusOK, ID: req.Jobs[i].ID, State: d.Transition.To}
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
	o, err := s.successOutcome(&it.completeRequest)
	if err != nil {
		return nil, o, err
	}
	if !validID(it.ID) {
		return nil, o, notFound("job " + it.ID)
	}
	j, err := st.Get(ctx, it.ID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && p.Role != auth.RoleAdmin && j.Tenant != p.Tenant) {
		return nil, o, notFound("job " + it.ID) // a foreign job is answered like an unknown one
	}
	if err != nil {
		return nil, o, err
	}
	return j, o, checkHeld(j, it.LeaseToken, now)
}
