package bench

// The HTTP workloads measure the API as producers and external workers see
// it: a real ratelane API (ratelane.Client.NewAPI) served on a loopback
// listener, its store durable (SQLite synchronous=FULL by default), and
// concurrent keep-alive clients. The engine is not started: external
// workers do the running in http-workers.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
)

// benchAdminKey is the admin key of the HTTP workloads' API.
const benchAdminKey = "rl_bench001_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"

// HTTPPlan sizes the HTTP workloads.
type HTTPPlan struct {
	// Clients is the number of concurrent producers (http-enqueue).
	Clients int
	// Requests is how many single enqueues http-enqueue sends.
	Requests int
	// BatchClients and BatchSize shape http-batch: that many producers
	// sending BatchSize jobs per POST /v1/jobs/batch.
	BatchClients, BatchSize int
	// BatchJobs is how many jobs http-batch enqueues in all.
	BatchJobs int
	// Workers, LeaseMax and WorkerJobs shape http-workers: that many
	// external workers leasing up to LeaseMax jobs a call and reporting
	// each lease's successes in one POST /v1/leases/complete, over a
	// backlog of WorkerJobs jobs.
	Workers, LeaseMax, WorkerJobs int
	// Keys is the number of unpaced limit keys the jobs spread over.
	Keys int
}

// HTTP returns the HTTP workloads' plan; smoke shrinks it for CI.
func HTTP(smoke bool) HTTPPlan {
	p := HTTPPlan{Clients: 64, Requests: 20_000, BatchClients: 4, BatchSize: 1000, BatchJobs: 200_000,
		Workers: 8, LeaseMax: 100, WorkerJobs: 100_000, Keys: 16}
	if smoke {
		p.Requests, p.BatchJobs, p.WorkerJobs = 1000, 10_000, 5000
	}
	return p
}

// httpEnv is a running API on loopback and a client that calls it.
type httpEnv struct {
	url    string
	http   *http.Client
	client *ratelane.Client
}

func (e *env) api(ctx context.Context, conns int) (*httpEnv, func(), error) {
	c, err := e.client(ctx, ratelane.Config{})
	if err != nil {
		return nil, nil, err
	}
	// Per-key request limiting is off: every simulated client shares the
	// one admin key, and the API's own 100/s per key would be measured.
	api, err := c.NewAPI(ctx, ratelane.APIConfig{AdminKey: benchAdminKey, RequestRate: -1})
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		api.Close()
		return nil, nil, err
	}
	srv := &http.Server{Handler: api.Handler, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		api.Close()
		tr.CloseIdleConnections()
	}
	return &httpEnv{url: "http://" + ln.Addr().String(), http: &http.Client{Transport: tr, Timeout: 60 * time.Second}, client: c}, stop, nil
}

