package ratelane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/webhooks"
)

// hookCrashChildEnv makes the test binary act as a delivering process.
const hookCrashChildEnv = "RATELANE_HOOK_CRASH_CHILD_DIR"

// TestWebhookCrashChild is the delivering process of
// TestWebhookKill9Recovery; it does nothing unless started by it.
func TestWebhookCrashChild(t *testing.T) {
	dir := childDir(t, hookCrashChildEnv, "TestWebhookKill9Recovery")
	// LeaseFor 10 s, not 2: under `make test`'s parallel -race load a
	// live child's finish could land more than 2 s after its lease, and
	// the reaper then recovered a job that was not held at the kill (the
	// check below counts that as a wrong recovery; seen on dea7d91 too,
	// 4 of 4 runs with four copies of this test at once).
	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Workers: 32, LeaseFor: 10 * time.Second,
		Logger:  quiet(),
		Plugins: []ratelane.Plugin{webhooks.New(webhooks.Config{Deliver: true, AllowPrivateTargets: true})}}
	startClient(t, cfg)
	select {} // until killed
}

// webhookIDs counts receptions by webhook-id; safe for concurrent use. The
// zero value is ready.
type webhookIDs struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *webhookIDs) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[id]++
}

// total is the number of receptions.
func (c *webhookIDs) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.counts {
		n += k
	}
	return n
}

// stats returns how many distinct ids were received and the most
// receptions of any one.
func (c *webhookIDs) stats() (distinct, most int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.counts {
		most = max(most, n)
	}
	return len(c.counts), most
}

// idCounter is a reverse proxy in front of the simulator that counts the
// accepted answers per webhook-id, so the test sees the most any one id
// was received.
type idCounter struct{ webhookIDs }

func (c *idCounter) proxy(target string) http.Handler {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			c.add(resp.Request.Header.Get("webhook-id"))
		}
		return nil
	}
	return rp
}

// TestWebhookKill9Recovery kills the delivering process with SIGKILL in
// the middle of a fan-out of 5,000 deliveries (50 events x 100
// subscribers), restarts it, and checks that every delivery reached its
// subscriber, each job recorded published once, and the receiver saw no
// webhook-id more than twice (a delivery in flight at the kill may be
// sent again; the receiver deduplicates on webhook-id).
func TestWebhookKill9Recovery(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	t.Parallel()
	const events, subscribers = 50, 100
	const total = events * subscribers
	sim, err := upstream.New(upstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	counter := &idCounter{}
	front := httptest.NewServer(counter.proxy(sim.URL()))
	defer front.Close()

	dir := t.TempDir()
	hooks := webhooks.New(webhooks.Config{})
	producer, err := ratelane.NewClient(context.Background(), ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}},
		Plugins: []ratelane.Plugin{hooks}})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for i := range subscribers {
		id := fmt.Sprintf("s%03d", i)
		if err := sim.AddRoute(id, upstream.RouteConfig{Latency: upstream.Latency{Fixed: time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		// Paced so the fan-out takes a few seconds and the kill lands mid-way.
		spec := webhooks.SubscriberSpec{ID: id, URL: front.URL + "/hooks/" + id, Topics: []string{"shipment.updated"},
			Rate: &webhooks.SubscriberRate{Limit: 10, Burst: 2}}
		if _, _, _, err := hooks.PutSubscriber(context.Background(), "us", spec); err != nil {
			t.Fatal(err)
		}
	}
	for i := range events {
		ev := webhooks.Event{Topic: "shipment.updated", ID: fmt.Sprintf("shp_%03d", i), Version: 1, Payload: []byte(`{"n":1}`)}
		if res, err := hooks.Publish(context.Background(), "us", ev); err != nil || res.Created != subscribers {
			t.Fatalf("publish: %+v, %v", res, err)
		}
	}

	child := startChild(t, "TestWebhookCrashChild", hookCrashChildEnv, dir)
	waitDistinct(t, counter, 500, time.Minute)
	waitRunning(t, producer, 10*time.Second) // so the kill lands on leases held
	held := kill9(t, producer, child)
	if n, _ := counter.stats(); n > total-1000 {
		t.Fatalf("only %d deliveries were left at the kill; the test needs over 1,000", total-n)
	}
	startChild(t, "TestWebhookCrashChild", hookCrashChildEnv, dir) // killed by its cleanup
	waitPublished(t, producer, total, 5*time.Minute)
	t.Logf("leases held at the kill and recovered once each: %d", checkPublishedOnce(t, producer, total, held))
	distinct, most := counter.stats()
	t.Logf("receiver: %d distinct webhook-ids, at most %d receptions of one", distinct, most)
	if distinct != total || most > 2 {
		t.Fatalf("receiver saw %d distinct webhook-ids of %d, one of them %d times", distinct, total, most)
	}
	if n := countState(t, producer, job.StateTerminal); n != 0 {
		t.Fatalf("%d deliveries ended terminal", n)
	}
}

// waitRunning waits until the store shows a job running (a lease held).
func waitRunning(t *testing.T, c *ratelane.Client, timeout time.Duration) {
	t.Helper()
	testkit.WaitFor(t, timeout, "a job to run", func() bool { return countState(t, c, job.StateRunning) > 0 })
}

func waitDistinct(t *testing.T, c *idCounter, want int, timeout time.Duration) {
	t.Helper()
	testkit.Eventually(t, timeout, fmt.Sprintf("%d distinct deliveries", want), func() error {
		if n, _ := c.stats(); n < want {
			return fmt.Errorf("%d received", n)
		}
		return nil
	})
}
