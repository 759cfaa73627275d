package postgres

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testURL is the test database (testkit.PostgresURLEnv); unset, the tests
// skip, and set, a database that cannot be reached fails them (CI must not
// pass by skipping).
func testURL(t testing.TB) string {
	t.Helper()
	return testkit.PostgresURL(t)
}

// newSchema returns a fresh schema name, dropped with everything in it when
// the test ends.
func newSchema(t testing.TB) string {
	t.Helper()
	_, schema := testkit.PostgresSchema(t, "rl_test_")
	return schema
}

// openStore opens a store on schema, closed when the test ends. It does not
// migrate.
func openStore(t testing.TB, schema, region string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{URL: testURL(t), Schema: schema, Region: region, MaxConns: 4})
	if err != nil {
		t.Fatalf("open %s: %v", schema, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newStore returns a migrated store of region "us" on a fresh schema.
func newStore(t testing.TB) *Store {
	t.Helper()
	s := openStore(t, newSchema(t), "us")
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// twoNodes returns two stores with separate pools on one migrated schema:
// two ratelane nodes sharing a region's database.
func twoNodes(t testing.TB) (*Store, *Store) {
	t.Helper()
	a := newStore(t)
	return a, openStore(t, a.Schema(), "us")
}
