// Command peers runs ratelane's throughput, paced and flood benchmark
// workloads against ratelane and against peer job queues — River on
// PostgreSQL and on SQLite, asynq and BullMQ on Redis — and prints one
// table comparing them.
//
// Every system gets the same work (the plans of internal/bench) against
// the same rate-limited upstream simulator (internal/upstream), and is
// scored by the same code. See README.md for what each peer does and
// PROTOCOL.md for the BullMQ runner's contract.
//
// Usage (from bench/peers):
//
//	go run . [--workloads throughput,paced,flood] [--peers ratelane-sqlite,...] [--runs 3] [--smoke] [--json]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/bench"
	"github.com/ratelane/ratelane/internal/upstream"
)

// workloads are the workloads every system implements, in run order.
var workloads = []string{"throughput", "paced", "flood", "upstreams"}

// goRunners run a workload on a Go peer through the shared driver.
var goRunners = map[string]func(context.Context, *env, opener) (bench.Result, error){
	"throughput": runThroughput,
	"paced":      runPaced,
	"flood":      runFlood,
}

// system is one column of the comparison.
type system struct {
	name string
	run  func(ctx context.Context, e *env, workload string) (bench.Result, error)
}

// goPeer is a Go peer run through the shared driver; style is how it
// applies its per-destination limiter in the upstreams workload.
func goPeer(name string, open opener, style limitStyle) system {
	return system{name, func(ctx context.Context, e *env, w string) (bench.Result, error) {
		var r bench.Result
		var err error
		if w == "upstreams" {
			r, err = runUpstreams(ctx, e, open, style)
		} else {
			r, err = goRunners[w](ctx, e, open)
		}
		r.Workload = w
		return r, err
	}}
}

// ratelaneStore is ratelane itself through internal/bench.Run.
func ratelaneStore(store string) system {
	return system{"ratelane-" + store, func(ctx context.Context, e *env, w string) (bench.Result, error) {
		d := time.Hour
		if dl, ok := ctx.Deadline(); ok {
			d = time.Until(dl)
		}
		if w == "upstreams" { // Duration bounds each of its mixes
			d /= time.Duration(len(bench.Upstreams(e.smoke).Mixes))
		}
		return bench.Run(ctx, w, bench.Options{Store: store, PostgresURL: e.postgresURL, Smoke: e.smoke, Duration: d, Phase: e.phase,
			SQLiteGapCheckpoint: e.sqliteGapCheckpoint, SQLiteGapCheckpointOnWriter: !e.sqliteGapCheckpointBeside})
	}}
}

// systems lists every system in table order.
var systems = []system{
	ratelaneStore("sqlite"),
	ratelaneStore("postgres"),
	goPeer("river-postgres", openRiverPostgres, limitWait),
	goPeer("river-postgres-tuned", openRiverPostgresTuned, limitWait),
	goPeer("river-sqlite", openRiverSQLite, limitWait),
	goPeer("asynq", openAsynq, limitAllow),
	{"bullmq", runBullMQ},
	{"naive", runNaive},
}

// supports reports whether system name runs workload w: the naive
// baseline runs only upstreams.
func supports(name, w string) bool {
	return name != "naive" || w == "upstreams"
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the command line.
type config struct {
	workloads, peers []string
	baseline         string
	runs             int
	timeout          time.Duration
	asJSON, npmCI    bool
	env              env
	// phase and phaseFixed are --phase and whether it was given: run k of
	// the upstreams workload starts at bench.Options.PhaseOfRun(k).
	phase      time.Duration
	phaseFixed bool
}

// run runs the command and returns its exit code: 0, 1 when a system
// failed, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 2
	}
	if slices.Contains(cfg.peers, "bullmq") {
		if err := checkBullMQ(ctx, cfg.env.bullmqDir, cfg.npmCI); err != nil {
			fmt.Fprintf(stderr, "peers: %v\n", err)
			return 1
		}
	}
	rep := measure(ctx, cfg, stderr)
	if cfg.asJSON {
		err = rep.writeJSON(stdout)
	} else {
		err = rep.writeTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	if rep.failed() {
		return 1
	}
	return 0
}

// parse reads the flags.
func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	names := make([]string, len(systems))
	for i, s := range systems {
		names[i] = s.name
	}
	pg := os.Getenv("RATELANE_TEST_POSTGRES_URL")
	if pg == "" {
		pg = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	wl := fs.String("workloads", strings.Join(workloads, ","), "comma-separated workloads: "+strings.Join(workloads, ", "))
	ps := fs.String("peers", strings.Join(names, ","), "comma-separated systems: "+strings.Join(names, ", "))
	fs.StringVar(&c.baseline, "baseline", "", "system the ratio column divides by each other system (default: the first ratelane system selected)")
	fs.IntVar(&c.runs, "runs", 1, "runs per workload and system; the table shows the median and min–max")
	fs.DurationVar(&c.phase, "phase", bench.DefaultPhase, "upstreams: start every run this far into the upstream simulator's second, 0 to 999ms, the same for every system (default: a single run at 0, run k of --runs N at k/N of a second)")
	fs.BoolVar(&c.env.smoke, "smoke", false, "shrink every workload to a few seconds (CI)")
	fs.BoolVar(&c.asJSON, "json", false, "print one JSON object instead of a table")
	fs.DurationVar(&c.timeout, "timeout", 0, "bound on one system's run of one workload (default 5m, 90s with --smoke)")
	fs.StringVar(&c.env.postgresURL, "postgres-url", pg, "PostgreSQL for ratelane-postgres and river-postgres (a fresh schema per run, dropped afterwards; default $RATELANE_TEST_POSTGRES_URL)")
	fs.StringVar(&c.env.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis for asynq and bullmq")
	fs.IntVar(&c.env.redisDB, "redis-db", 9, "Redis database for asynq and bullmq: flushed before and after every run, so dedicate it")
	fs.StringVar(&c.env.bullmqDir, "bullmq-dir", "bullmq", "directory of the BullMQ runner (bench.mjs)")
	fs.IntVar(&c.env.sqliteGapCheckpoint, "sqlite-gap-checkpoint", 0, "ratelane-sqlite only: Region.SQLiteGapCheckpoint, the WAL frames at which the store checkpoints between transactions while no interactive work is in flight (0: ratelane's default, 1,000; negative: off)")
	fs.BoolVar(&c.env.sqliteGapCheckpointBeside, "sqlite-gap-checkpoint-beside", true, "ratelane-sqlite only: run those checkpoints on a connection of their own beside the writer (the default); false runs them on the writer's (Region.SQLiteGapCheckpointOnWriter)")
	fs.BoolVar(&c.npmCI, "npm-ci", false, "run `npm ci` in --bullmq-dir when its node_modules is missing")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.workloads, err = pick("workload", *wl, workloads); err != nil {
		return c, err
	}
	if c.peers, err = pick("system", *ps, names); err != nil {
		return c, err
	}
	if c.runs < 1 {
		return c, fmt.Errorf("--runs %d: want 1 or more", c.runs)
	}
	fs.Visit(func(f *flag.Flag) { c.phaseFixed = c.phaseFixed || f.Name == "phase" })
	if err := upstream.CheckPhase(c.phase); err != nil {
		return c, fmt.Errorf("--phase: %w", err)
	}
	if c.baseline == "" {
		for _, p := range c.peers {
			if strings.HasPrefix(p, "ratelane-") {
				c.baseline = p
				break
			}
		}
	} else if !slices.Contains(c.peers, c.baseline) {
		return c, fmt.Errorf("--baseline %s is not among --peers", c.baseline)
	}
	if c.timeout <= 0 {
		c.timeout = 5 * time.Minute
		if c.env.smoke {
			c.timeout = 90 * time.Second
		}
	}
	c.env.log = stderr
	return c, nil
}

// pick splits a comma-separated list and checks every item is known,
// keeping the known order.
func pick(what, list string, known []string) ([]string, error) {
	var out []string
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !slices.Contains(known, item) {
			return nil, fmt.Errorf("unknown %s %q (want %s)", what, item, strings.Join(known, ", "))
		}
		out = append(out, item)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s selected", what)
	}
	slices.SortStableFunc(out, func(a, b string) int { return slices.Index(known, a) - slices.Index(known, b) })
	return slices.Compact(out), nil
}

// measure runs every selected workload on every selected system, runs
// interleaved (run 1 of every system, then run 2, ...) so slow drifts of a
// shared machine spread over all of them.
func measure(ctx context.Context, c config, log io.Writer) *report {
	rep := &report{baseline: c.baseline, systems: c.peers}
	for _, w := range c.workloads {
		runs := map[string][]bench.Result{}
		errs := map[string]error{}
		for i := range c.runs {
			// Every system's run i starts at the same phase.
			c.env.phase = bench.Options{Runs: c.runs, Phase: c.phase, PhaseFixed: c.phaseFixed}.PhaseOfRun(i)
			for _, name := range c.peers {
				if errs[name] != nil || !supports(name, w) {
					continue
				}
				fmt.Fprintf(log, "peers: %s on %s (run %d of %d)...\n", w, name, i+1, c.runs)
				r, err := runOne(ctx, c, name, w)
				if err != nil {
					fmt.Fprintf(log, "peers: %s on %s failed: %v\n", w, name, err)
					errs[name] = err
					continue
				}
				runs[name] = append(runs[name], r)
			}
		}
		wr := workloadReport{name: w, results: map[string]bench.Result{}, errs: errs}
		for name, rs := range runs {
			if errs[name] == nil {
				wr.results[name] = bench.Aggregate(rs)
			}
		}
		rep.workloads = append(rep.workloads, wr)
	}
	return rep
}

// runOne runs one workload once on one system within the timeout, with a
// fresh HTTP client so no connection outlives the run.
func runOne(ctx context.Context, c config, name, workload string) (bench.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	e := c.env
	e.http = &http.Client{
		Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512},
		Timeout:   10 * time.Second,
	}
	defer e.http.CloseIdleConnections()
	for _, s := range systems {
		if s.name == name {
			r, err := s.run(ctx, &e, workload)
			if err != nil && ctx.Err() != nil {
				err = fmt.Errorf("%w (over the %v bound; raise --timeout)", err, c.timeout)
			}
			return r, err
		}
	}
	return bench.Result{}, fmt.Errorf("unknown system %q", name)
}
