package httpapi

import (
	"context"
	"net/http"
	"slices"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Dead letters are terminal jobs. They follow the jobs' tenant and region
// policy: producers see and redrive their own tenant's, admins everyone's.

func (s *Server) handleListDeadLetters(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	lp, err := listParams(r, p)
	if err != nil {
		return err
	}
	if lp.State != "" && lp.State != job.StateTerminal {
		return fieldError("state", "dead letters are terminal jobs; drop the state filter")
	}
	lp.State = job.StateTerminal
	reason := job.Reason(r.URL.Query().Get("reason"))
	if reason != "" && !slices.Contains(job.Reasons, reason) {
		return fieldError("reason", "unknown reason %q; reasons are %v", reason, job.Reasons)
	}
	regions, err := s.searchRegions(r, p)
	if err != nil {
		return err
	}
	keep := func(j *job.Job) bool { return reason == "" || j.Reason == reason }
	jobs, next, err := s.listAcross(r.Context(), regions, lp, keep)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, summaries(jobs, next))
}

// deadLetter finds a terminal job the key may see; another tenant's is a
// 404 like a missing one.
func (s *Server) deadLetter(r *http.Request, p auth.Principal) (*job.Job, store.Store, error) {
	j, st, err := s.findJob(r.Context(), r, p, ownTenant)
	if err != nil {
		return nil, nil, err
	}
	if j.State != job.StateTerminal {
		return nil, nil, problemf(http.StatusConflict, "conflict",
			"job %s is %s, not terminal; only dead letters can be redriven or deleted", j.ID, j.State)
	}
	return j, st, nil
}

func (s *Server) handleRedriveDeadLetter(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	j, _, err := s.deadLetter(r, p)
	if err != nil {
		return err
	}
	got, err := s.jobs[j.Region].Redrive(context.WithoutCancel(r.Context()), j.ID)
	if err != nil {
		return err
	}
	s.notify(j.Region)
	return writeJSON(w, http.StatusOK, jobView{Job: s.shown(got)})
}

func (s *Server) handleDeleteDeadLetter(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	j, _, err := s.deadLetter(r, p)
	if err != nil {
		return err
	}
	if err := s.jobs[j.Region].Delete(context.WithoutCancel(r.Context()), j.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
