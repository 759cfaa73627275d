// Command go-worker is an external ratelane worker (and, with -mode
// producer, a producer) that uses only the HTTP API, net/http and
// encoding/json: the same loop examples/node-worker runs, in Go.
//
// The worker leases jobs with a long poll (POST /v1/leases), POSTs each
// job's payload to UPSTREAM_URL and reports what the upstream said. It never
// sleeps on an upstream 429 itself: it hands the upstream's raw headers to
// POST /v1/jobs/{id}/rate-limited, and ratelane parses Retry-After (and
// x-ratelimit-*, RateLimit, ...), pauses the limit key for every worker and
// reschedules the job. With -batch-report (BATCH_REPORT=1) the outcomes of
// each lease go together in one POST /v1/leases/complete, and the producer
// always enqueues with POST /v1/jobs/batch, 1000 jobs a request.
//
//	RATELANE_API_KEY=rl_... UPSTREAM_URL=http://127.0.0.1:8090/hooks/demo go run ./examples/go-worker
//	RATELANE_API_KEY=rl_... go run ./examples/go-worker -mode producer -n 10
//
// Flags default to the environment variables the Node.js example reads
// (RATELANE_URL, RATELANE_API_KEY, RATELANE_REGION, KINDS, KIND, LIMIT_KEY,
// UPSTREAM_URL, CONCURRENCY, MAX_JOBS, LEASE_SECONDS, WAIT_SECONDS), so
// either example runs from the same shell. See examples/README.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ratelane accepts at most 64 upstream headers of up to 4 KiB each.
const (
	maxHeaders     = 64
	maxHeaderValue = 4 << 10
)

type config struct {
	mode, url, apiKey, region, upstream string
	kinds                               []string
	kind, limitKey                      string
	concurrency, maxJobs, n             int
	batchReport                         bool
	lease, wait, upstreamTimeout        time.Duration
}

func main() {
	cfg, err := parseConfig(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-worker:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	// SIGTERM stops leasing; jobs in hand are still run and reported.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c := &client{cfg: cfg, log: log, http: &http.Client{}}
	if cfg.mode == "producer" {
		err = c.produce(ctx)
	} else {
		err = c.work(ctx)
	}
	if err != nil {
		log.Error("go-worker failed", "err", err)
		os.Exit(1)
	}
}

func parseConfig(args []string) (config, error) {
	fs := flag.NewFlagSet("go-worker", flag.ContinueOnError)
	var c config
	var kinds string
	fs.StringVar(&c.mode, "mode", "worker", "worker (lease and run jobs) or producer (enqueue -n jobs, print their ids)")
	fs.StringVar(&c.url, "url", envOr("RATELANE_URL", "http://127.0.0.1:8080"), "ratelane base URL")
	fs.StringVar(&c.region, "region", envOr("RATELANE_REGION", "eu"), "region to lease from or enqueue in")
	fs.StringVar(&kinds, "kinds", envOr("KINDS", "order.process"), "worker: comma-separated job kinds to lease")
	fs.StringVar(&c.kind, "kind", envOr("KIND", "order.process"), "producer: job kind")
	fs.StringVar(&c.limitKey, "limit-key", envOr("LIMIT_KEY", "upstream:orders"), "producer: the limit key that paces the upstream")
	fs.StringVar(&c.upstream, "upstream", os.Getenv("UPSTREAM_URL"), "worker: URL each job's payload is POSTed to")
	fs.IntVar(&c.concurrency, "concurrency", envInt("CONCURRENCY", 4), "worker: jobs leased and run at once")
	fs.IntVar(&c.maxJobs, "max-jobs", envInt("MAX_JOBS", 0), "worker: exit after this many completed jobs; 0 runs until SIGTERM")
	fs.IntVar(&c.n, "n", 1, "producer: jobs to enqueue (POST /v1/jobs/batch, up to 1000 a request)")
	fs.BoolVar(&c.batchReport, "batch-report", os.Getenv("BATCH_REPORT") == "1", "worker: report each lease's outcomes together in one POST /v1/leases/complete (default $BATCH_REPORT=1)")
	fs.DurationVar(&c.lease, "lease", time.Duration(envInt("LEASE_SECONDS", 30))*time.Second, "worker: lease length (heartbeats extend it)")
	fs.DurationVar(&c.wait, "wait", time.Duration(envInt("WAIT_SECONDS", 5))*time.Second, "worker: long-poll length, also the longest SIGTERM waits for an idle worker")
	fs.DurationVar(&c.upstreamTimeout, "upstream-timeout", 2*time.Minute, "worker: timeout of one upstream call")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.apiKey = os.Getenv("RATELANE_API_KEY") // never a flag: flags show in ps
	c.url = strings.TrimRight(c.url, "/")
	for _, k := range strings.Split(kinds, ",") {
		if k = strings.TrimSpace(k); k != "" {
			c.kinds = append(c.kinds, k)
		}
	}
	switch {
	case c.apiKey == "":
		return c, errors.New("set RATELANE_API_KEY")
	case c.mode != "worker" && c.mode != "producer":
		return c, fmt.Errorf("-mode must be worker or producer, not %q", c.mode)
	case c.mode == "worker" && c.upstream == "":
		return c, errors.New("set UPSTREAM_URL (or -upstream)")
	case c.concurrency < 1 || c.maxJobs < 0 || c.n < 1:
		return c, errors.New("-concurrency and -n must be at least 1, -max-jobs at least 0")
	case c.lease < time.Second || c.wait < 0 || c.wait > 30*time.Second:
		return c, errors.New("-lease must be at least 1s and -wait from 0 to 30s")
	}
	return c, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

type client struct {
	cfg  config
	log  *slog.Logger
	http *http.Client
}

// apiError is a non-2xx answer of ratelane: its status and problem detail.
type apiError struct {
	Status     int
	Detail     string `json:"detail"`
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return fmt.Sprintf("ratelane %d: %s", e.Status, e.Detail) }

// call sends a JSON request to ratelane and decodes a 2xx answer into out.
func (c *client) call(ctx context.Context, method, path string, in, out any, hdr map[string]string) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.url+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.apiKey)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		e := &apiError{Status: resp.StatusCode}
		json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(e)
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return resp.Header, e
	}
	if out != nil {
		return resp.Header, json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.Header, nil
}

