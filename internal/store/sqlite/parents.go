package sqlite

import (
	"context"
	"encoding/json"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// ReadyParents returns the accepted parents of p.Kind with no open part,
// newest first (store.ReadyParentsQuery).
func (s *Store) ReadyParents(ctx context.Context, p store.ReadyParentsParams) ([]*job.Job, error) {
	return s.readJobs(ctx, store.ReadyParentsQuery(jobCols, p))
}

// PartsOf returns every child of the jobs ids (store.PartsOfQuery).
func (s *Store) PartsOf(ctx context.Context, ids []string) ([]*job.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	arg, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	return s.readJobs(ctx, partsOfQuery(string(arg)))
}

// partsOfQuery is PartsOf's statement for ids as a JSON array.
func partsOfQuery(ids string) *store.Query {
	return store.PartsOfQuery(jobCols, `parent_id IN (SELECT value FROM json_each(?))`, ids)
}

// readJobs runs q, a read of jobCols, on the read pool through its
// statement cache (readQuery), so that a sweep pass's reads are parsed
// once per reader rather than once per pass.
func (s *Store) readJobs(ctx context.Context, q *store.Query) ([]*job.Job, error) {
	rows, err := s.readQuery(ctx, q.SQL(), q.Args()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, func() (*job.Job, error) { return scanJob(rows) })
}

// ParentsWithChildren is store.ParentsReader's: one statement on the read
// pool (store.ParentsWithChildrenQuery), so one snapshot of the parents
// and their children.
func (s *Store) ParentsWithChildren(ctx context.Context, ids []string) (parents, children []*job.Job, err error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	arg, err := json.Marshal(ids)
	if err != nil {
		return nil, nil, err
	}
	const in = ` IN (SELECT value FROM json_each(?))`
	q := store.ParentsWithChildrenQuery(jobCols, `id`+in, `parent_id`+in, string(arg))
	rows, err := s.readQuery(ctx, q.SQL(), q.Args()...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	return store.CollectParents(rows, func(r interface{ Scan(dest ...any) error }) (*job.Job, error) { return scanJob(r) })
}
