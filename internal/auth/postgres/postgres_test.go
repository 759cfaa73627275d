package postgres_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/auth/authtest"
	"github.com/ratelane/ratelane/internal/auth/postgres"

	"github.com/ratelane/ratelane/internal/testkit"
)

// testURL is the test database (testkit.PostgresURLEnv); unset, the tests
// skip, and set, a database that cannot be reached fails them (CI must not
// pass by skipping).
func testURL(t *testing.T) string {
	t.Helper()
	return testkit.PostgresURL(t)
}

// newSchema returns a fresh schema name, dropped with everything in it when
// the test ends.
func newSchema(t *testing.T) string {
	t.Helper()
	_, schema := testkit.PostgresSchema(t, "rl_authtest_")
	return schema
}

func open(t *testing.T, schema string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: testURL(t), Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatalf("open %s: %v", schema, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	authtest.Run(t, func(t *testing.T) auth.Backend { return open(t, newSchema(t)) })
}

// TestSharedSchema opens one schema from two pools, as two nodes would,
// concurrently (the advisory lock serialises the schema creation): a key
// created on one authenticates on the other.
func TestSharedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := newSchema(t)
	stores := make(chan *postgres.Store, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			s, err := postgres.Open(ctx, postgres.Config{URL: testURL(t), Schema: schema, MaxConns: 2})
			if err != nil {
				errs <- err
				return
			}
			stores <- s
		}()
	}
	var nodes []*auth.Keys
	for range 2 {
		select {
		case err := <-errs:
			t.Fatal(err)
		case s := <-stores:
			t.Cleanup(func() { _ = s.Close() })
			nodes = append(nodes, auth.NewKeys(s, nil))
		}
	}
	secret, _, err := nodes[0].Create(ctx, "acme", auth.RoleProducer, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
