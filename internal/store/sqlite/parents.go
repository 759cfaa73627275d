package sqlite

import (
	"context"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// ReadyParents returns the accepted parents of p.Kind with no open part,
// newest first (store.ReadyParentsQuery).
func (s *Store) ReadyParents(ctx context.Context, p store.ReadyParentsParams) ([]*job.Job, error) {
	return s.readJobs(ctx, store.ReadyParentsQuery(jobCols, p), true)
}

// PartsOf returns every child of the jobs ids (store.PartsOfQuery).
func (s *Store) PartsOf(ctx context.Context, ids []string) ([]*job.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	// Not prepared: the text has one placeholder per id, so each page
	// size would take a slot of the bounded statement cache.
	return s.readJobs(ctx, store.PartsOfQuery(jobCols, ids), false)
}

// readJobs runs q, a read of jobCols, on the read pool: through the
// statement cache (readQuery) when prepared is set, so that a sweep pass's
// read is parsed once per reader rather than once per pass.
func (s *Store) readJobs(ctx context.Context, q *store.Query, prepared bool) ([]*job.Job, error) {
	query := s.rdb.QueryContext
	if prepared {
		query = s.readQuery
	}
	rows, err := query(ctx, q.SQL(), q.Args()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, func() (*job.Job, error) { return scanJob(rows) })
}
