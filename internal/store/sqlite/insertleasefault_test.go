package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestInsertLeaseFault is storetest.RunInsertLeaseFault on SQLite: a
// trigger, created and dropped on a connection of its own, refuses every
// lease.
func TestInsertLeaseFault(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "us.db")
	s := sqlite.OpenTest(t, sqlite.Config{Path: path})
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.RunInsertLeaseFault(t, s, func(on bool) {
		q := `DROP TRIGGER fail_leases`
		if on {
			q = `CREATE TRIGGER fail_leases BEFORE UPDATE OF state ON jobs WHEN NEW.state = 'running'
				BEGIN SELECT RAISE(ABORT, 'injected: the lease half fails'); END`
		}
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	})
}
