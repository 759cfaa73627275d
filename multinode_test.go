package ratelane_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane"
)

// postgresURL returns the test database, skipping when none is configured.
// CI sets RATELANE_TEST_POSTGRES_URL, so there the test always runs.
func postgresURL(t testing.TB) string {
	url := os.Getenv("RATELANE_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("RATELANE_TEST_POSTGRES_URL is not set")
	}
	return url
}

func dropSchema(t testing.TB, url, schema string) {
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer conn.Close(context.Background())
		conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	})
}

// TestTwoNodesShareOneKey: two engines (two connection pools, as two nodes
// would have) on one PostgreSQL database, one key at 50/s burst 5 with a
// concurrency cap of 4, and an ample backlog. Over 10 s the starts never
// exceed 50*10+5 and reach at least 95% of it; the cap is never exceeded.
func TestTwoNodesShareOneKey(t *testing.T) {
	url := postgresURL(t)
	// Not parallel: it measures rates, so it runs while the package's
	// parallel tests are paused.
	schema := fmt.Sprintf("two_nodes_%d", time.Now().UnixNano())
	dropSchema(t, url, schema)
	ctx := context.Background()
	region := ratelane.Region{Name: "us", PostgresURL: url, PostgresSchema: schema}
	limit := ratelane.Limit{Name: "api", Rate: 50, Burst: 5, Concurrency: 4}

	var mu sync.Mutex
	var starts []time.Time
	var inFlight, maxInFlight atomic.Int64
	handler := ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(40 * time.Millisecond)
		return nil, nil
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var nodes []*ratelane.Client
	for range 2 {
		cfg := ratelane.Config{Regions: []ratelane.Region{region}, Limits: []ratelane.Limit{limit}, Workers: 8, Logger: quiet}
		cfg.Handle("call", handler)
		c, err := ratelane.NewClient(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, c)
	}
	var ps []ratelane.InsertParams
	for range 1000 {
		ps = append(ps, ratelane.InsertParams{Kind: "call", Region: "us", LimitKeys: []string{"api"}})
	}
	if _, err := nodes[0].InsertMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Second)
	for _, n := range nodes {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n.Stop(stopCtx)
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) == 0 {
		t.Fatal("no starts")
	}
	first := starts[0]
	within := 0
	for _, s := range starts {
		if s.Sub(first) <= 10*time.Second {
			within++
		}
	}
	const ceiling = 50*10 + 5
	if within > ceiling || float64(within) < 0.95*ceiling {
		t.Fatalf("%d starts in 10 s, want between 95%% of %d and %d", within, ceiling, ceiling)
	}
	if m := maxInFlight.Load(); m > 4 {
		t.Fatalf("%d jobs ran at once across the two nodes; the cap is 4", m)
	}
	t.Logf("%d starts in 10 s (ceiling %d); max in flight %d", within, ceiling, maxInFlight.Load())
}
