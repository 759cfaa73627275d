package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestMigrateDownUp reverts every migration and applies them again, as CI
// must on every driver.
func TestMigrateDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := sqlite.OpenTest(t, sqlite.Config{})
	if err := s.MigrateDown(ctx); err != nil {
		t.Fatalf("down: %v", err)
	}
	if _, err := s.Get(ctx, "x"); err == nil {
		t.Fatal("the jobs table survived the down migration")
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if _, err := s.Insert(ctx, []*job.Job{storetest.NewJob("acme", job.LaneBatch, "k")}, storetest.Unpaced); err != nil {
		t.Fatalf("insert after down and up: %v", err)
	}
}

// TestRegionIsRecorded: a database file holds one region for good.
func TestRegionIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "eu.db")
	s := sqlite.OpenTest(t, sqlite.Config{Path: path, Region: "eu"})
	s.Close()
	if _, err := sqlite.Open(ctx, sqlite.Config{Path: path, Region: "us"}); err == nil {
		t.Fatal("an EU database opened as the US store")
	}
}
