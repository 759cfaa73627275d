package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ratelane/ratelane/internal/bench"
)

// testEnv returns the smoke-sized environment the command would use, with
// PostgreSQL and Redis checked first: a missing service skips the test
// locally and fails it under CI.
func testEnv(t *testing.T, needs string) config {
	t.Helper()
	if testing.Short() {
		t.Skip("runs real workloads against real services")
	}
	c, err := parse([]string{"--smoke"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var reach error
	switch needs {
	case "postgres":
		var conn *pgx.Conn
		if conn, reach = pgx.Connect(ctx, c.env.postgresURL); reach == nil {
			conn.Close(ctx)
		}
	case "redis":
		rdb := redis.NewClient(&redis.Options{Addr: c.env.redisAddr, DB: c.env.redisDB})
		reach = rdb.Ping(ctx).Err()
		rdb.Close()
	}
	if reach != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is unreachable: %v", needs, reach)
		}
		t.Skipf("%s is unreachable: %v", needs, reach)
	}
	return c
}

// checkRange fails unless r's metric name is finite and within [lo, hi].
func checkRange(t *testing.T, r bench.Result, name string, lo, hi float64) {
	t.Helper()
	v, ok := r.Get(name)
	switch {
	case !ok:
		t.Errorf("%s: no %s", r.Workload, name)
	case math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi:
		t.Errorf("%s.%s = %v, want within [%v, %v]", r.Workload, name, v, lo, hi)
	}
}

// smoke runs every workload once on a Go peer at smoke size and checks the
// figures are sane measurements (no performance target is asserted).
func smoke(t *testing.T, name, needs string) {
	c := testEnv(t, needs)
	for _, w := range workloads {
		r, err := runOne(context.Background(), c, name, w)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		b, _ := json.Marshal(r)
		t.Logf("%s %s: %s", name, w, b)
		if r.Workload != w {
			t.Errorf("result names workload %q, want %q", r.Workload, w)
		}
		switch w {
		case "throughput":
			plan := bench.Throughput(true)
			checkRange(t, r, "jobs", float64(plan.Jobs), float64(plan.Jobs))
			checkRange(t, r, "insert_jobs_per_second", 1e-9, math.MaxFloat64)
			checkRange(t, r, "jobs_per_second", 1e-9, math.MaxFloat64)
			checkRange(t, r, "offered_jobs_per_second", 100, 2000)
			p50, _ := r.Get("enqueue_to_start_p50_ms")
			checkRange(t, r, "enqueue_to_start_p99_ms", p50, 60_000)
		case "paced":
			// The run returns only once every job succeeded; the
			// simulator saw each delivery's webhook-id once.
			jobs := len(bench.Paced(true).Order())
			checkRange(t, r, "jobs", float64(jobs), float64(jobs))
			checkRange(t, r, "goodput", 1e-9, 1.2)
			checkRange(t, r, "rate_limited_share", 0, 1)
			checkRange(t, r, "duplicates", 0, 0)
			checkRange(t, r, "makespan_ratio", 0.5, 100)
		case "flood":
			plan := bench.Flood(true)
			want := float64(plan.InteractiveRate) * plan.Window.Seconds()
			checkRange(t, r, "interactive_jobs", want-1, want)
			p50, _ := r.Get("interactive_p50_ms")
			p99, _ := r.Get("interactive_p99_ms")
			checkRange(t, r, "interactive_p99_ms", p50, 60_000)
			checkRange(t, r, "interactive_max_ms", p99, 60_000)
			checkRange(t, r, "goodput", 0, 1.2)
			checkRange(t, r, "duplicates", 0, 0)
		case "upstreams":
			checkUpstreams(t, r)
		}
	}
}

