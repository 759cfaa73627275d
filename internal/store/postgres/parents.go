package postgres

import (
	"context"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// ReadyParents returns the accepted parents of p.Kind with no open part,
// newest first (store.ReadyParentsQuery).
func (s *Store) ReadyParents(ctx context.Context, p store.ReadyParentsParams) ([]*job.Job, error) {
	q := store.ReadyParentsQuery(jobCols, p)
	return collectJobs(s.pool.Query(ctx, q.Numbered(), q.Args()...))
}

// PartsOf returns every child of the jobs ids (store.PartsOfQuery).
func (s *Store) PartsOf(ctx context.Context, ids []string) ([]*job.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	q := store.PartsOfQuery(jobCols, `parent_id = ANY(?)`, ids)
	return collectJobs(s.pool.Query(ctx, q.Numbered(), q.Args()...))
}

// ParentsWithChildren is store.ParentsReader's: one statement
// (store.ParentsWithChildrenQuery), so one snapshot of the parents and
// their children.
func (s *Store) ParentsWithChildren(ctx context.Context, ids []string) (parents, children []*job.Job, err error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	q := store.ParentsWithChildrenQuery(jobCols, `id = ANY(?)`, `parent_id = ANY(?)`, ids)
	rows, err := s.pool.Query(ctx, q.Numbered(), q.Args()...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	return store.CollectParents(rows, func(r interface{ Scan(dest ...any) error }) (*job.Job, error) { return scanJob(r) })
}
