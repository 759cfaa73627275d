package sqlite

import (
	"context"
	"database/sql"

	"github.com/ratelane/ratelane/internal/store"
)

// read runs one of the shared reads (store.SQLReads) on the read-only
// pool, with ? placeholders.
func (s *Store) read(ctx context.Context, q *store.Query) (store.ScanRows, error) {
	rows, err := s.readQuery(ctx, q.SQL(), q.Args()...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// sqlRows is *sql.Rows as store.ScanRows: a Close without a result (a
// read's error is rows.Err, which the shared reads check).
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }
