package sqlite_test

import (
	"testing"

	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestLeaseHalfFaults is storetest.RunLeaseHalfFaults on SQLite: a
// trigger, created and dropped on a connection of its own, refuses every
// lease.
func TestLeaseHalfFaults(t *testing.T) {
	t.Parallel()
	s, db := openBeside(t)
	storetest.RunLeaseHalfFaults(t, s, func(on bool) {
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
