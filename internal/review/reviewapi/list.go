package reviewapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/pipeline"
)

// Summary is one review in a list: what it reviews, where it stands, its
// parts by outcome and, once aggregated, how many findings it has, so a
// list (the dashboard's reviews page) needs no GET /v1/reviews/{id} a row.
// The findings themselves are GET /v1/reviews/{id}'s. An aggregated
// review's counts come from its stored result; a running one's parts cost
// store reads of its parts (its part jobs, or its batch items on the batch
// lane) on top of the page's one query per region.
type Summary struct {
	ID             string            `json:"id"`
	Region         string            `json:"region"`
	Tenant         string            `json:"tenant"`
	State          job.State         `json:"state" doc:"accepted while parts run; validated once aggregated; published once delivered; terminal when no part succeeded"`
	Reason         string            `json:"reason,omitempty" doc:"why a terminal review ended"`
	Repo           string            `json:"repo,omitempty"`
	Change         string            `json:"change,omitempty"`
	DepthRequested string            `json:"depth_requested,omitempty" enum:"auto,full,fast"`
	Depth          string            `json:"depth,omitempty" enum:"full,fast"`
	Provider       string            `json:"provider,omitempty"`
	Publish        pipeline.Publish  `json:"publish"`
	Lane           job.Lane          `json:"lane"`
	Parts          pipeline.Progress `json:"parts" doc:"the diff's parts by outcome"`
	Findings       *int              `json:"findings,omitempty" doc:"how many findings; present once aggregated"`
	Quarantined    *int              `json:"quarantined,omitempty" doc:"how many findings were quarantined (failed validation against the diff); present once aggregated"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
}

// reviewList is a page of GET /v1/reviews.
type reviewList struct {
	Reviews    []Summary `json:"reviews"`
	NextCursor string    `json:"next_cursor,omitempty" doc:"pass as after= for the next page; absent on the last page"`
}

// handleListReviews lists the review parents of the request's regions with
// the job list's conventions (tenant scope, region merge, id cursor, page
// size): a review is a job of kind review, so the list is that kind's.
func (s *server) handleListReviews(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	jobs, next, err := s.h.ListJobs(r, p, pipeline.KindReview)
	if err != nil {
		return err
	}
	out := reviewList{Reviews: make([]Summary, 0, len(jobs)), NextCursor: next}
	for _, j := range jobs {
		sum := summary(j)
		if sum.Findings == nil {
			// Still running (or a result that does not decode): its
			// parts as they stand.
			if sum.Parts, err = s.svc.Progress(r.Context(), j); err != nil {
				return err
			}
		}
		out.Reviews = append(out.Reviews, sum)
	}
	return mount.WriteJSON(w, http.StatusOK, out)
}

// summary reads a review parent's arguments from its payload (repository,
// change, depth, provider, publication; never the diff, which is an
// object of the region) and, once it is aggregated, its counts from its
// result.
func summary(j *job.Job) Summary {
	var a pipeline.Args
	_ = json.Unmarshal(j.Payload, &a) // a parent's payload is ratelane's own; an undecodable one lists its job fields only
	sum := Summary{ID: j.ID, Region: j.Region, Tenant: j.Tenant, State: j.State, Reason: string(j.Reason), Repo: a.Repo,
		Change: a.Change, DepthRequested: a.DepthRequested, Depth: a.Depth, Provider: a.Provider, Publish: a.Publish,
		Lane: j.Lane, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
	var res pipeline.Result
	if len(j.Result) > 0 && json.Unmarshal(j.Result, &res) == nil {
		findings, quarantined := len(res.Findings), len(res.Quarantined)
		sum.Parts, sum.Findings, sum.Quarantined = res.Parts, &findings, &quarantined
	}
	return sum
}
