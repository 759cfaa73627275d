package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

func tableExists(t *testing.T, s *Store, name string) bool {
	t.Helper()
	var reg *string
	err := s.pool.QueryRow(context.Background(), `SELECT to_regclass($1)::text`, s.Schema()+"."+name).Scan(&reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg != nil
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second migrate (idempotent): %v", err)
	}
	for _, tbl := range []string{"jobs", "job_groups", "limit_keys", "store_meta"} {
		if !tableExists(t, s, tbl) {
			t.Fatalf("after up: table %s missing", tbl)
		}
	}
	if _, err := s.Insert(ctx, []*job.Job{storetest.NewJob("t", "interactive", "k")}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateDown(ctx); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, tbl := range []string{"jobs", "job_groups", "limit_keys", "store_meta"} {
		if tableExists(t, s, tbl) {
			t.Fatalf("after down: table %s still there", tbl)
		}
	}
	if err := s.MigrateDown(ctx); err != nil {
		t.Fatalf("second down (idempotent): %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	j := storetest.NewJob("t", "interactive", "k")
	if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
		t.Fatalf("insert after up-down-up: %v", err)
	}
	if _, err := s.Get(ctx, j.ID); err != nil {
		t.Fatalf("get after up-down-up: %v", err)
	}
}

// Many nodes starting at once all migrate one fresh schema: the advisory
// lock serializes them and the later ones find nothing to do.
func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		s := openStore(t, schema, "us")
		wg.Go(func() { errs[i] = s.Migrate(context.Background()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("node %d: %v", i, err)
		}
	}
}

// Invariant 8: a store wired to another region's schema fails at start-up.
func TestRegionIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	_, err := Open(ctx, Config{URL: testURL(t), Schema: s.Schema(), Region: "eu"})
	if err == nil || !strings.Contains(err.Error(), `holds region "us"`) {
		t.Fatalf("open us schema as eu: err = %v, want a region mismatch", err)
	}
	j := storetest.NewJob("t", "interactive", "k")
	j.Region = "eu"
	if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err == nil {
		t.Fatal("insert of an eu job into the us store succeeded")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []Config{{Region: "us"}, {URL: "postgres://x"}, {URL: "postgres://x", Region: "us", MaxConns: -1}} {
		if _, err := Open(ctx, c); err == nil {
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
	if got := (Config{Region: "eu"}).WithDefaults().Schema; got != "ratelane_eu" {
		t.Errorf("default schema = %q", got)
	}
}

// TestMigrateInlineHistory is storetest.RunInlineHistoryMigration on PostgreSQL.
func TestMigrateInlineHistory(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	storetest.RunInlineHistoryMigration(t, s, func(ctx context.Context, id string) ([]int, error) {
		down, err := migrationFS.ReadFile("migrations/0005_inline_history.down.sql")
		if err != nil {
			return nil, err
		}
		if _, err := s.pool.Exec(ctx, string(down)); err != nil {
			return nil, fmt.Errorf("down 0005: %w", err)
		}
		if _, err := s.pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = 5`); err != nil {
			return nil, err
		}
		rows, _ := s.pool.Query(ctx, `SELECT seq FROM job_attempts WHERE job_id = $1 ORDER BY seq`, id)
		return pgx.CollectRows(rows, pgx.RowTo[int])
	}, s.Migrate)
}

// Migration 0014 leaves room on jobs pages for the rows' next versions
// (see its comment for the WAL it saves).
func TestJobsFillfactor(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	var opts []string
	err := s.pool.QueryRow(context.Background(), `SELECT coalesce(reloptions, '{}') FROM pg_class
		WHERE oid = 'jobs'::regclass`).Scan(&opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(opts, "fillfactor=70") {
		t.Fatalf("jobs reloptions = %v, want fillfactor=70", opts)
	}
}
