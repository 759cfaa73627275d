package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
)

// benchAdminKey is the admin key of the benchmark servers.
const benchAdminKey = "rl_bench001_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"

// benchAPI is the real HTTP API over a real SQLite store (synchronous=FULL:
// a 201 means the job is fsynced), served on loopback by httptest. The
// engine is not started: these benchmarks measure the API and the store,
// and external workers do the running.
type benchAPI struct {
	url    string
	client *ratelane.Client
	http   *http.Client
}

func newBenchAPI(b *testing.B, clients int, synchronous string) *benchAPI {
	b.Helper()
	c, url := serveAPI(b, ratelane.Config{DataDir: b.TempDir(), Regions: []ratelane.Region{{Name: "eu", Synchronous: synchronous}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, benchAdminKey, false)
	// One kept-alive connection per client, as real producers pool them.
	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}
	b.Cleanup(tr.CloseIdleConnections)
	return &benchAPI{url: url, client: c, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// post sends a JSON POST with the admin key and decodes a 2xx answer.
func (a *benchAPI) post(path string, body []byte, hdr map[string]string, out any) (int, error) {
	req, err := http.NewRequest(http.MethodPost, a.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+benchAdminKey)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

// latencies collects per-request durations from many goroutines.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

// report adds throughput and latency percentiles to the benchmark's line.
func (l *latencies) report(b *testing.B, n int, elapsed time.Duration, unit string) {
	b.ReportMetric(float64(n)/elapsed.Seconds(), unit)
	if len(l.all) == 0 {
		return
	}
	slices.Sort(l.all)
	pct := func(p float64) float64 {
		i := min(len(l.all)-1, int(math.Ceil(p*float64(len(l.all))))-1)
		return float64(l.all[max(i, 0)]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// clientLoop runs op b.N times (n = 0, 1, …) from clients concurrent
// goroutines and reports perOp × b.N per second in unit, with the p50 and
// p99 of the durations op returns (each op times only its request, not the
// building of its body). An op's error fails the benchmark and stops that
// client.
func clientLoop(b *testing.B, clients, perOp int, unit string, op func(n int64) (time.Duration, error)) {
	b.Helper()
	var seq atomic.Int64
	var lat latencies
	// RunParallel starts parallelism * GOMAXPROCS goroutines.
	b.SetParallelism(max(1, (clients+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		defer func() { lat.add(mine) }()
		for pb.Next() {
			d, err := op(seq.Add(1) - 1)
			mine = append(mine, d)
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	lat.report(b, b.N*perOp, elapsed, unit)
}

// BenchmarkHTTPEnqueue measures POST /v1/jobs with durable acknowledgement
// (SQLite, synchronous=FULL) from many concurrent keep-alive clients on
// loopback, each request with its own Idempotency-Key as the examples send.
// Targets (issue 3): >= 5,000 req/s, p99 <= 50 ms. Two extra rows say where
// the time goes: synchronous=NORMAL (no fsync per commit; not durable on
// power loss) and requests without an Idempotency-Key.
//
//	go test -run '^$' -bench HTTPEnqueue -benchtime 3s ./cmd/ratelane
func BenchmarkHTTPEnqueue(b *testing.B) {
	for _, c := range []struct {
		clients int
		sync    string
		idem    bool
	}{{16, "FULL", true}, {64, "FULL", true}, {16, "NORMAL", true}, {16, "FULL", false}} {
		name := fmt.Sprintf("clients=%d/sync=%s/idempotency=%v", c.clients, c.sync, c.idem)
		clients := c.clients
		b.Run(name, func(b *testing.B) {
			api := newBenchAPI(b, clients, c.sync)
			clientLoop(b, clients, 1, "req/s", func(n int64) (time.Duration, error) {
				i := n + 1
				body := fmt.Appendf(nil, `{"kind":"bench.enqueue","region":"eu","lane":"batch","limit_keys":["bench:%d"],"payload":{"n":%d}}`, i%16, i)
				t0 := time.Now()
				var hdr map[string]string
				if c.idem {
					hdr = map[string]string{"Idempotency-Key": "bench-" + strconv.FormatInt(i, 10)}
				}
				status, err := api.post("/v1/jobs", body, hdr, nil)
				took := time.Since(t0)
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("enqueue: status %d", status)
				}
				return took, err
			})
		})
	}
}

// BenchmarkHTTPLeaseComplete measures an external worker's round trip —
// POST /v1/leases, then POST /v1/jobs/{id}/complete for each leased job —
// with concurrent workers over a backlog of b.N ready jobs on 16 keys that
// pace nothing. One op is one job leased and completed (published);
// p50-ms and p99-ms are the latency of a complete call, lease-p99-ms of a
// lease call, and empty-polls counts leases that found nothing (the last
// jobs were in other workers' hands).
//
//	go test -run '^$' -bench HTTPLeaseComplete -benchtime 3s ./cmd/ratelane
func BenchmarkHTTPLeaseComplete(b *testing.B) {
	for _, c := range []struct{ workers, max int }{{16, 1}, {16, 10}} {
		b.Run(fmt.Sprintf("workers=%d/max=%d", c.workers, c.max), func(b *testing.B) {
			benchLeaseComplete(b, c.workers, c.max)
		})
	}
}

func benchLeaseComplete(b *testing.B, workers, maxLease int) {
	api := newBenchAPI(b, workers, "FULL")
	ctx := context.Background()
	for i := 0; i < b.N; i += 1000 {
		var ps []ratelane.InsertParams
		for k := i; k < min(b.N, i+1000); k++ {
			ps = append(ps, ratelane.InsertParams{Kind: "bench.work", Region: "eu", LimitKeys: []string{"bench:" + strconv.Itoa(k%16)}})
		}
		if _, err := api.client.InsertMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	var remaining atomic.Int64
	remaining.Store(int64(b.N))
	var leaseLat, completeLat latencies
	var emptyPolls atomic.Int64
	leaseBody := fmt.Appendf(nil, `{"region":"eu","kinds":["bench.work"],"max":%d,"lease_seconds":60}`, maxLease)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			var ls, cs []time.Duration
			defer func() { leaseLat.add(ls); completeLat.add(cs) }()
			for remaining.Load() > 0 {
				var out struct {
					Jobs []struct {
						ID         string `json:"id"`
						LeaseToken string `json:"lease_token"`
					} `json:"jobs"`
				}
				t0 := time.Now()
				if _, err := api.post("/v1/leases", leaseBody, nil, &out); err != nil {
					b.Error(err)
					return
				}
				ls = append(ls, time.Since(t0))
				if len(out.Jobs) == 0 {
					emptyPolls.Add(1) // the last jobs are in other workers' hands
					continue
				}
				for _, j := range out.Jobs {
					t0 := time.Now()
					body := fmt.Appendf(nil, `{"lease_token":%q,"result":{"ok":true}}`, j.LeaseToken)
					if _, err := api.post("/v1/jobs/"+j.ID+"/complete?region=eu", body, nil, nil); err != nil {
						b.Error(err)
						return
					}
					cs = append(cs, time.Since(t0))
					remaining.Add(-1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	completeLat.report(b, b.N, elapsed, "jobs/s")
	if len(leaseLat.all) > 0 {
		slices.Sort(leaseLat.all)
		b.ReportMetric(float64(leaseLat.all[len(leaseLat.all)*99/100])/float64(time.Millisecond), "lease-p99-ms")
	}
	b.ReportMetric(float64(emptyPolls.Load()), "empty-polls")
}
