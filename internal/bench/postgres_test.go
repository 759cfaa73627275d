package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/testkit"
)

// benchSchemas lists the schemas this process's workloads made (see
// env.client: the name carries the pid, so another engineer's run on the
// shared database does not count).
func benchSchemas(t *testing.T, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1 ORDER BY 1`,
		fmt.Sprintf(`bench\_%%\_%d\_%%`, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestPostgresWorkloadsDropTheirSchemas runs every smoke workload on
// PostgreSQL and checks that none leaves a schema behind after a normal
// end, and that a workload cut short (its context cancelled, as ctrl-C
// does) drops its schema too. The batch-isolation workload runs with its
// batch pacer off (BatchCPUShare -1): only its schema matters here, and
// the pacer's default share made its sweep about ten times as long in
// wall time (docs/benchmarks.md, "Session 44 (s44h2)").
func TestPostgresWorkloadsDropTheirSchemas(t *testing.T) {
	url := testkit.PostgresURL(t)
	if testing.Short() {
		t.Skip("runs every workload")
	}
	for _, name := range Workloads {
		t.Run(name, func(t *testing.T) {
			if _, err := Run(context.Background(), name, Options{Store: "postgres", PostgresURL: url, Smoke: true, BatchCPUShare: -1, Duration: 2 * time.Minute}); err != nil {
				t.Fatal(err)
			}
			if left := benchSchemas(t, url); len(left) != 0 {
				t.Fatalf("schemas left after a normal end: %v", left)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if _, err := Run(ctx, "http-enqueue", Options{Store: "postgres", PostgresURL: url, Duration: time.Minute}); err == nil {
			t.Fatal("a workload cancelled after 300 ms ended without an error")
		}
		if left := benchSchemas(t, url); len(left) != 0 {
			t.Fatalf("schemas left after a cancelled run: %v", left)
		}
	})
}
