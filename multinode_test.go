package ratelane_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
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
// concurrency cap of 4, and an ample backlog. Both nodes start jobs; over
// every window of the claim log, the starts never exceed 50/s times the
// window plus the burst; the cap is never exceeded across the nodes.
//
// The log holds each job's claim time as the store recorded it (the
// admission instant), not the time the handler happened to run, so
// scheduling delay on a loaded machine can neither fail the test nor hide
// an excess. It checks the ceiling rather than a minimum throughput, which
// would measure the machine's speed (issue 11 item 6); the throughput
// reached is logged.
func TestTwoNodesShareOneKey(t *testing.T) {
	url := postgresURL(t)
	// Not parallel: it runs while the package's parallel tests are paused,
	// so the limiter, not the machine, is the binding constraint.
	schema := fmt.Sprintf("two_nodes_%d", time.Now().UnixNano())
	dropSchema(t, url, schema)
	ctx := context.Background()
	region := ratelane.Region{Name: "us", PostgresURL: url, PostgresSchema: schema}
	const rate, burst, concurrency = 50, 5, 4
	limit := ratelane.Limit{Name: "api", Rate: rate, Burst: burst, Concurrency: concurrency}
	// want starts make a log long enough that a limiter admitting more
	// than its rate would overrun the ceiling within it.
	const want = 300

	var mu sync.Mutex
	var claims []time.Time
	perNode := make([]int, 2)
	enough := make(chan struct{})
	var inFlight, maxInFlight atomic.Int64
	handlerFor := func(node int) ratelane.Handler {
		return ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, _ struct{}) (any, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := maxInFlight.Load()
				if n <= m || maxInFlight.CompareAndSwap(m, n) {
					break
				}
			}
			mu.Lock()
			// The claim wrote updated_at with the instant the limiter
			// admitted the job at.
			claims = append(claims, j.UpdatedAt)
			perNode[node]++
			if len(claims) == want {
				close(enough)
			}
			mu.Unlock()
			time.Sleep(40 * time.Millisecond)
			return nil, nil
		})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var nodes []*ratelane.Client
	for i := range 2 {
		cfg := ratelane.Config{Regions: []ratelane.Region{region}, Limits: []ratelane.Limit{limit}, Workers: 8, Logger: quiet}
		cfg.Handle("call", handlerFor(i))
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
	select {
	case <-enough:
	case <-time.After(2 * time.Minute):
		t.Errorf("fewer than %d starts in 2 minutes", want)
	}
	for _, n := range nodes {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n.Stop(stopCtx)
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(claims) < 2*burst {
		t.Fatalf("%d starts; too few to check the rate", len(claims))
	}
	if perNode[0] == 0 || perNode[1] == 0 {
		t.Fatalf("starts per node = %v; both nodes must share the key", perNode)
	}
	sort.Slice(claims, func(a, b int) bool { return claims[a].Before(claims[b]) })
	// Every window [claims[i], claims[k]] holds k-i+1 starts, and the
	// limiter admits at most rate*(its length)+burst: each admission moves
	// TAT to max(TAT, now)+1/rate and needs TAT <= now+(burst-1)/rate, so
	// the bound holds whatever order the two nodes' claims commit in.
	for i := range claims {
		for k := i + burst; k < len(claims); k++ {
			n := k - i + 1
			if ceiling := rate*claims[k].Sub(claims[i]).Seconds() + burst; float64(n) > ceiling+1e-9 { // float rounding only
				t.Fatalf("%d starts in the %v from claim %d to claim %d; at %d/s burst %d the ceiling is %.1f",
					n, claims[k].Sub(claims[i]), i, k, rate, burst, ceiling)
			}
		}
	}
	if m := maxInFlight.Load(); m > concurrency {
		t.Fatalf("%d jobs ran at once across the two nodes; the cap is %d", m, concurrency)
	}
	span := claims[len(claims)-1].Sub(claims[0])
	t.Logf("%d starts in %v (%.1f/s, limit %d/s burst %d), per node %v; max in flight %d",
		len(claims), span, float64(len(claims)-1)/span.Seconds(), rate, burst, perNode, maxInFlight.Load())
}
