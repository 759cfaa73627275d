package postgres

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// groupOf1 inserts one waiting job on key and returns its group's id and
// ready_at.
func groupOf1(t *testing.T, s *Store, key string) (int64, *int64) {
	t.Helper()
	j := insertN(t, s, 1, 1, key)[0]
	var id int64
	var at *int64
	if err := s.pool.QueryRow(context.Background(), `SELECT g.id, g.ready_at FROM job_groups g JOIN jobs ON jobs.group_id = g.id
		WHERE jobs.id = $1`, j.ID).Scan(&id, &at); err != nil {
		t.Fatal(err)
	}
	return id, at
}

// groupRow returns the group's ready_at and its row version (ctid, xmin).
func groupRow(t *testing.T, s *Store, id int64) (*int64, string) {
	t.Helper()
	var at *int64
	var version string
	if err := s.pool.QueryRow(context.Background(), `SELECT ready_at, ctid::text || '/' || xmin::text FROM job_groups WHERE id = $1`,
		id).Scan(&at, &version); err != nil {
		t.Fatal(err)
	}
	return at, version
}

// show formats a nullable time in Unix nanoseconds.
func show(n *int64) string {
	if n == nil {
		return "NULL"
	}
	return strconv.FormatInt(*n, 10)
}

// groupReady lowers a group's ready_at and leaves a group ready early
// enough as it was: the same row version, not a rewrite.
func TestGroupReadyWritesOnlyAMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	id, at := groupOf1(t, s, "g")
	if at == nil {
		t.Fatal("the group of a waiting job is not ready")
	}
	_, before := groupRow(t, s, id)
	if err := groupReady(ctx, s.pool, id, tm(*at+int64(time.Second))); err != nil {
		t.Fatal(err)
	}
	got, after := groupRow(t, s, id)
	if got == nil || *got != *at || after != before {
		t.Fatalf("a later time: ready_at %s (version %s), want %d unchanged (version %s)", show(got), after, *at, before)
	}
	lower := *at - int64(time.Second)
	if err := groupReady(ctx, s.pool, id, tm(lower)); err != nil {
		t.Fatal(err)
	}
	if got, _ := groupRow(t, s, id); got == nil || *got != lower {
		t.Fatalf("an earlier time: ready_at %s, want %d", show(got), lower)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE job_groups SET ready_at = NULL WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := groupReady(ctx, s.pool, id, tm(*at)); err != nil {
		t.Fatal(err)
	}
	if got, _ := groupRow(t, s, id); got == nil || *got != *at {
		t.Fatalf("a group without ready_at: ready_at %s, want %d", show(got), *at)
	}
}

// A groupReady beside a lease that holds the group and empties it (its
// TouchGroups gives the group a NULL ready_at, from a snapshot without the
// job groupReady is for) waits for that lease and then readies the group.
// Testing the ready_at its own snapshot sees, it would skip the row
// without waiting, and the group would be left with no ready_at.
func TestGroupReadyWaitsForALeaseEmptyingTheGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	id, at := groupOf1(t, s, "g")
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT id FROM job_groups WHERE id = $1 FOR NO KEY UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE job_groups SET ready_at = NULL WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- groupReady(ctx, s.pool, id, tm(*at)) }()
	// Until groupReady returns or waits for the lease's row lock.
	for waiting := false; !waiting; {
		select {
		case err := <-done:
			t.Fatalf("groupReady returned (%v) while a lease held the group", err)
		case <-time.After(10 * time.Millisecond):
		}
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%job_groups%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, _ := groupRow(t, s, id); got == nil || *got != *at {
		t.Fatalf("ready_at %s after the lease, want %d", show(got), *at)
	}
}