// maxBatch is the most jobs one POST /v1/jobs/batch (and outcomes one
// POST /v1/leases/complete) may hold.
const maxBatch = 1000

// produce enqueues -n jobs with POST /v1/jobs/batch and prints their ids,
// one a line, in order. Each has an idempotency key, so rerunning a batch
// after a timeout returns the same jobs (answered "replayed").
func (c *client) produce(ctx context.Context) error {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for start := 0; start < c.cfg.n; start += maxBatch {
		var jobs []map[string]any
		for i := start; i < min(start+maxBatch, c.cfg.n); i++ {
			key := fmt.Sprintf("go-producer-%s-%d", run, i)
			jobs = append(jobs, map[string]any{
				"kind": c.cfg.kind, "region": c.cfg.region, "lane": "batch", "idempotency_key": key,
				"limit_keys": []string{c.cfg.limitKey}, "payload": map[string]any{"order_id": key},
			})
		}
		ids, err := c.enqueueBatch(ctx, jobs)
		if err != nil {
			return err
		}
		for _, id := range ids {
			fmt.Println(id)
		}
	}
	return nil
}

// batchItem is one item's answer of a batch route.
type batchItem struct {
	Index  int       `json:"index"`
	Status int       `json:"status"`
	ID     string    `json:"id"`
	State  string    `json:"state"`
	Error  *apiError `json:"error"`
}

// enqueueBatch sends up to 1000 jobs in one POST /v1/jobs/batch (one
// transaction: a 5xx means none was written, so the whole batch may be
// sent again) and returns their ids in order. A refused item is an error
// naming its index; the accepted ones are written all the same.
func (c *client) enqueueBatch(ctx context.Context, jobs []map[string]any) ([]string, error) {
	var out struct {
		Results []batchItem `json:"results"`
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/v1/jobs/batch", map[string]any{"jobs": jobs}, &out, nil); err != nil {
		return nil, err
	}
	if len(out.Results) != len(jobs) {
		return nil, fmt.Errorf("POST /v1/jobs/batch answered %d results for %d jobs", len(out.Results), len(jobs))
	}
	ids := make([]string, len(jobs))
	for i, r := range out.Results {
		if r.Error != nil {
			return nil, fmt.Errorf("job %d refused (%d): %s", i, r.Status, r.Error.Detail)
		}
		ids[i] = r.ID
	}
	return ids, nil
}

