package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// insertOneJob inserts j into s.
func insertOneJob(t *testing.T, s *Store, j *job.Job) {
	t.Helper()
	if _, err := s.Insert(context.Background(), []*job.Job{j}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
}

// jobGroup returns the id of the group row j was written with, and fails
// the test unless that row is j's group (lane, tenant, kind and keys).
func jobGroup(t *testing.T, s *Store, j *job.Job) int64 {
	t.Helper()
	var id int64
	var lane, tenant, kind, keys string
	if err := s.rdb.QueryRow(`SELECT g.id, g.lane, g.tenant, g.kind, g.keys FROM jobs j JOIN job_groups g ON g.id = j.group_id
		WHERE j.id = ?`, j.ID).Scan(&id, &lane, &tenant, &kind, &keys); err != nil {
		t.Fatal(err)
	}
	if want := (groupOf{string(j.Lane), j.Tenant, j.Kind, stringsJSON(j.LimitKeys)}); (groupOf{lane, tenant, kind, keys}) != want {
		t.Errorf("job %s written with group %d = %v; want its own group %v", j.ID, id, groupOf{lane, tenant, kind, keys}, want)
	}
	return id
}

// TestGroupIDsForgetRolledBackGroups: a write that created a group row
// and then failed leaves no id behind in the writer's memo (groupIDs).
// The rolled-back row's id is free again, and the next new group takes
// it; a later insert into the first group must create that group again,
// not land its job in the second one.
func TestGroupIDsForgetRolledBackGroups(t *testing.T) {
	t.Parallel()
	for _, tc := range failingWrites {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := OpenTest(t, Config{})
			failed := errors.New("the write fails after creating a group")
			var rolledBack int64
			err := runFailingWrite(t, s, func(tx *writeTx) error {
				a := storetest.NewJob("acme", job.LaneBatch, "a")
				if _, err := s.insertJobs(tx, []*job.Job{a}, storetest.Unpaced); err != nil {
					return err
				}
				if err := s.queryRow(tx, `SELECT group_id FROM jobs WHERE id = ?`, a.ID).Scan(&rolledBack); err != nil {
					return err
				}
				if tc.panics {
					panic("the write panics after creating a group")
				}
				return failed
			}, tc.shared)
			if err == nil || !errors.Is(err, failed) && !strings.Contains(err.Error(), "panicked") {
				t.Fatalf("the failing write: %v; want it to fail", err)
			}
			h := storetest.NewJob("acme", job.LaneBatch, "h")
			insertOneJob(t, s, h)
			if got := jobGroup(t, s, h); got != rolledBack {
				t.Fatalf("the next new group took id %d, not the rolled-back %d: the test's premise does not hold", got, rolledBack)
			}
			a := storetest.NewJob("acme", job.LaneBatch, "a")
			insertOneJob(t, s, a)
			jobGroup(t, s, a)
		})
	}
}

// TestGroupIDsSeeRebuiltGroups: job_groups rebuilt under the writer's
// memo (MigrateDown and Migrate, by this store between its transactions
// or by another process on the file) renumbers the groups; an insert into
// a group the writer had met must find its group again, not the row that
// now holds the old id.
func TestGroupIDsSeeRebuiltGroups(t *testing.T) {
	t.Parallel()
	for _, other := range []bool{false, true} {
		name := "this store"
		if other {
			name = "another store on the file"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := OpenTest(t, Config{})
			a := storetest.NewJob("acme", job.LaneBatch, "a")
			insertOneJob(t, s, storetest.NewJob("acme", job.LaneBatch, "z")) // a's group is not the first row
			insertOneJob(t, s, a)
			old := jobGroup(t, s, a)
			rebuild := s
			if other {
				rebuild = OpenTest(t, Config{Path: s.Path()})
			}
			if err := rebuild.MigrateDown(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rebuild.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			h := storetest.NewJob("acme", job.LaneBatch, "h")
			insertOneJob(t, rebuild, storetest.NewJob("acme", job.LaneBatch, "y"))
			insertOneJob(t, rebuild, h)
			if got := jobGroup(t, s, h); got != old {
				t.Fatalf("after the rebuild another group took id %d, not a's old %d: the test's premise does not hold", got, old)
			}
			a = storetest.NewJob("acme", job.LaneBatch, "a")
			insertOneJob(t, s, a)
			jobGroup(t, s, a)
		})
	}
}

