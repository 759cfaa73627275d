package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestSchemaRefusesForbiddenRows is RELIABILITY.md T4(d) on SQLite: a
// running row without a lease expiry cannot be written, even with SQL
// that bypasses the store.
func TestSchemaRefusesForbiddenRows(t *testing.T) {
	t.Parallel()
	s, db := openBeside(t)
	exec := func(q, id string) error {
		_, err := db.Exec(storetest.SQLitePlaceholders(q), id)
		return err
	}
	storetest.RunSchemaChecks(t, s, exec, func(err error) bool {
		return strings.Contains(err.Error(), "CHECK constraint failed")
	})
}

// openBeside opens a store in t's temporary directory and a connection
// of its own to the same file, for SQL that bypasses the store; both are
// closed in t's cleanup.
func openBeside(t *testing.T) (*sqlite.Store, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "us.db")
	s := sqlite.OpenTest(t, sqlite.Config{Path: path})
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db
}
