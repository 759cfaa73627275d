package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestSchemaRefusesForbiddenRows is RELIABILITY.md T4(d) on PostgreSQL: a
// running row without a lease expiry cannot be written, even with SQL
// that bypasses the store.
func TestSchemaRefusesForbiddenRows(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	exec := func(q, id string) error {
		_, err := s.pool.Exec(context.Background(), q, id)
		return err
	}
	storetest.RunSchemaChecks(t, s, exec, func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23514" // check_violation
	})
}
