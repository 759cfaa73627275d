package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// SchemaExec runs one SQL statement directly on a driver's database, with
// its single placeholder bound to id. The driver's test supplies it, with
// the driver's own placeholder syntax already substituted for "$1".
type SchemaExec func(sql, id string) error

// schemaWrites are direct SQL writes of rows the state machine forbids
// (STYLE.md habit 2: states are enforced in the schema too). Each must be
// refused by a CHECK constraint, whatever code path tries it. $1 is the id
// of a waiting job.
var schemaWrites = []struct{ name, sql string }{
	{"running without lease expiry", `UPDATE jobs SET state = 'running', lease_token = 'tok', lease_expires_at = NULL WHERE id = $1`},
	{"running without lease token", `UPDATE jobs SET state = 'running', lease_token = NULL, lease_expires_at = eligible_at WHERE id = $1`},
	{"insert running without lease expiry", `INSERT INTO jobs (id, kind, region, lane, tenant, limit_keys, cost, priority,
		budget_congestion, budget_transient, budget_schema, group_id, state, eligible_at, created_at, updated_at, lease_token, lease_expires_at)
		SELECT id || '-forged', kind, region, lane, tenant, limit_keys, cost, priority, budget_congestion, budget_transient,
		budget_schema, group_id, 'running', eligible_at, created_at, updated_at, 'tok', NULL FROM jobs WHERE id = $1`},
	{"stale lease on a waiting job", `UPDATE jobs SET lease_token = 'tok', lease_expires_at = eligible_at WHERE id = $1`},
	{"published without finished_at", `UPDATE jobs SET state = 'published', finished_at = NULL WHERE id = $1`},
	{"finished_at on a waiting job", `UPDATE jobs SET finished_at = eligible_at WHERE id = $1`},
	{"terminal without a reason", `UPDATE jobs SET state = 'terminal', reason = '', finished_at = eligible_at WHERE id = $1`},
	{"a reason on a waiting job", `UPDATE jobs SET reason = 'cancelled' WHERE id = $1`},
	{"unknown state", `UPDATE jobs SET state = 'sleeping' WHERE id = $1`},
}

// RunSchemaChecks is RELIABILITY.md T4(d) for one driver: writing a
// running row without a lease expiry (and the other rows the state
// machine forbids) directly with SQL fails with a CHECK violation, and
// the job is unchanged. A positive control first proves the statements
// can succeed at all, so a failure is the constraint's doing.
// isCheck reports whether an error is the driver's CHECK violation.
func RunSchemaChecks(t *testing.T, s store.Store, exec SchemaExec, isCheck func(error) bool) {
	t.Helper()
	j := NewJob("acme", job.LaneBatch, "k")
	insert(t, s, j)
	before := get(t, s, j.ID)
	// Positive control: a well-formed running row with an expiry can be
	// written by the same SQL, and written back.
	if err := exec(`UPDATE jobs SET state = 'running', lease_token = 'tok', lease_expires_at = eligible_at WHERE id = $1`, j.ID); err != nil {
		t.Fatalf("control: a valid running row was refused: %v", err)
	}
	if got := get(t, s, j.ID); got.State != job.StateRunning || !got.LeaseExpiresAt.Equal(T0) {
		t.Fatalf("control: wrote %s expiring %v", got.State, got.LeaseExpiresAt)
	}
	if err := exec(`UPDATE jobs SET state = 'waiting', lease_token = NULL, lease_expires_at = NULL WHERE id = $1`, j.ID); err != nil {
		t.Fatalf("control: back to waiting: %v", err)
	}
	for _, w := range schemaWrites {
		err := exec(w.sql, j.ID)
		switch {
		case err == nil:
			t.Errorf("%s: the write succeeded; the schema must refuse it", w.name)
		case !isCheck(err):
			t.Errorf("%s: failed with %v, want a CHECK constraint violation", w.name, err)
		}
	}
	if after := get(t, s, j.ID); after.State != before.State || !after.LeaseExpiresAt.IsZero() || !after.FinishedAt.IsZero() || after.Reason != "" {
		t.Fatalf("refused writes changed the job: %+v", after)
	}
	if _, err := s.Get(context.Background(), j.ID+"-forged"); err == nil {
		t.Fatal("the forged running row exists")
	}
	// Nothing running without an expiry is ever reported by the store
	// either: every running job it returns has one.
	for _, r := range leaseFor(t, s, T0, 1, time.Minute) {
		if r.LeaseExpiresAt.IsZero() {
			t.Fatalf("leased job %s has no expiry", r.ID)
		}
	}
}

// SQLitePlaceholders rewrites "$1" to "?1" for drivers that number
// placeholders that way.
func SQLitePlaceholders(sql string) string { return strings.ReplaceAll(sql, "$1", "?1") }
