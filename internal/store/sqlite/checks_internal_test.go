package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestJobWritesBuildNoTemporaryBTree checks the programs of the statements
// that write a job row on every job (the insert, the finish): none opens a
// temporary B-tree. SQLite coded the jobs table's "state IN (7 values)"
// CHECK and jobs_deadline's "state IN (...)" as one, built and filled for
// every row written (migration 0019 spells them without IN).
func TestJobWritesBuildNoTemporaryBTree(t *testing.T) {
	s := openTestStore(t)
	insert := `INSERT INTO jobs (id, kind, region, lane, tenant, limit_keys, cost, priority, payload,
		idempotency_key, deadline, budget_congestion, budget_transient, budget_schema, parent_id, depth,
		group_id, state, reason, eligible_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	for name, q := range map[string]string{"finish": endAttemptSQL, "insert": insert} {
		n := strings.Count(q, "?")
		rows, err := s.rdb.Query("EXPLAIN "+q, make([]any, n)...) // the same program on any connection
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ops, ephemeral := 0, 0
		for rows.Next() {
			var addr, p1, p2, p3, p5 int
			var opcode, comment sql.NullString
			var p4 sql.RawBytes
			if err := rows.Scan(&addr, &opcode, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
				t.Fatal(err)
			}
			ops++
			if opcode.String == "OpenEphemeral" {
				ephemeral++
			}
		}
		rows.Close()
		if ops < 20 {
			t.Fatalf("%s: %d opcodes: EXPLAIN did not list the program", name, ops)
		}
		if ephemeral > 0 {
			t.Errorf("%s: %d temporary B-trees per row written", name, ephemeral)
		}
	}
}

// TestMigration0019KeepsRowsAndRules runs 0019 down and up again on a store
// holding jobs in several states and checks that every row (rowid, columns,
// history) is kept and that the rules the CHECKs spell still hold.
func TestMigration0019KeepsRowsAndRules(t *testing.T) {
	migrationKeepsRowsAndRules(t, 19, "0019_jobs_checks_without_in", false)
}

// TestMigration0028KeepsRowsAndRules is the same for 0028 (the state rules
// as one CHECK), which also keeps every index and trigger of the jobs
// table: each one's definition is the same after its down and up (since
// migration 0033, 13 indexes and the trigger of job_group_ids).
func TestMigration0028KeepsRowsAndRules(t *testing.T) {
	migrationKeepsRowsAndRules(t, 28, "0028_jobs_one_state_check", true)
}

// migrationKeepsRowsAndRules runs the jobs table rebuild name (version)
// down and up again, with the migrations after it (sinceMigration); see
// TestMigration0019KeepsRowsAndRules. With indexes, the jobs table's
// indexes and triggers must come back as they were.
func migrationKeepsRowsAndRules(t *testing.T, version int, name string, indexes bool) {
	s := openTestStore(t)
	ctx := context.Background()
	var batch []*job.Job
	for i := range 9 {
		j := storetest.NewJob("t", job.LaneBatch, "k")
		if i%3 == 0 {
			j.Deadline = storetest.T0.Add(time.Hour)
		}
		batch = append(batch, j)
	}
	if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	leased, err := s.Lease(ctx, store.LeaseParams{Now: storetest.T0, Max: 6, LeaseFor: time.Hour})
	if err != nil || len(leased) != 6 {
		t.Fatalf("lease: %d, %v", len(leased), err)
	}
	var ts []store.Transition
	for _, j := range leased[:3] {
		ts = append(ts, store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateValidated,
			Record: job.AttemptRecord{At: storetest.T0, Attempt: j.Attempt, Outcome: job.ClassSuccess},
			Keys:   store.KeyEffect{Now: storetest.T0, Success: true}})
	}
	if _, err := s.Finish(ctx, ts); err != nil {
		t.Fatal(err)
	}
	dump := func() string {
		rows, err := s.rdb.QueryContext(ctx, `SELECT rowid, * FROM jobs ORDER BY rowid`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var b strings.Builder
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		return b.String()
	}
	schema := func() string {
		var b strings.Builder
		rows, err := s.rdb.QueryContext(ctx, `SELECT name, sql FROM sqlite_schema WHERE type IN ('index', 'trigger') AND tbl_name = 'jobs' ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var def sql.NullString
			if err := rows.Scan(&name, &def); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, name, strings.ReplaceAll(def.String, "\n", " ")) // a trigger spans lines
		}
		return b.String()
	}
	before, beforeIdx := dump(), schema()
	for _, m := range sinceMigration(version, name) {
		if err := s.onWriterConn(func(c *sql.Conn) error { return s.execMigration(ctx, c, m, `SELECT ?`) }); err != nil {
			t.Fatal(err)
		}
	}
	if after := dump(); after != before || strings.Count(before, "\n") != 9 {
		t.Fatalf("rows changed by the migration:\n%s\nnow:\n%s", before, after)
	}
	if after := schema(); indexes && (after != beforeIdx || strings.Count(beforeIdx, "\n") != 14) {
		t.Fatalf("indexes changed by the migration:\n%s\nnow:\n%s", beforeIdx, after)
	}
	var ok string
	if err := s.rdb.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check = %q, %v", ok, err)
	}
	// The rules: a state outside the seven, and a final state without
	// finished_at, are refused; a known state is accepted.
	id := leased[5].ID
	for q, wantErr := range map[string]bool{
		`UPDATE jobs SET state = 'bogus' WHERE id = ?`:                                                  true,
		`UPDATE jobs SET state = 'published', lease_token = NULL, lease_expires_at = NULL WHERE id = ?`: true,
		`UPDATE jobs SET state = 'waiting', lease_token = NULL, lease_expires_at = NULL WHERE id = ?`:   false,
	} {
		err := s.onWriterConn(func(c *sql.Conn) error { _, err := c.ExecContext(ctx, q, id); return err })
		if (err != nil) != wantErr {
			t.Errorf("%s: err %v, want an error: %v", q, err, wantErr)
		}
	}
}

// sinceMigration is the migration name (version) and every later one down,
// latest first, then up again: a rebuild's down and up recreate the
// indexes of its own time, which a later migration (0032: jobs_lane_ready
// replaced) then changes as it did on the way up.
func sinceMigration(version int, name string) []migration {
	var out []migration
	for _, m := range migrationFiles(".down.sql", true) {
		if m.version >= version {
			out = append(out, m)
		}
	}
	for _, m := range migrationFiles(".up.sql", false) {
		if m.version >= version {
			out = append(out, m)
		}
	}
	if len(out) == 0 || out[len(out)/2-1].name != name+".down.sql" || out[len(out)/2].name != name+".up.sql" {
		panic(fmt.Sprintf("sinceMigration: no migration %d %s", version, name))
	}
	return out
}