// leasedJob is the part of a leased job the worker uses.
type leasedJob struct {
	ID         string          `json:"id"`
	Region     string          `json:"region"`
	Payload    json.RawMessage `json:"payload"`
	LeaseToken string          `json:"lease_token"`
}

// work leases and runs jobs until ctx ends or -max-jobs jobs completed.
func (c *client) work(ctx context.Context) error {
	c.log.Info("worker started", "ratelane", c.cfg.url, "region", c.cfg.region, "kinds", c.cfg.kinds,
		"concurrency", c.cfg.concurrency, "max_jobs", c.cfg.maxJobs)
	completed := 0
	for ctx.Err() == nil && (c.cfg.maxJobs == 0 || completed < c.cfg.maxJobs) {
		want := c.cfg.concurrency
		if c.cfg.maxJobs > 0 {
			want = min(want, c.cfg.maxJobs-completed)
		}
		jobs, err := c.lease(ctx, want)
		if err != nil {
			c.log.Warn("lease failed", "err", err)
			delay := time.Second
			if e := (*apiError)(nil); errors.As(err, &e) && e.RetryAfter > 0 {
				delay = e.RetryAfter // ratelane rate-limits each key's own requests too
			}
			sleep(ctx, delay)
			continue
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var outcomes []map[string]any // with -batch-report
		for _, j := range jobs {
			wg.Go(func() {
				outcome, body := c.run(j)
				if c.cfg.batchReport {
					body["id"], body["lease_token"], body["outcome"] = j.ID, j.LeaseToken, outcome
					mu.Lock()
					outcomes = append(outcomes, body)
					mu.Unlock()
					return
				}
				if c.report(j, outcome, body) && outcome == "success" {
					mu.Lock()
					completed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(outcomes) > 0 {
			completed += c.reportBatch(outcomes)
		}
	}
	c.log.Info("worker stopped", "completed", completed)
	return nil
}

// lease long-polls for up to n admitted jobs. SIGTERM does not cancel an
// open poll: a lease the server granted just as the client hung up would
// sit unseen until it expired. The poll ends by itself within -wait.
func (c *client) lease(ctx context.Context, n int) ([]leasedJob, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.wait+15*time.Second)
	defer cancel()
	var out struct {
		Jobs []leasedJob `json:"jobs"`
	}
	_, err := c.call(ctx, http.MethodPost, "/v1/leases", map[string]any{
		"region": c.cfg.region, "kinds": c.cfg.kinds, "max": n,
		"lease_seconds": int(c.cfg.lease / time.Second), "wait_seconds": int(c.cfg.wait / time.Second),
	}, &out, nil)
	return out.Jobs, err
}

// run calls the upstream for one job, heartbeating while the call lasts,
// and returns the outcome to report: success, fail or rate_limited, and
// the fields of its body (those of /complete, /fail or /rate-limited).
// Jobs in hand run to the end even after SIGTERM, so their contexts are
// not the signal's.
func (c *client) run(j leasedJob) (string, map[string]any) {
	beatCtx, stopBeats := context.WithCancel(context.Background())
	go c.heartbeat(beatCtx, j)
	resp, err := c.callUpstream(j)
	stopBeats()
	if err != nil {
		// Timeouts and connection errors are transient: ratelane retries
		// them with backoff from the job's transient budget.
		return "fail", map[string]any{"retryable": true, "error": "upstream: " + errorKind(err)}
	}
	switch s := resp.StatusCode; {
	case s/100 == 2:
		// Remaining-quota headers on a success let ratelane slow the key
		// before the upstream has to say 429.
		return "success", map[string]any{"result": map[string]int{"upstream_status": s}, "headers": rawHeaders(resp.Header)}
	case s == http.StatusTooManyRequests:
		return "rate_limited", map[string]any{"headers": rawHeaders(resp.Header), "status": s}
	case s >= 500 || s == http.StatusRequestTimeout:
		return "fail", map[string]any{"retryable": true, "status": s, "error": "upstream " + strconv.Itoa(s)}
	default: // other 4xx answers will not change on a retry
		return "fail", map[string]any{"retryable": false, "status": s, "error": "upstream " + strconv.Itoa(s)}
	}
}

func (c *client) callUpstream(j leasedJob) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.upstreamTimeout)
	defer cancel()
	payload := j.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.upstream, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	// ratelane delivers at least once (a lost lease reruns the job), so
	// the job id is the natural idempotency key upstream.
	req.Header.Set("Idempotency-Key", j.ID)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	// Drain so the connection is reused; the headers are all ratelane needs.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp, nil
}

// heartbeat extends the lease every third of its length until ctx ends, so
// a slow upstream call does not lose the job to another worker.
func (c *client) heartbeat(ctx context.Context, j leasedJob) {
	t := time.NewTicker(max(c.cfg.lease/3, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.call(hctx, http.MethodPost, jobPath(j, "heartbeat"),
			map[string]any{"lease_token": j.LeaseToken, "lease_seconds": int(c.cfg.lease / time.Second)}, nil, nil)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Warn("heartbeat failed", "job", j.ID, "err", err)
		}
	}
}

// report sends an outcome and says whether ratelane took it. A 409 means
// the lease was lost (it expired and the job went to another worker): the
// worker can only log it. Network errors and 5xx are retried briefly while
// the lease may still hold; after that the job is leased again anyway.
func (c *client) report(j leasedJob, outcome string, body map[string]any) bool {
	body["lease_token"] = j.LeaseToken
	route := map[string]string{"success": "complete", "fail": "fail", "rate_limited": "rate-limited"}[outcome]
	for attempt := 1; ; attempt++ {
		var out struct {
			State      string `json:"state"`
			EligibleAt string `json:"eligible_at"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := c.call(ctx, http.MethodPost, jobPath(j, route), body, &out, nil)
		cancel()
		if err == nil {
			c.log.Info("reported", "job", j.ID, "outcome", outcome, "state", out.State, "eligible_at", out.EligibleAt)
			return true
		}
		c.log.Warn("report failed", "job", j.ID, "outcome", outcome, "err", err)
		if e := (*apiError)(nil); errors.As(err, &e) && e.Status < 500 && e.Status != http.StatusTooManyRequests {
			return false
		}
		if attempt == 5 {
			return false
		}
		time.Sleep(time.Duration(attempt) * 500 * time.Millisecond)
	}
}

// reportBatch sends one lease's outcomes (each with its id, lease_token
// and outcome) in one POST /v1/leases/complete and returns how many
// successes ratelane recorded. Each item is answered on its own: a 409 is
// a lost lease, logged like a single report's. A 5xx or a network error
// means nothing was written (one guarded write), so the whole batch is
// sent again, briefly, as report does; an item recorded by a send whose
// answer was lost comes back 409 then.
func (c *client) reportBatch(items []map[string]any) int {
	body := map[string]any{"region": c.cfg.region, "jobs": items}
	for attempt := 1; ; attempt++ {
		var out struct {
			Results []batchItem `json:"results"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := c.call(ctx, http.MethodPost, "/v1/leases/complete", body, &out, nil)
		cancel()
		if err == nil {
			done := 0
			for _, r := range out.Results {
				outcome := items[r.Index]["outcome"]
				if r.Error != nil {
					c.log.Warn("report failed", "job", r.ID, "outcome", outcome, "err", r.Error)
					continue
				}
				c.log.Info("reported", "job", r.ID, "outcome", outcome, "state", r.State)
				if outcome == "success" {
					done++
				}
			}
			return done
		}
		c.log.Warn("batch report failed", "jobs", len(items), "err", err)
		if e := (*apiError)(nil); errors.As(err, &e) && e.Status < 500 && e.Status != http.StatusTooManyRequests {
			return 0
		}
		if attempt == 5 {
			return 0
		}
		time.Sleep(time.Duration(attempt) * 500 * time.Millisecond)
	}
}

func jobPath(j leasedJob, action string) string {
	return "/v1/jobs/" + url.PathEscape(j.ID) + "/" + action + "?region=" + url.QueryEscape(j.Region)
}

// limitHeader matches the headers ratelane parses.
var limitHeader = regexp.MustCompile(`(?i)retry-after|ratelimit`)

// rawHeaders turns the upstream's headers into the map ratelane parses,
// within its limits; rate-limit headers go first so that they survive when
// an upstream sends more than ratelane accepts.
func rawHeaders(h http.Header) map[string]string {
	out := make(map[string]string, min(len(h), maxHeaders))
	for _, limits := range []bool{true, false} {
		for k, vs := range h {
			v := strings.Join(vs, ", ")
			if limitHeader.MatchString(k) == limits && len(v) <= maxHeaderValue && len(out) < maxHeaders {
				out[k] = v
			}
		}
	}
	return out
}

// errorKind names an upstream error without its text, which may carry the
// URL: "timeout" or "connection".
func errorKind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "connection"
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
