package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelane/ratelane/internal/bench"
	"github.com/ratelane/ratelane/internal/upstream"
)

// BullMQ runs in Node.js: bullmq/bench.mjs reads a spec on stdin and writes
// its result on stdout (PROTOCOL.md). This side owns the simulator and the
// scoring, exactly as for the Go peers.

// bullmqSpec is the spec of PROTOCOL.md; fields a workload does not use
// are omitted.
type bullmqSpec struct {
	Workload  string `json:"workload"`
	RedisURL  string `json:"redis_url"`
	Prefix    string `json:"prefix"`
	Workers   int    `json:"workers"`
	TimeoutMs int64  `json:"timeout_ms"`

	Jobs      int   `json:"jobs,omitempty"`
	LatencyMs int64 `json:"latency_ms,omitempty"`

	Destinations []bullmqDestination `json:"destinations,omitempty"`
	// ScheduleURL (upstreams) is POSTed right before the workers start,
	// so the simulator's limit changes run from the peer's start.
	ScheduleURL string `json:"schedule_url,omitempty"`

	URL             string `json:"url,omitempty"`
	Rate            int    `json:"rate,omitempty"`
	Burst           int    `json:"burst,omitempty"`
	BatchJobs       int    `json:"batch_jobs,omitempty"`
	InteractiveRate int    `json:"interactive_rate,omitempty"`
	WindowMs        int64  `json:"window_ms,omitempty"`
}

type bullmqDestination struct {
	Name  string `json:"name"`
	URL   string `json:"url"`
	Rate  int    `json:"rate"`
	Burst int    `json:"burst"`
	Jobs  int    `json:"jobs"`
}

// bullmqResult is every workload's result fields (PROTOCOL.md).
type bullmqResult struct {
	InsertJobsPerSecond  float64 `json:"insert_jobs_per_second"`
	JobsPerSecond        float64 `json:"jobs_per_second"`
	OfferedJobsPerSecond float64 `json:"offered_jobs_per_second"`
	EnqueueToStartP50Ms  float64 `json:"enqueue_to_start_p50_ms"`
	EnqueueToStartP99Ms  float64 `json:"enqueue_to_start_p99_ms"`

	StartUnixMs int64 `json:"start_unix_ms"`
	EndUnixMs   int64 `json:"end_unix_ms"`
	Successes   int   `json:"successes"`

	InteractiveJobs        int     `json:"interactive_jobs"`
	InteractiveP50Ms       float64 `json:"interactive_p50_ms"`
	InteractiveP99Ms       float64 `json:"interactive_p99_ms"`
	InteractiveMaxMs       float64 `json:"interactive_max_ms"`
	BatchSuccessesInWindow int64   `json:"batch_successes_in_window"`
	WindowSeconds          float64 `json:"window_seconds"`
}

// checkBullMQ reports whether the BullMQ runner can run, installing its
// packages with npm ci first when install is set.
func checkBullMQ(ctx context.Context, dir string, install bool) error {
	if _, err := os.Stat(filepath.Join(dir, "bench.mjs")); err != nil {
		return fmt.Errorf("bullmq: no runner at %s (skip it with --peers)", filepath.Join(dir, "bench.mjs"))
	}
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New("bullmq: node is not on PATH (install Node.js, or skip it with --peers)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err == nil {
		return nil
	}
	if !install {
		return fmt.Errorf("bullmq: %s is missing: run `npm ci` in %s (or pass --npm-ci, or skip it with --peers)",
			filepath.Join(dir, "node_modules"), dir)
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bullmq: npm ci in %s: %w", dir, err)
	}
	return nil
}

// runBullMQUpstreams runs every upstreams mix through the Node.js runner:
// one queue per destination with its declared limit as the Worker
// limiter, and BullMQ's manual rate limit on a 429 (or a 503 with
// Retry-After), as for paced.
func runBullMQUpstreams(ctx context.Context, e *env) (bench.Result, error) {
	return upstreamsMixes(ctx, e, func(ctx context.Context, plan bench.UpstreamsPlan, m bench.UpstreamsMix) (bench.MixOutcome, error) {
		sim, err := newMixSim(m)
		if err != nil {
			return bench.MixOutcome{}, err
		}
		defer sim.Close()
		deadline, _ := ctx.Deadline()
		spec := bullmqSpec{
			Workload: "upstreams", RedisURL: fmt.Sprintf("redis://%s/%d", e.redisAddr, e.redisDB),
			Prefix:  fmt.Sprintf("ratelane-peers-%d", time.Now().UnixNano()),
			Workers: plan.Workers, TimeoutMs: max(1000, time.Until(deadline).Milliseconds()-5000),
			// The simulator answers at the run's phase of its second
			// (upstream.Server.StartScheduleAt), as for the Go peers.
			ScheduleURL: sim.URL() + "/_schedule?phase=" + e.phase.String(),
		}
		for _, d := range m.Destinations {
			spec.Destinations = append(spec.Destinations, bullmqDestination{
				Name: d.Name, URL: sim.RouteURL(d.Name), Rate: d.Declared, Burst: d.Declared, Jobs: d.Jobs})
		}
		// The runner gives up a cleanup allowance before timeout_ms (10%,
		// 1 to 10 s: bullmq/bench.mjs) and exits 1: like every peer's mix
		// at its bound, what it did not deliver counts as lost. How long
		// its cleanup takes varies with the load, so the bound is told
		// by when the runner gave up, not by how much of ours is left.
		started := time.Now()
		giveUp := time.Duration(spec.TimeoutMs)*time.Millisecond - bullmqCleanup(spec.TimeoutMs)
		if _, err := execBullMQ(ctx, e, spec); err != nil {
			if time.Since(started) < giveUp || sim.ScheduleEpoch().IsZero() {
				return bench.MixOutcome{}, err
			}
			fmt.Fprintf(e.log, "peers: bullmq: mix %s reached its bound; undelivered jobs count as lost\n", m.Name)
		}
		return outcome(sim, m, sim.ScheduleEpoch()), nil
	})
}

