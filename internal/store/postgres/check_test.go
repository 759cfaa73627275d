package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelane/ratelane/internal/job"
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

// TestSchemaRefusesForbiddenAttributes pins the rules on a job's
// attributes that migration 0036 folded into jobs_valid with the state
// rules (RunSchemaChecks covers those): a known lane, one to four limit
// keys, a cost of at least 1, a priority in [-100, 100]. The API refuses
// such jobs first (rltype.Job.Validate); the schema refuses them from any
// code path. A well-formed write of each column's bounds is the control.
func TestSchemaRefusesForbiddenAttributes(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	j := storetest.NewJob("acme", job.LaneBatch, "k")
	if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	exec := func(set string) error {
		_, err := s.pool.Exec(ctx, `UPDATE jobs SET `+set+` WHERE id = $1`, j.ID)
		return err
	}
	for _, set := range []string{
		`lane = 'interactive'`, `lane = 'batch'`, `limit_keys = '{a,b,c,d}'`, `limit_keys = '{a}'`,
		`cost = 1`, `priority = -100`, `priority = 100`,
	} {
		if err := exec(set); err != nil {
			t.Fatalf("control %s: refused: %v", set, err)
		}
	}
	for _, set := range []string{
		`lane = 'bulk'`, `limit_keys = '{}'`, `limit_keys = '{a,b,c,d,e}'`, `cost = 0`, `priority = -101`, `priority = 101`,
	} {
		var pe *pgconn.PgError
		if err := exec(set); !errors.As(err, &pe) || pe.Code != "23514" {
			t.Errorf("%s: got %v, want a CHECK constraint violation", set, err)
		}
	}
}