// TestGroupReadyAfterDrainAndPrune: a group the writer has met, whose
// jobs were all leased (ready_at NULL), finished and pruned, is made
// ready again by the next insert. The writer's memo holds the group's id
// only: a memo of its ready_at would still say T0, skip the update, and
// leave the new job unleasable.
func TestGroupReadyAfterDrainAndPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := OpenTest(t, Config{})
	first := storetest.NewJob("acme", job.LaneBatch, "a")
	insertOneJob(t, s, first)
	now := storetest.T0
	leased, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 8, LeaseFor: time.Minute})
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %d jobs, %v; want 1", len(leased), err)
	}
	finishSucceeded(t, s, leased, job.StatePublished, now)
	// A lease that finds the group empty clears its ready_at.
	if got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 8, LeaseFor: time.Minute}); err != nil || len(got) != 0 {
		t.Fatalf("lease of a drained group: %d jobs, %v; want none", len(got), err)
	}
	if n, err := s.Prune(ctx, now.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want 1", n, err)
	}
	var ready sql.NullInt64
	if err := s.rdb.QueryRow(`SELECT ready_at FROM job_groups`).Scan(&ready); err != nil || ready.Valid {
		t.Fatalf("the drained group's ready_at: %v, %v; want NULL (the test's premise)", ready, err)
	}
	next := storetest.NewJob("acme", job.LaneBatch, "a")
	next.EligibleAt = now.Add(time.Second)
	insertOneJob(t, s, next)
	got, err := s.Lease(ctx, store.LeaseParams{Now: now.Add(2 * time.Second), Max: 8, LeaseFor: time.Minute})
	if err != nil || len(got) != 1 || got[0].ID != next.ID {
		t.Fatalf("lease after an insert into the drained group: %d jobs, %v; want the new job", len(got), err)
	}
}

// TestInsertWritesGroupRowOnlyWhenReadyMoves: an insert into a group whose
// ready_at is already as early as its job's writes no job_groups row (the
// WAL pages of the row and of its job_groups_round entry); an earlier job
// lowers it, and an accepted (not waiting) job leaves it. The writes are
// counted by a trigger on the writer's connection.
func TestInsertWritesGroupRowOnlyWhenReadyMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := OpenTest(t, Config{})
	if err := s.write(ctx, func(tx *writeTx) error {
		if _, err := tx.Exec(`CREATE TEMP TABLE group_writes (ready_at INTEGER)`); err != nil {
			return err
		}
		_, err := tx.Exec(`CREATE TEMP TRIGGER count_group_writes AFTER UPDATE ON main.job_groups
			BEGIN INSERT INTO group_writes VALUES (new.ready_at); END`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	writes := func() (n int) {
		t.Helper()
		if err := s.write(ctx, func(tx *writeTx) error {
			return tx.QueryRow(`SELECT count(*) FROM group_writes`).Scan(&n)
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insertOneJob(t, s, storetest.NewJob("acme", job.LaneBatch, "a"))
	for _, step := range []struct {
		name   string
		at     time.Duration
		state  job.State
		writes int
	}{
		{"a waiting job as early as ready_at", 0, job.StateWaiting, 0},
		{"a later waiting job", time.Second, job.StateWaiting, 0},
		{"an accepted job", -time.Hour, job.StateAccepted, 0},
		{"an earlier waiting job", -time.Second, job.StateWaiting, 1},
	} {
		before := writes()
		j := storetest.NewJob("acme", job.LaneBatch, "a")
		j.EligibleAt, j.State = storetest.T0.Add(step.at), step.state
		insertOneJob(t, s, j)
		if got := writes() - before; got != step.writes {
			t.Errorf("%s: %d group row writes; want %d", step.name, got, step.writes)
		}
	}
	var ready int64
	if err := s.rdb.QueryRow(`SELECT ready_at FROM job_groups`).Scan(&ready); err != nil || ready != ns(storetest.T0.Add(-time.Second)) {
		t.Fatalf("ready_at %d, %v; want the earliest waiting job's %d", ready, err, ns(storetest.T0.Add(-time.Second)))
	}
}