// post sends a JSON POST with the admin key and decodes a 2xx answer into
// out (when not nil).
func (h *httpEnv) post(ctx context.Context, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+benchAdminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// timings collects durations from many goroutines.
type timings struct {
	mu  sync.Mutex
	all []time.Duration
}

func (t *timings) add(d []time.Duration) {
	t.mu.Lock()
	t.all = append(t.all, d...)
	t.mu.Unlock()
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns
// the first error.
func parallel(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// httpWorkload adapts run, a workload over a running API, to a runner: it
// serves the API with keep-alive room for conns(plan) clients, runs run
// and stops the API.
func httpWorkload(conns func(HTTPPlan) int, run func(context.Context, HTTPPlan, *httpEnv) (Result, error)) func(context.Context, *env) (Result, error) {
	return func(ctx context.Context, e *env) (Result, error) {
		plan := HTTP(e.opts.Smoke)
		h, stop, err := e.api(ctx, conns(plan))
		if err != nil {
			return Result{}, err
		}
		defer stop()
		return run(ctx, plan, h)
	}
}

// timedParallel is parallel that also returns how long the whole run took.
func timedParallel(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) (time.Duration, error) {
	t0 := time.Now()
	err := parallel(ctx, workers, n, fn)
	return time.Since(t0), err
}

// latencyFigure names a quantile of a workload's call latencies.
type latencyFigure struct {
	name string
	q    float64
	lat  *timings
}

// rateResult ends an HTTP workload with timedParallel's answer: its error,
// or a Result of n over elapsed as the figure rate (in unit), then each
// latency figure in milliseconds.
func rateResult(elapsed time.Duration, err error, rate, unit string, n int, figs ...latencyFigure) (Result, error) {
	if err != nil {
		return Result{}, err
	}
	var r Result
	r.add(rate, float64(n)/elapsed.Seconds(), unit)
	for _, f := range figs {
		r.add(f.name, Percentile(f.lat.all, f.q), "ms")
	}
	return r, nil
}

// runHTTPEnqueue sends the plan's single-job POST /v1/jobs requests, each
// with its own Idempotency-Key in the body, from Clients keep-alive
// clients, and reports requests per second and the latency of a request.
func runHTTPEnqueue(ctx context.Context, plan HTTPPlan, h *httpEnv) (Result, error) {
	var lat timings
	elapsed, err := timedParallel(ctx, plan.Clients, plan.Requests, func(ctx context.Context, i int) error {
		body := fmt.Appendf(nil, `{"kind":"bench.enqueue","region":"us","lane":"batch","limit_keys":["bench:%d"],"payload":{"n":%d},"idempotency_key":"bench-%d"}`,
			i%plan.Keys, i, i)
		s := time.Now()
		err := h.post(ctx, "/v1/jobs", body, nil)
		lat.add([]time.Duration{time.Since(s)})
		return err
	})
	return rateResult(elapsed, err, "requests_per_second", "req/s", plan.Requests,
		latencyFigure{"p50_ms", 0.5, &lat}, latencyFigure{"p99_ms", 0.99, &lat})
}

// runHTTPBatch enqueues the plan's jobs with POST /v1/jobs/batch, BatchSize
// a request from BatchClients clients, each job with an idempotency key,
// and reports jobs per second and the latency of a batch request.
func runHTTPBatch(ctx context.Context, plan HTTPPlan, h *httpEnv) (Result, error) {
	batches := (plan.BatchJobs + plan.BatchSize - 1) / plan.BatchSize
	var lat timings
	elapsed, err := timedParallel(ctx, plan.BatchClients, batches, func(ctx context.Context, b int) error {
		var body bytes.Buffer
		body.WriteString(`{"jobs":[`)
		for k := b * plan.BatchSize; k < min(plan.BatchJobs, (b+1)*plan.BatchSize); k++ {
			if k > b*plan.BatchSize {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"kind":"bench.batch","region":"us","limit_keys":["bench:%d"],"payload":{"n":%d},"idempotency_key":"bench-%d"}`, k%plan.Keys, k, k)
		}
		body.WriteString(`]}`)
		var out struct {
			Created int `json:"created"`
			Failed  int `json:"failed"`
		}
		s := time.Now()
		if err := h.post(ctx, "/v1/jobs/batch", body.Bytes(), &out); err != nil {
			return err
		}
		lat.add([]time.Duration{time.Since(s)})
		if out.Failed > 0 {
			return fmt.Errorf("batch %d: %d items failed", b, out.Failed)
		}
		return nil
	})
	return rateResult(elapsed, err, "jobs_per_second", "jobs/s", plan.BatchJobs,
		latencyFigure{"batch_p50_ms", 0.5, &lat}, latencyFigure{"batch_p99_ms", 0.99, &lat})
}

// runHTTPWorkers inserts the plan's backlog with the library, then runs
// Workers external workers over HTTP: POST /v1/leases with max LeaseMax,
// then one POST /v1/leases/complete with every leased job's success. It
// reports jobs published per second and the latency of each call.
func runHTTPWorkers(ctx context.Context, plan HTTPPlan, h *httpEnv) (Result, error) {
	ps := make([]ratelane.InsertParams, plan.WorkerJobs)
	for i := range ps {
		ps[i] = ratelane.InsertParams{Kind: "bench.work", Region: "us", LimitKeys: []string{"bench:" + strconv.Itoa(i%plan.Keys)}}
	}
	if err := insert(ctx, h.client, ps); err != nil {
		return Result{}, err
	}
	var remaining atomic.Int64
	remaining.Store(int64(plan.WorkerJobs))
	var leaseLat, completeLat timings
	leaseBody := fmt.Appendf(nil, `{"region":"us","kinds":["bench.work"],"max":%d,"lease_seconds":60}`, plan.LeaseMax)
	elapsed, err := timedParallel(ctx, plan.Workers, plan.Workers, func(ctx context.Context, _ int) error {
		var ls, cs []time.Duration
		defer func() { leaseLat.add(ls); completeLat.add(cs) }()
		for remaining.Load() > 0 {
			var leased struct {
				Jobs []struct {
					ID         string `json:"id"`
					LeaseToken string `json:"lease_token"`
				} `json:"jobs"`
			}
			s := time.Now()
			if err := h.post(ctx, "/v1/leases", leaseBody, &leased); err != nil {
				return err
			}
			ls = append(ls, time.Since(s))
			if len(leased.Jobs) == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
				continue // the last jobs are in other workers' hands
			}
			var body bytes.Buffer
			body.WriteString(`{"region":"us","jobs":[`)
			for k, j := range leased.Jobs {
				if k > 0 {
					body.WriteByte(',')
				}
				fmt.Fprintf(&body, `{"id":%q,"lease_token":%q,"result":{"ok":true}}`, j.ID, j.LeaseToken)
			}
			body.WriteString(`]}`)
			var done struct {
				Completed int `json:"completed"`
				Failed    int `json:"failed"`
			}
			s = time.Now()
			if err := h.post(ctx, "/v1/leases/complete", body.Bytes(), &done); err != nil {
				return err
			}
			cs = append(cs, time.Since(s))
			if done.Failed > 0 {
				return errors.New("a batch complete refused some outcomes")
			}
			remaining.Add(-int64(done.Completed))
		}
		return nil
	})
	return rateResult(elapsed, err, "jobs_per_second", "jobs/s", plan.WorkerJobs,
		latencyFigure{"lease_p99_ms", 0.99, &leaseLat}, latencyFigure{"complete_p99_ms", 0.99, &completeLat})
}
