// Package pgtest opens PostgreSQL stores for the tests of packages above
// the store (the engine, schedules, the HTTP API), so that opening one on
// a test's schema, migrating it and closing it is written once. Only tests
// import it; the driver's own tests have theirs (openStore, newStore).
package pgtest

import (
	"context"
	"testing"

	"github.com/ratelane/ratelane/internal/store/postgres"
)

// Open opens a store of region us on schema (testkit.PostgresSchema's,
// dropped when the test ends) of the database at url, with at most
// maxConns connections, migrates it, and closes it when the test ends.
// Each call is a pool of its own: two calls on one schema are two nodes.
func Open(t testing.TB, url, schema string, maxConns int32) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url, Schema: schema, Region: "us", MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
