package storetest

import (
	"context"
	"reflect"
	"slices"
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
	// Each rule in each state (SQLite spells the rules as one, state by
	// state: every state's branch is tried).
	{"running with a reason", `UPDATE jobs SET state = 'running', lease_token = 'tok', lease_expires_at = eligible_at, reason = 'cancelled' WHERE id = $1`},
	{"running with finished_at", `UPDATE jobs SET state = 'running', lease_token = 'tok', lease_expires_at = eligible_at, finished_at = eligible_at WHERE id = $1`},
	{"published with a reason", `UPDATE jobs SET state = 'published', reason = 'cancelled', finished_at = eligible_at WHERE id = $1`},
	{"published with a lease", `UPDATE jobs SET state = 'published', finished_at = eligible_at, lease_token = 'tok', lease_expires_at = eligible_at WHERE id = $1`},
	{"validated with finished_at", `UPDATE jobs SET state = 'validated', finished_at = eligible_at WHERE id = $1`},
	{"validated with a lease expiry", `UPDATE jobs SET state = 'validated', lease_expires_at = eligible_at WHERE id = $1`},
	{"retry_scheduled with a reason", `UPDATE jobs SET state = 'retry_scheduled', reason = 'cancelled' WHERE id = $1`},
	{"retry_scheduled with a lease token", `UPDATE jobs SET state = 'retry_scheduled', lease_token = 'tok' WHERE id = $1`},
	{"accepted with finished_at", `UPDATE jobs SET state = 'accepted', finished_at = eligible_at WHERE id = $1`},
	{"terminal without finished_at", `UPDATE jobs SET state = 'terminal', reason = 'cancelled' WHERE id = $1`},
	{"terminal with a lease", `UPDATE jobs SET state = 'terminal', reason = 'cancelled', finished_at = eligible_at,
		lease_token = 'tok', lease_expires_at = eligible_at WHERE id = $1`},
}

// schemaAllowed are direct SQL writes of a well-formed row in each state
// but running (the control of RunSchemaChecks), each followed by the way
// back to waiting: the rules refuse only what they must.
var schemaAllowed = []string{
	`UPDATE jobs SET state = 'published', finished_at = eligible_at WHERE id = $1`,
	`UPDATE jobs SET state = 'terminal', reason = 'cancelled', finished_at = eligible_at WHERE id = $1`,
	`UPDATE jobs SET state = 'validated' WHERE id = $1`,
	`UPDATE jobs SET state = 'retry_scheduled' WHERE id = $1`,
	`UPDATE jobs SET state = 'accepted' WHERE id = $1`,
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
	for _, q := range schemaAllowed {
		if err := exec(q, j.ID); err != nil {
			t.Fatalf("control: %s was refused: %v", q, err)
		}
		if err := exec(`UPDATE jobs SET state = 'waiting', reason = '', finished_at = NULL WHERE id = $1`, j.ID); err != nil {
			t.Fatalf("control: back to waiting after %s: %v", q, err)
		}
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

// HistoryRevert reverts migration 0005 (inline history) directly on a
// driver's database, forgets it was applied, and returns the seq numbers
// of job id's rows in the old job_attempts table, in order. The driver's
// test supplies it; [RunInlineHistoryMigration] does the rest.
type HistoryRevert func(ctx context.Context, id string) ([]int, error)

// RunInlineHistoryMigration reverts migration 0005 on a job with two
// history records (back to one job_attempts row each) and applies it again
// with migrate: the history comes back whole and in order both ways.
func RunInlineHistoryMigration(t *testing.T, s store.Store, revert HistoryRevert, migrate func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	j := NewJob("t", job.LaneInteractive, "k")
	if _, err := s.Insert(ctx, []*job.Job{j}, Unpaced); err != nil {
		t.Fatal(err)
	}
	now := j.CreatedAt.Add(time.Second)
	if _, err := s.Cancel(ctx, j.ID, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redrive(ctx, j.ID, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	before, err := s.Get(ctx, j.ID)
	if err != nil || len(before.History) != 2 {
		t.Fatalf("before: %v, %+v", err, before)
	}
	seqs, err := revert(ctx, j.ID)
	if err != nil || !slices.Equal(seqs, []int{1, 2}) {
		t.Fatalf("after down: job_attempts seqs %v (%v), want [1 2]", seqs, err)
	}
	if err := migrate(ctx); err != nil {
		t.Fatalf("up 0005 again: %v", err)
	}
	after, err := s.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after.History, before.History) {
		t.Fatalf("history after down and up:\n%+v\nwant\n%+v", after.History, before.History)
	}
}