// checkUpstreams checks an upstreams result is a sane measurement. Lost
// deliveries are allowed (a slow peer reaches its bound) but counted.
func checkUpstreams(t *testing.T, r bench.Result) {
	t.Helper()
	total := 0
	for _, m := range bench.Upstreams(true).Mixes {
		total += m.Total()
		checkRange(t, r, "makespan_ratio_"+m.Name, 0.5, 1000)
		checkRange(t, r, "ideal_seconds_"+m.Name, 0.1, 60)
	}
	checkRange(t, r, "rate_limited_share", 0, 1)
	checkRange(t, r, "duplicates", 0, 0)
	checkRange(t, r, "lost", 0, float64(total))
	checkRange(t, r, "goodput_min", 0, 1)
	// A single run starts exactly on the default phase of the upstream's
	// second (the epoch the simulator set, whoever asked for it).
	checkRange(t, r, "start_phase_ms", float64(bench.DefaultPhase), float64(bench.DefaultPhase))
}

// TestNaivePhases: with --runs 3 the driver starts run k of every system
// k/3 of a second into the upstream's second, and the result records
// each run's phase.
func TestNaivePhases(t *testing.T) {
	c := testEnv(t, "")
	c.runs, c.peers, c.workloads = 3, []string{"naive"}, []string{"upstreams"}
	rep := measure(context.Background(), c, io.Discard)
	wr := rep.workloads[0]
	if err := wr.errs["naive"]; err != nil {
		t.Fatal(err)
	}
	m, ok := metric(wr.results["naive"], "start_phase_ms")
	if !ok || !slices.Equal(m.Runs, []float64{0, 333, 667}) {
		t.Errorf("start_phase_ms runs = %v (%v), want [0 333 667]", m.Runs, ok)
	}
}

// TestNaiveSmoke runs the naive baseline's one workload.
func TestNaiveSmoke(t *testing.T) {
	c := testEnv(t, "")
	r, err := runOne(context.Background(), c, "naive", "upstreams")
	if err != nil {
		t.Fatal(err)
	}
	checkUpstreams(t, r)
	if lost, _ := r.Get("lost"); lost != 0 {
		t.Errorf("the naive baseline lost %v deliveries: it retries until the bound", lost)
	}
	if _, err := runOne(context.Background(), c, "naive", "paced"); err == nil {
		t.Error("naive ran paced, which it does not implement")
	}
}

