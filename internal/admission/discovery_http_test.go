package admission_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
)

// TestConcurrencyDiscoveryOverHTTP drives an adaptive key told 20/s
// against the upstream simulator over HTTP: a route that takes 20 in any
// second but one request at a time, answering 429 with no Retry-After.
// Eight workers lease from the key as the engine does (check and take
// under the key's lock, release before applying the outcome). The key
// must learn a cap of one (two while probing) and keep its rate; the
// refusals must be a few, not one per overlap.
//
// It runs in a testing/synctest bubble, the HTTP over testkit.Pipes: the
// workers' clock, their waits for the next token, the simulator's
// latency and its sliding window all run on the bubble's fake clock,
// which moves only when every goroutine waits. A loaded machine slows
// the run but cannot change what it sees (session 9 had it on the real
// clock in internal/realtime, where at load ~70 under -race it accepted
// 26 of 50 in its 20 s). The 20 s context is a hang guard in fake time.
func TestConcurrencyDiscoveryOverHTTP(t *testing.T) {
	t.Parallel()
	synctest.Test(t, discoverOverHTTP)
}

func discoverOverHTTP(t *testing.T) {
	pipes := testkit.NewPipes()
	client, transport := pipes.Client()
	sim, err := upstream.New(upstream.Config{Listener: pipes, Routes: map[string]upstream.RouteConfig{"c": {
		Algorithm: upstream.AlgorithmSlidingWindow, Window: time.Second, Limit: 20, MaxConcurrent: 1,
		OverLimit: upstream.OverLimit429None, Latency: upstream.Latency{Fixed: 20 * time.Millisecond, Jitter: 30 * time.Millisecond}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		transport.CloseIdleConnections()
		sim.Close()
	}()
	c := admission.Upstream("c", 20, 20, admission.DefaultHeadroom)
	c.Adaptive = true
	var (
		mu  sync.Mutex
		key = admission.NewState(c)
	)
	const want = 50
	var accepted, attempts, refused atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil && accepted.Load() < want {
				mu.Lock()
				now := time.Now()
				ok, next := key.Check(now, 1)
				if ok {
					key.Take(now, 1)
				}
				mu.Unlock()
				if !ok {
					time.Sleep(min(time.Until(next), 20*time.Millisecond))
					continue
				}
				attempts.Add(1)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sim.RouteURL("c"), strings.NewReader("{}"))
				resp, err := client.Do(req)
				mu.Lock()
				now = time.Now()
				key.End(now, 1)
				switch {
				case err != nil:
				case resp.StatusCode == http.StatusOK:
					accepted.Add(1)
					key.Succeeded(now)
				case resp.StatusCode == http.StatusTooManyRequests:
					refused.Add(1)
					key.Throttled(now, now.Add(time.Second), 1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
				mu.Unlock()
				if resp != nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("accepted %d, attempts %d, refused %d, cap %d, rate %v, fake elapsed %v", accepted.Load(), attempts.Load(), refused.Load(), key.InFlightCap(), key.LearnedRate, time.Since(start))
	if accepted.Load() < want {
		t.Fatalf("%d accepted before the deadline, want %d (cap %d, rate %v)", accepted.Load(), want, key.InFlightCap(), key.LearnedRate)
	}
	if cp := key.InFlightCap(); cp < 1 || cp > 2 {
		t.Fatalf("cap in force %d against one at a time, want 1 (2 while probing)", cp)
	}
	if key.LearnedRate < 18 {
		t.Fatalf("learned rate %v: overlaps were read as a rate limit", key.LearnedRate)
	}
	// Each refusal is an overlap before the cap was learned (one per
	// worker at most) or a probe's: a handful.
	if r := refused.Load(); r > 10 {
		t.Fatalf("%d of %d attempts refused, want a handful", r, attempts.Load())
	}
	if st := sim.Stats().Routes["c"]; st.Accepted != accepted.Load() {
		t.Fatalf("simulator counted %d accepted, the workers %d", st.Accepted, accepted.Load())
	}
}
