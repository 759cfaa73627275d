package realtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/webhook"
	"github.com/ratelane/ratelane/webhooks"
)

// TestWebhookPacing is the acceptance test: a subscriber allowing
// 20/s with a burst of 5 (429 + Retry-After beyond) receives 2,000
// deliveries with at most 2% of attempts answered 429, at 90% or more of
// its allowance (80% under the race detector, see below), with no
// duplicate webhook-id, while a 200/s subscriber beside it is not slowed.
func TestWebhookPacing(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 100 s: 2,000 deliveries at 20/s")
	}
	// Not parallel: it measures rates, so it runs alone.
	ctx := context.Background()
	sim, err := upstream.New(upstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	hooks := webhooks.New(webhooks.Config{Deliver: true, AllowPrivateTargets: true})
	c, err := ratelane.NewClient(ctx, ratelane.Config{
		DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us", Synchronous: "NORMAL"}}, Workers: 32,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Plugins: []ratelane.Plugin{hooks},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	// Each subscriber declares the allowance its simulated receiver enforces.
	for id, rate := range map[string]webhooks.SubscriberRate{"slow": {Limit: 20, Burst: 5}, "fast": {Limit: 200, Burst: 20}} {
		secret := webhook.NewSecret()
		if err := sim.AddRoute(id, upstream.RouteConfig{Secrets: []string{secret}, Rate: float64(rate.Limit), Burst: rate.Burst}); err != nil {
			t.Fatal(err)
		}
		spec := webhooks.SubscriberSpec{ID: id, URL: sim.RouteURL(id), Topics: []string{"shipment.updated"}, Secret: secret, Rate: &rate}
		if _, _, _, err := hooks.PutSubscriber(ctx, "us", spec); err != nil {
			t.Fatal(err)
		}
	}
	const n = 2000
	// Published before the engine starts: the test is about pacing, not
	// about how fast it can publish (under -race, slower than 200/s).
	for i := range n {
		id := fmt.Sprintf("shp_%05d", i)
		if _, err := hooks.Publish(ctx, "us", webhooks.Event{
			Topic: "shipment.updated", ID: id, Version: 1, Payload: json.RawMessage(`{"shipment":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	accepted := func(route string, timeout time.Duration) upstream.RouteReport {
		t.Helper()
		testkit.Eventually(t, timeout, route+" to accept every delivery", func() error {
			if got := sim.Stats().Routes[route].UniqueIDs; got < n {
				return fmt.Errorf("%d of %d accepted", got, n)
			}
			return nil
		})
		return sim.Stats().Routes[route]
	}
	// Deadlines, not measurements (the rates are checked below): under
	// -race at load 32 the fast route had 1,380 of 2,000 after 60 s.
	fast := accepted("fast", 200*time.Second)
	slow := accepted("slow", 200*time.Second)
	for name, rt := range map[string]upstream.RouteReport{"slow": slow, "fast": fast} {
		allowance := rt.Config.Rate
		share := float64(rt.RateLimited) / float64(rt.Attempts)
		t.Logf("%s: %d accepted at %.1f/s of %.0f/s, %d of %d attempts answered 429 (%.2f%%), %d duplicates",
			name, rt.Accepted, rt.AchievedRate, allowance, rt.RateLimited, rt.Attempts, 100*share, rt.Duplicates)
		if rt.Duplicates != 0 || rt.UniqueIDs != n {
			t.Errorf("%s: %d duplicates, %d distinct of %d", name, rt.Duplicates, rt.UniqueIDs, n)
		}
		if share > 0.02 {
			t.Errorf("%s: %.2f%% of attempts answered 429, want at most 2%%", name, 100*share)
		}
		if raceEnabled && name == "fast" {
			continue // the race detector, not the pacing, limits 200/s on a small machine
		}
		// The ceiling is the allowance itself (20.05/s counting the first
		// burst of 5). A bucket of burst 5 at 20/s holds 250 ms of starts:
		// a lease loop stalled longer than that loses the tokens it did not
		// take, which is the machine, not the pacing. Without the race
		// detector the floor is 90%; with it every delivery costs several
		// times the CPU and CI saw 16.8/s (84%) at load 20, so the floor is
		// 80%, still well above what a pacing bug (a pause that outlasts
		// its Retry-After, a bucket read at half rate) delivers.
		floor := 0.9
		if raceEnabled {
			floor = 0.8
		}
		if rt.AchievedRate < floor*allowance {
			t.Errorf("%s: achieved %.1f/s, want at least %.0f%% of %.0f/s", name, rt.AchievedRate, 100*floor, allowance)
		}
	}
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
	// Not parallel: it runs alone, so the limiter, not the machine, is
	// the binding constraint.
	url, schema := testkit.PostgresSchema(t, "rl_two_nodes_")
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
