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

// openConfig opens a store on cfg, closed when the test ends; cfg.URL
// defaults to the test database. It does not migrate.
func openConfig(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = testURL(t)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open %s: %v", cfg.Schema, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openStore opens a store of four connections on schema, closed when the
// test ends. It does not migrate.
func openStore(t testing.TB, schema, region string) *Store {
	t.Helper()
	return openConfig(t, Config{Schema: schema, Region: region, MaxConns: 4})
}

// migratedStore is openConfig on a fresh schema unless cfg names one,
// migrated.
func migratedStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Schema == "" {
		cfg.Schema = newSchema(t)
	}
	s := openConfig(t, cfg)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// newStore returns a migrated store of region "us" on a fresh schema.
func newStore(t testing.TB) *Store {
	t.Helper()
	return migratedStore(t, Config{Region: "us", MaxConns: 4})
}

// twoNodes returns two stores with separate pools on one migrated schema:
// two ratelane nodes sharing a region's database.
func twoNodes(t testing.TB) (*Store, *Store) {
	t.Helper()
	a := newStore(t)
	return a, openStore(t, a.Schema(), "us")
}
