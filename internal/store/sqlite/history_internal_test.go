package sqlite

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestMigrateInlineHistory reverts migration 0005 on a job with two history
// records (back to one job_attempts row each) and applies it again: the
// history comes back whole and in order both ways.
func TestMigrateInlineHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j := storetest.NewJob("t", job.LaneInteractive, "k")
	if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
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
	down, err := migrations.ReadFile("migrations/0005_inline_history.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.wdb.ExecContext(ctx, string(down)); err != nil {
		t.Fatalf("down 0005: %v", err)
	}
	if _, err := s.wdb.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = 5`); err != nil {
		t.Fatal(err)
	}
	rows, err := s.wdb.QueryContext(ctx, `SELECT seq FROM job_attempts WHERE job_id = ? ORDER BY seq`, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, n)
	}
	rows.Close()
	if !slices.Equal(seqs, []int{1, 2}) {
		t.Fatalf("after down: job_attempts seqs %v, want [1 2]", seqs)
	}
	if err := s.Migrate(ctx); err != nil {
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
