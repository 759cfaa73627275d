package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresURLEnv names the environment variable that points the tests at a
// PostgreSQL database; CI sets it, so there the PostgreSQL tests always run.
const PostgresURLEnv = "RATELANE_TEST_POSTGRES_URL"

// PostgresURL returns the test database's URL, skipping the test when
// PostgresURLEnv is unset.
func PostgresURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(PostgresURLEnv)
	if url == "" {
		t.Skipf("%s is not set; set it (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL tests", PostgresURLEnv)
	}
	return url
}

// PostgresSchema returns a fresh schema name, prefix and random hex, that
// t.Cleanup drops with everything in it; tests share one database, and
// each test's objects live in its own schema. It does not create the
// schema (the stores' migrations do). It skips like PostgresURL.
func PostgresSchema(t testing.TB, prefix string) (url, schema string) {
	t.Helper()
	url = PostgresURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema = prefix + hex.EncodeToString(b)
	t.Cleanup(func() {
		if err := PostgresExec(url, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return url, schema
}

// PostgresExec runs one statement on the database at url through a
// connection of its own (the test's role, outside any store's pool),
// within Timeout.
func PostgresExec(url, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
