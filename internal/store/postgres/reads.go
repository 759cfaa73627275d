package postgres

import (
	"context"

	"github.com/ratelane/ratelane/internal/store"
)

// read runs one of the shared reads (store.SQLReads) on the pool, with
// numbered placeholders.
func (s *Store) read(ctx context.Context, q *store.Query) (store.ScanRows, error) {
	return s.pool.Query(ctx, q.Numbered(), q.Args()...)
}
