package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestFileSharedAcrossDrivers is what lets an operator move between the
// default build and the sqlite_cgo build on the same data directory: a
// store written through this build's driver (sqlite.Driver) is read and
// changed by modernc.org/sqlite (the raw connection below), and the store
// then opens again, passes its start-up checks and serves the change. On
// the default build both sides are modernc; `make test-sqlite-cgo` runs it
// with mattn/go-sqlite3 writing the file.
func TestFileSharedAcrossDrivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "us.db")
	s := sqlite.OpenTest(t, sqlite.Config{Path: path})
	j := storetest.NewJob("t", job.LaneInteractive, "k")
	if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.QueryRow(`PRAGMA quick_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("modernc quick_check of the %s-written file: %q, %v", sqlite.Driver, check, err)
	}
	res, err := db.Exec(`UPDATE jobs SET priority = 7 WHERE id = ?`, j.ID)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("modernc update of the %s-written job: %d rows, %v", sqlite.Driver, n, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = sqlite.Open(ctx, sqlite.Config{Path: path, Region: "us"})
	if err != nil {
		t.Fatalf("reopen with %s after modernc wrote: %v", sqlite.Driver, err)
	}
	defer s.Close()
	got, err := s.Get(ctx, j.ID)
	if err != nil || got.Priority != 7 {
		t.Fatalf("job after modernc's write, read by %s: %+v, %v", sqlite.Driver, got, err)
	}
}
