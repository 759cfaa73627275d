package store

import (
	"errors"
	"fmt"

	"github.com/ratelane/ratelane/internal/job"
)

// CheckInsert refuses, before anything is written, a batch holding a job
// that no store may hold: without an ID, of another region than the
// store's, in a state other than accepted or waiting, or naming no limit
// key or more than job.MaxLimitKeys. Every driver's Insert and ClaimTick
// call it, so that a job refused on one driver is refused on the other
// with the same error rather than by whichever constraint its schema
// happens to have (PostgreSQL's NOT NULL group refused a job without keys
// that SQLite stored). The API validates the same bounds earlier for its
// callers; this is the store's own guard for the ones below it.
func CheckInsert(region string, jobs []*job.Job) error {
	for _, j := range jobs {
		switch {
		case j.ID == "":
			return errors.New("insert: a job has no ID")
		case j.Region != region:
			return fmt.Errorf("insert job %s: region %q does not belong in the %q store", j.ID, j.Region, region)
		case j.State != job.StateAccepted && j.State != job.StateWaiting:
			return fmt.Errorf("insert job %s: a new job is accepted or waiting, not %q", j.ID, j.State)
		case len(j.LimitKeys) == 0 || len(j.LimitKeys) > job.MaxLimitKeys:
			return fmt.Errorf("insert job %s: a job names 1 to %d limit keys, got %d", j.ID, job.MaxLimitKeys, len(j.LimitKeys))
		}
	}
	return nil
}

// CheckClaimTick refuses a ClaimTick that no store may do: a tick without
// its job or a job without its tick, or a job CheckInsert refuses. Both
// drivers call it before their transaction.
func CheckClaimTick(region string, p ClaimTickParams) error {
	if (p.Job == nil) != p.Tick.IsZero() {
		return errors.New("claim tick: a tick and its job go together")
	}
	if p.Job == nil {
		return nil
	}
	return CheckInsert(region, []*job.Job{p.Job})
}