// bullmqCleanup is the allowance the Node.js runner keeps inside
// timeout_ms to clean up (bullmq/bench.mjs, cleanupBudget): 10% of it,
// at least 1 s and at most 10 s.
func bullmqCleanup(timeoutMs int64) time.Duration {
	ms := min(10_000, max(1000, timeoutMs/10))
	return time.Duration(ms) * time.Millisecond
}

// runBullMQ runs one workload through the Node.js runner.
func runBullMQ(ctx context.Context, e *env, workload string) (bench.Result, error) {
	if workload == "upstreams" {
		return runBullMQUpstreams(ctx, e)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Hour)
	}
	spec := bullmqSpec{
		Workload: workload,
		RedisURL: fmt.Sprintf("redis://%s/%d", e.redisAddr, e.redisDB),
		Prefix:   fmt.Sprintf("ratelane-peers-%d", time.Now().UnixNano()),
		// Leave the runner a few seconds to clean up inside our bound.
		TimeoutMs: max(1000, time.Until(deadline).Milliseconds()-5000),
	}
	var routes map[string]upstream.RouteConfig
	var paced bench.PacedPlan
	var flood bench.FloodPlan
	switch workload {
	case "throughput":
		p := bench.Throughput(e.smoke)
		spec.Workers, spec.Jobs, spec.LatencyMs = p.Workers, p.Jobs, p.Latency.Milliseconds()
	case "paced":
		paced = bench.Paced(e.smoke)
		spec.Workers, routes = paced.Workers, paced.Routes()
	case "flood":
		flood = bench.Flood(e.smoke)
		spec.Workers, routes = flood.Workers, flood.Routes()
		spec.Rate, spec.Burst, spec.BatchJobs = flood.Rate, flood.Burst, flood.Backlog
		spec.InteractiveRate, spec.WindowMs = flood.InteractiveRate, flood.Window.Milliseconds()
	default:
		return bench.Result{}, fmt.Errorf("bullmq: unknown workload %q", workload)
	}
	var sim *upstream.Server
	if routes != nil {
		var err error
		if sim, err = newSim(routes); err != nil {
			return bench.Result{}, err
		}
		defer sim.Close()
		for _, d := range paced.Destinations {
			spec.Destinations = append(spec.Destinations, bullmqDestination{
				Name: d.Name, URL: sim.RouteURL(d.Name), Rate: d.Rate, Burst: d.Burst, Jobs: d.Jobs})
		}
		if workload == "flood" {
			spec.URL = sim.RouteURL(flood.Route)
		}
	}
	res, err := execBullMQ(ctx, e, spec)
	if err != nil {
		return bench.Result{}, err
	}
	switch workload {
	case "throughput":
		return bench.ScoreThroughput(bench.Throughput(e.smoke), bench.ThroughputOutcome{
			InsertRate: res.InsertJobsPerSecond, Rate: res.JobsPerSecond, Offered: res.OfferedJobsPerSecond,
			P50Ms: res.EnqueueToStartP50Ms, P99Ms: res.EnqueueToStartP99Ms,
		}), nil
	case "paced":
		if want := len(paced.Order()); res.Successes < want {
			return bench.Result{}, fmt.Errorf("bullmq: %d of %d jobs succeeded", res.Successes, want)
		}
		return bench.ScorePaced(paced, sim.Stats(), time.UnixMilli(res.StartUnixMs)), nil
	default:
		return bench.ScoreFlood(flood, bench.FloodOutcome{
			Interactive: res.InteractiveJobs, P50Ms: res.InteractiveP50Ms, P99Ms: res.InteractiveP99Ms,
			MaxMs: res.InteractiveMaxMs, BatchInWindow: res.BatchSuccessesInWindow, WindowSeconds: res.WindowSeconds,
		}, sim.Stats()), nil
	}
}

// execBullMQ runs `node bench.mjs` with spec on stdin and decodes its
// stdout; its stderr is passed through to e.log. The benchmark's Redis
// database is flushed before and after, whatever the runner did.
func execBullMQ(ctx context.Context, e *env, spec bullmqSpec) (bullmqResult, error) {
	rdb := redis.NewClient(&redis.Options{Addr: e.redisAddr, DB: e.redisDB})
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return bullmqResult{}, fmt.Errorf("flush redis db %d: %w", e.redisDB, err)
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rdb.FlushDB(fctx)
	}()
	in, err := json.Marshal(spec)
	if err != nil {
		return bullmqResult{}, err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "node", "bench.mjs")
	cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr = e.bullmqDir, bytes.NewReader(in), &out, e.log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return bullmqResult{}, fmt.Errorf("bullmq: node bench.mjs: %w", err)
	}
	var res bullmqResult
	dec := json.NewDecoder(&out)
	if err := dec.Decode(&res); err != nil {
		return bullmqResult{}, fmt.Errorf("bullmq: result is not one JSON object: %w", err)
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return bullmqResult{}, errors.New("bullmq: stdout holds more than one JSON value")
	}
	return res, nil
}