func TestBetterOf(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"makespan_ratio_issue": "lower", "goodput_issue_sliding-date": "higher", "goodput_min_many": "higher",
		"lost_fixed": "lower", "ideal_seconds_issue": "", "rate_limited_share_rising": "lower", "goodput": "higher",
	} {
		if got := betterOf(name); got != want {
			t.Errorf("betterOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestRiverPostgresSmoke(t *testing.T) {
	smoke(t, "river-postgres", "postgres")
	// The run's schema was dropped.
	c := testEnv(t, "postgres")
	conn, err := pgx.Connect(context.Background(), c.env.postgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'peers_river_%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d peers_river_ schemas left behind", n)
	}
}

func TestRiverSQLiteSmoke(t *testing.T) {
	smoke(t, "river-sqlite", "")
}

func TestAsynqSmoke(t *testing.T) {
	smoke(t, "asynq", "redis")
	// The run's Redis database was flushed.
	c := testEnv(t, "redis")
	rdb := redis.NewClient(&redis.Options{Addr: c.env.redisAddr, DB: c.env.redisDB})
	defer rdb.Close()
	if n, err := rdb.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Errorf("redis db %d holds %d keys after the runs (%v)", c.env.redisDB, n, err)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	c, err := parse([]string{"--peers", "asynq, river-sqlite,ratelane-postgres", "--workloads", "flood,paced", "--runs", "3"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.peers, ","); got != "ratelane-postgres,river-sqlite,asynq" {
		t.Errorf("peers = %s, want table order", got)
	}
	if got := strings.Join(c.workloads, ","); got != "paced,flood" {
		t.Errorf("workloads = %s", got)
	}
	if c.baseline != "ratelane-postgres" || c.runs != 3 || c.timeout != 5*time.Minute {
		t.Errorf("baseline %q, runs %d, timeout %v", c.baseline, c.runs, c.timeout)
	}
	if c.phase != bench.DefaultPhase || c.phaseFixed {
		t.Errorf("no --phase: phase %v, fixed %v; want the default, spread over runs", c.phase, c.phaseFixed)
	}
	if c, err := parse([]string{"--phase", "250ms"}, &bytes.Buffer{}); err != nil || c.phase != 250*time.Millisecond || !c.phaseFixed {
		t.Errorf("--phase 250ms: phase %v, fixed %v (%v)", c.phase, c.phaseFixed, err)
	}
	if c.env.sqliteGapCheckpoint != 0 || !c.env.sqliteGapCheckpointBeside {
		t.Errorf("no --sqlite-gap-checkpoint: %d, beside %v; want 0 (ratelane's default), true", c.env.sqliteGapCheckpoint, c.env.sqliteGapCheckpointBeside)
	}
	for _, tc := range []struct {
		args   []string
		gap    int
		beside bool
	}{
		{[]string{"--sqlite-gap-checkpoint", "1000", "--sqlite-gap-checkpoint-beside"}, 1000, true},
		{[]string{"--sqlite-gap-checkpoint", "-1"}, -1, true},
		{[]string{"--sqlite-gap-checkpoint", "500", "--sqlite-gap-checkpoint-beside=false"}, 500, false},
	} {
		if c, err := parse(tc.args, &bytes.Buffer{}); err != nil || c.env.sqliteGapCheckpoint != tc.gap || c.env.sqliteGapCheckpointBeside != tc.beside {
			t.Errorf("%q: %d, beside %v (%v); want %d, %v", tc.args, c.env.sqliteGapCheckpoint, c.env.sqliteGapCheckpointBeside, err, tc.gap, tc.beside)
		}
	}
	for _, args := range [][]string{
		{"--peers", "sidekiq"}, {"--workloads", "fairness"}, {"--runs", "0"},
		{"--peers", "asynq", "--baseline", "ratelane-sqlite"}, {"extra"},
		{"--phase", "1s"}, {"--phase", "-1ms"},
	} {
		if _, err := parse(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parse(%q) succeeded, want an error", args)
		}
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	res := func(goodput ...float64) bench.Result {
		var runs []bench.Result
		for _, g := range goodput {
			runs = append(runs, bench.Result{Workload: "paced", Metrics: []bench.Metric{
				{Name: "jobs", Value: 186}, {Name: "goodput", Value: g}, {Name: "duplicates", Value: 0}}})
		}
		return bench.Aggregate(runs)
	}
	rep := &report{baseline: "ratelane-sqlite", systems: []string{"ratelane-sqlite", "river-sqlite", "asynq"},
		workloads: []workloadReport{{name: "paced",
			results: map[string]bench.Result{"ratelane-sqlite": res(0.8, 0.9, 0.7), "river-sqlite": res(0.4, 0.4, 0.4)},
			errs:    map[string]error{"asynq": context.DeadlineExceeded}}}}
	var out bytes.Buffer
	if err := rep.writeTable(&out); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	for _, want := range []string{
		"goodput  higher  ratelane-sqlite  0.8 (0.7–0.9)",
		"river-sqlite     0.4              2.00",
		"duplicates  lower   ratelane-sqlite  0",
		"(failed)",
	} {
		if !strings.Contains(strings.Join(strings.Fields(table), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	out.Reset()
	if err := rep.writeJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	paced := got["paced"].(map[string]any)
	if e := paced["asynq"].(map[string]any)["error"]; e == nil {
		t.Errorf("no error for asynq: %s", out.String())
	}
	if runs := paced["ratelane-sqlite"].(map[string]any)["runs"]; runs == nil {
		t.Errorf("no runs member: %s", out.String())
	}
	if !rep.failed() {
		t.Error("failed() = false with an error")
	}
}

// TestBullMQMissing checks the runner's absence is a clear error, not a
// crash.
func TestBullMQMissing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := checkBullMQ(context.Background(), dir, false); err == nil || !strings.Contains(err.Error(), "--peers") {
		t.Errorf("checkBullMQ(empty dir) = %v", err)
	}
	if err := os.WriteFile(dir+"/bench.mjs", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkBullMQ(context.Background(), dir, false); err == nil || !strings.Contains(err.Error(), "npm ci") {
		t.Errorf("checkBullMQ(no node_modules) = %v, want it to say npm ci", err)
	}
}
