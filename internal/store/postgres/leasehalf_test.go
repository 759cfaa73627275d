package postgres

import (
	"context"
	"testing"

	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestLeaseHalfFaults is storetest.RunLeaseHalfFaults on PostgreSQL: a
// trigger in the test's schema refuses every lease, after the insert's or
// the finish's statements ran in the same transaction.
func TestLeaseHalfFaults(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	storetest.RunLeaseHalfFaults(t, s, func(on bool) {
		q := `DROP TRIGGER fail_leases ON jobs`
		if on {
			q = `CREATE OR REPLACE FUNCTION fail_leases() RETURNS trigger LANGUAGE plpgsql AS
					$$ BEGIN RAISE EXCEPTION 'injected: the lease half fails'; END $$;
				CREATE TRIGGER fail_leases BEFORE UPDATE ON jobs FOR EACH ROW
					WHEN (NEW.state = 'running' AND OLD.state <> 'running') EXECUTE FUNCTION fail_leases()`
		}
		if _, err := s.pool.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	})
}
