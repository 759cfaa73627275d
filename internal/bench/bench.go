// Package bench runs ratelane's end-to-end benchmark workloads in process,
// against a real store (SQLite or PostgreSQL) and, where a workload calls an
// upstream, the rate-limited simulator of internal/upstream on loopback.
// It backs the `ratelane bench` command; the metric names it reports are
// stable and documented in docs/benchmarks.md.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/ratelimit"
	"github.com/ratelane/ratelane/internal/upstream"
)

// Options configure a run.
type Options struct {
	// Store is "sqlite" (default) or "postgres".
	Store string
	// PostgresURL is the database for Store "postgres"; each workload uses
	// a schema of its own, dropped afterwards.
	PostgresURL string
	// Duration bounds each workload; 0 means DefaultBound.
	Duration time.Duration
	// Smoke shrinks every workload to a few seconds (for CI).
	Smoke bool
	// Dir holds SQLite files; default a new temporary directory.
	Dir string
	// Runs is how many times Run runs the workload (default 1); the result
	// holds each metric's median and every run's value (see Aggregate).
	Runs int
	// Phase is where in the upstream simulator's second the upstreams
	// workload's senders start (upstream.PhaseStart), in [0, 1s): its
	// fixed windows and sliding counters count whole clock seconds, so
	// the phase moves a run's makespan, and a start wherever setup ended
	// would compare random draws. A single run starts at Phase (default
	// DefaultPhase); with Runs > 1, run k starts at RunPhase(k, Runs)
	// unless PhaseFixed, which keeps Phase for every run.
	Phase time.Duration
	// PhaseFixed makes every one of Runs start at Phase.
	PhaseFixed bool
	// Mixes, when not empty, runs only the upstreams mixes so named.
	Mixes []string
	// Trace, when set, receives a timeline of each upstreams mix: every
	// 500 ms each destination's accepted and refused answers since the
	// last line. Counts only, never payloads.
	Trace io.Writer
	// BatchPieces, when not zero, is the batch-isolation workload's
	// Config.BatchPieces (negative: the batch budget off), for A/B runs.
	BatchPieces int
	// BatchCPUs, when not zero, is the batch-isolation workload's
	// Config.BatchCPUs (negative: the CPU governor off), for A/B runs.
	BatchCPUs int
	// BatchCPUShare, when not zero, is the batch-isolation workload's
	// Config.BatchCPUShare (the batch pacer; negative: off), for A/B runs.
	BatchCPUShare float64
	// BatchThreads, when not empty, is the batch-isolation workload's
	// Config.BatchThreadPolicy ("idle": the batch lane computes on
	// SCHED_IDLE threads); the command raises GOMAXPROCS for it
	// (engine.IdleThreadProcs) and pins BatchCPUs.
	BatchThreads string
	// BatchYieldMax, when positive, turns on the yield gate
	// (Config.BatchYieldMax: the longest it holds one piece of batch-lane
	// work) in the batch-isolation and upstreams workloads, for A/B runs;
	// zero leaves the client's default (on, 100 ms); negative turns it off.
	BatchYieldMax time.Duration
	// SQLiteBatchHold is every SQLite region's Region.SQLiteBatchHold
	// (how long the writer may hold a batch-lane transaction open while
	// interactive work is in flight), for A/B runs: zero leaves the
	// default (10 ms), negative turns the hold off.
	SQLiteBatchHold time.Duration
	// SQLiteGapCheckpoint is every SQLite region's
	// Region.SQLiteGapCheckpoint (WAL checkpoints between interactive
	// work, at this many frames), for A/B runs: zero leaves the default
	// (1,000), negative leaves checkpoints to SQLite.
	SQLiteGapCheckpoint int
	// SQLiteReadMmapSize is every SQLite region's
	// Region.SQLiteReadMmapSize (the readers' PRAGMA mmap_size, bytes),
	// for A/B runs: zero leaves the readers on pread.
	SQLiteReadMmapSize int64
	// SQLiteGapCheckpointOnWriter is every SQLite region's
	// Region.SQLiteGapCheckpointOnWriter (the gap checkpoints on the
	// writer's connection rather than beside it), for A/B runs.
	SQLiteGapCheckpointOnWriter bool
	// SQLiteWriterNice is every SQLite region's Region.SQLiteWriterNice
	// (the writer locked to a thread of this nice), for A/B runs: zero
	// leaves the writer's thread to Go.
	SQLiteWriterNice int
	// Sim is where the batch-isolation workload's simulators run:
	// SimInProcess ("" too) or SimChild, which needs the executable to
	// call ServeSimChildIfAsked first (the ratelane command, this
	// package's tests). `ratelane bench` defaults to SimChild.
	Sim string
	// SimNice is the simulators' child's nice (SimChild; Linux), -20 to
	// 0: 0 leaves it at the bench's priority, a negative nice raises it
	// above the bench's (which needs root or CAP_SYS_NICE; refused, the
	// run goes on without it and says so). The simulators stand for a
	// remote provider, whose answers do not wait for this machine's
	// cores: at the bench's priority the child waited for a core while
	// the sweep's threads ran, a third of the in-sweep tail
	// (docs/benchmarks.md, "Session 28 (s28h3)"). `ratelane bench`
	// defaults to 0: -10 did not move the in-sweep tail beyond the noise,
	// and the one child holds the batch simulator too, whose sweep work a
	// raised priority also puts ahead of ratelane ("Session 29 (s29h1)").
	SimNice int
	// BatchSim is where the batch simulator runs with SimChild:
	// BatchSimShared ("" too) in the one simulator child beside the LLM
	// simulator, or BatchSimIdle in a child of its own whose every thread
	// is on SCHED_IDLE (Linux; refused or elsewhere, the run goes on with
	// it at the bench's priority and says so). The simulators stand for a
	// remote provider: in the shared child the batch simulator's sweep
	// work (1.2-1.6 s of CPU per 10,000-file sweep, session 41) competes
	// with the interactive reviews for this machine's cores, which a
	// remote provider's does not. SimInProcess refuses BatchSimIdle.
	BatchSim string
	// BatchNode is where the batch-isolation workload's batch lane runs:
	// BatchNodeInProcess ("" too) or BatchNodeProcess, a batch-only node
	// in a child process (which needs the executable to call
	// ServeSimChildIfAsked first, as for SimChild).
	BatchNode string
	// BatchNice is the batch node's nice (BatchNodeProcess; Linux): 0
	// leaves it at the bench's priority. `ratelane bench` defaults to 10.
	BatchNice int
	// SweepWork is what the batch-isolation workload's batch lane does
	// with the sweep: SweepWorkFull ("" too) works it to the end, as a
	// real sweep; SweepWorkIntake only takes its manifests in (the same
	// SubmitBatch calls) and leaves its items queued, the bench's Client
	// serving the interactive lane alone: the sweep's presence in the
	// store without the batch lane's work, to tell the two apart.
	// SweepWorkIntake refuses BatchNodeProcess.
	SweepWork string
	// TraceTail, when set, makes the batch-isolation workload record a
	// per-review and per-event timeline to this file (with Runs > 1, run
	// k's to TraceTail.k) and add tail_* figures: what the slowest
	// reviews under the sweep waited for (tailtrace.go). The recording
	// costs CPU: its runs are for attribution, not for the headline
	// figures.
	TraceTail string
	// ExecTrace, when set, makes the batch-isolation workload write a
	// runtime/trace of its baseline phase and the sweep's first stretch
	// (ExecTraceMax in all) to this file
	// (with Runs > 1, run k's to ExecTrace.k), annotated with every
	// interactive review's and stage span's ids and times (exectrace.go):
	// what the goroutines serving a slow review were doing. Tracing
	// costs CPU: its runs are for attribution, not for the headline
	// figures.
	ExecTrace string
	// LockProfile, when set, makes the batch-isolation workload record
	// Go's block and mutex profiles from the baseline phase's start
	// (lockprofile.go) and write them to this directory at the end of the
	// baseline and of the sweep phase (with Runs > 1, run k's to
	// LockProfile/k): the sweep's own is the difference of the two
	// (go tool pprof -base). The default SQLite driver's locks are Go
	// mutexes (modernc.org/libc), so their waits are there, by call site.
	// Recording every wait costs CPU: for attribution, not headline runs.
	LockProfile string
	// BurnChild and BurnBench are the batch-floor workload's burner: CPU
	// seconds per second burnt in a child process (standing for the
	// simulator child's share of a sweep phase) and in goroutines of the
	// bench's own process (standing for the bench's share), in every
	// other window beside the interactive reviews (floor.go).
	BurnChild, BurnBench float64
	// BurnPiece is the longest spin of one of the bench-process burner's
	// goroutines before it gives its P up (runtime.Gosched): 0, the
	// default, spins in pieces of burnPeriod (2 ms) and yields only by
	// sleeping. A shorter piece burns the same CPU per second in shorter
	// run slices: whether an interactive goroutine waits behind the
	// burner's slices (docs/benchmarks.md, "Session 32 (s32h6)").
	BurnPiece time.Duration
	// BurnWorkers is how many goroutines the bench-process burner spreads
	// BurnBench over (0: GOMAXPROCS). BurnIdle runs each of them locked
	// to a SCHED_IDLE thread (internal/idlethread, Linux): the kernel
	// gives the burner a core only when no normal thread wants one. With
	// spare Ps (GOMAXPROCS above the cores) it is the pilot of the batch
	// lane on idle threads (docs/benchmarks.md, "Session 36 (s36h1)").
	BurnWorkers int
	BurnIdle    bool
	// IOFloorRate and IOFloorPages are the io-floor workload's interactive
	// commits per second and pages per commit; IOFloorBatchPages and
	// IOFloorBatchSyncs its synthetic batch writer's pages and fdatasyncs
	// per second; IOFloorBurnShare its CPU burst arms' share of each core
	// and IOFloorBurnPieces their bursts' lengths, one arm each (nil: the
	// defaults, 5 ms and 0.5 ms; empty and not nil: no burst arm). Zero
	// leaves IOFloor's default (iofloor.go).
	IOFloorRate, IOFloorBatchPages, IOFloorBatchSyncs, IOFloorBurnShare float64
	IOFloorPages                                                        int
	IOFloorBurnPieces                                                   []time.Duration
	// IOFloorReplay, when set, is a cpulabels build's RATELANE_WRITESTATS
	// file whose writer timeline in phase IOFloorReplayPhase (default
	// "sweep"; "all": every phase) io-floor replays as I/O in an arm of
	// its own.
	IOFloorReplay, IOFloorReplayPhase string
}

// Metric is one named figure of a workload.
type Metric struct {
	Name  string
	Value float64
	// Unit is for the table only.
	Unit string
	// Runs holds the value of each run, in run order, when Value is the
	// median of more than one run (see Aggregate); nil for a single run.
	Runs []float64
}

// Result is one workload's figures, in report order.
type Result struct {
	Workload string
	Metrics  []Metric
	// samples are a run's raw latencies by phase, which Run pools over
	// its runs (addPooled); nil for workloads that do not pool.
	samples map[string][]time.Duration
	// blocks are samples' reviews grouped by when they were submitted
	// (blocksOf), for addPooled's block bootstrap; by phase, nil where
	// the workload keeps none.
	blocks map[string][][]time.Duration
}

// Get returns a metric's value and whether it is present.
func (r Result) Get(name string) (float64, bool) {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// MarshalJSON writes the metrics as one object of name to number, in
// report order. A result aggregated over several runs adds a "runs" member:
// an object of name to the array of every run's value, in run order, while
// the metric names keep the medians; a metric with no run values (one
// figure over every run, such as batch-isolation's pooled quantiles) is
// not in it.
func (r Result) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	var err error
	multi := false
	for i, m := range r.Metrics {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, m.Name)
		b = append(b, ':')
		if b, err = appendNumber(b, r.Workload, m.Name, m.Value); err != nil {
			return nil, err
		}
		multi = multi || len(m.Runs) > 1
	}
	if multi {
		b = append(b, `,"runs":{`...)
		first := true
		for _, m := range r.Metrics {
			if len(m.Runs) == 0 {
				continue // one figure over every run (pooled), not a median
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = strconv.AppendQuote(b, m.Name)
			b = append(b, ':', '[')
			for j, v := range m.Runs {
				if j > 0 {
					b = append(b, ',')
				}
				if b, err = appendNumber(b, r.Workload, m.Name, v); err != nil {
					return nil, err
				}
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

func appendNumber(b []byte, workload, name string, v float64) ([]byte, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("bench: %s.%s is not finite", workload, name)
	}
	return strconv.AppendFloat(b, round(v), 'f', -1, 64), nil
}

// Aggregate returns one result for several runs of a workload: each metric
// (in the first run's order) has the median of the runs' values as Value
// (the mean of the middle two for an even count) and every run's value in
// Runs. A metric missing from a run is left out of that run's values. One
// run is returned as it is; none gives the zero Result.
func Aggregate(runs []Result) Result {
	if len(runs) <= 1 {
		if len(runs) == 0 {
			return Result{}
		}
		return runs[0]
	}
	agg := Result{Workload: runs[0].Workload}
	for _, m := range runs[0].Metrics {
		var vs []float64
		for _, r := range runs {
			if v, ok := r.Get(m.Name); ok {
				vs = append(vs, v)
			}
		}
		agg.Metrics = append(agg.Metrics, Metric{Name: m.Name, Value: Median(vs), Unit: m.Unit, Runs: vs})
	}
	return agg
}

// Median returns the median of xs (the mean of the middle two for an even
// count), or 0 when xs is empty. It does not change xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Spread returns the smallest and largest of m's run values, or Value
// twice for a single run.
func (m Metric) Spread() (lo, hi float64) {
	if len(m.Runs) == 0 {
		return m.Value, m.Value
	}
	return slices.Min(m.Runs), slices.Max(m.Runs)
}

// Format returns m's value for a table: the median and, over several runs
// that did not all agree, the range as "median (min–max)".
func (m Metric) Format() string {
	v := strconv.FormatFloat(round(m.Value), 'f', -1, 64)
	if lo, hi := m.Spread(); len(m.Runs) > 1 && lo != hi {
		v += " (" + strconv.FormatFloat(round(lo), 'f', -1, 64) + "–" + strconv.FormatFloat(round(hi), 'f', -1, 64) + ")"
	}
	return v
}

func round(v float64) float64 {
	if math.Abs(v) >= 100 {
		return math.Round(v*10) / 10
	}
	return math.Round(v*10000) / 10000
}

func (r *Result) add(name string, v float64, unit string) {
	r.Metrics = append(r.Metrics, Metric{Name: name, Value: v, Unit: unit})
}

// Workloads lists the workloads in the order `all` runs them.
var Workloads = []string{"throughput", "paced", "fairness", "flood", "adapt", "upstreams", "http-enqueue", "http-batch", "http-workers", "batch-isolation", "batch-floor", "io-floor"}

var runners = map[string]func(context.Context, *env) (Result, error){
	"throughput": runThroughput,
	"paced":      runPaced,
	"fairness":   runFairness,
	"flood":      runFlood,
	"adapt":      runAdapt,
	"upstreams":  runUpstreams,
	// The HTTP workloads (httpapi.go): the API on loopback.
	"http-enqueue": httpWorkload(func(p HTTPPlan) int { return p.Clients }, runHTTPEnqueue),
	"http-batch":   httpWorkload(func(p HTTPPlan) int { return p.BatchClients }, runHTTPBatch),
	"http-workers": httpWorkload(func(p HTTPPlan) int { return p.Workers }, runHTTPWorkers),
	// The batch lane beside interactive reviews (batchlane.go).
	"batch-isolation": runBatchLane,
	// Its interactive reviews beside a plain CPU burner (floor.go).
	"batch-floor": runBatchFloor,
	// The device's floor under the interactive commit (iofloor.go).
	"io-floor": runIOFloor,
}

// DefaultBound is the upper bound of one run of a workload when
// Options.Duration is not set: 60 s, or 10 minutes for the full-size
// batch-isolation sweep (10,000 files through the batch lane take longer
// than a minute on this project's 2-core machine, and a bound that cuts
// the run short measures nothing), and 2 minutes for the full-size
// batch-floor (45 s of windows, which a loaded machine stretches) and
// 4 minutes for io-floor (two minutes of windows with six arms).
func DefaultBound(name string, smoke bool) time.Duration {
	if name == "batch-isolation" && !smoke {
		return 10 * time.Minute
	}
	if name == "batch-floor" && !smoke {
		return 2 * time.Minute
	}
	if name == "io-floor" && !smoke {
		return 4 * time.Minute
	}
	return 60 * time.Second
}

// DefaultPhase is the start phase of a single upstreams run (Options.Phase).
const DefaultPhase = 0

// RunPhase is the start phase of run k (from 0) of n: k/n of a second to
// the nearest millisecond, so three runs start at 0, 333 and 667 ms and
// their median is over phases spread across the upstream's second, the
// same for every sender. k wraps at n; n below 1 gives DefaultPhase.
func RunPhase(k, n int) time.Duration {
	if n < 1 {
		return DefaultPhase
	}
	ms := (k%n*1000 + n/2) / n
	return time.Duration(ms) * time.Millisecond
}

// PhaseOfRun is run k's (from 0) start phase under o (see Options.Phase):
// Phase for a single run or with PhaseFixed, otherwise RunPhase(k, Runs).
// A driver that runs the workload once per call, as bench/peers does,
// asks it for each of its runs.
func (o Options) PhaseOfRun(k int) time.Duration {
	if o.PhaseFixed || o.Runs <= 1 {
		return o.Phase
	}
	return RunPhase(k, o.Runs)
}

// Run runs one workload, o.Runs times (see Options.Runs). A workload that
// keeps its raw samples (batch-isolation) also reports them pooled over
// every run (addPooled).
func Run(ctx context.Context, name string, o Options) (Result, error) {
	if err := upstream.CheckPhase(o.Phase); err != nil {
		return Result{}, err
	}
	var runs []Result
	for k := range max(1, o.Runs) {
		one := o
		one.Runs = 1
		one.Phase = o.PhaseOfRun(k)
		if o.TraceTail != "" && o.Runs > 1 {
			one.TraceTail = fmt.Sprintf("%s.%d", o.TraceTail, k+1)
		}
		if o.ExecTrace != "" && o.Runs > 1 {
			one.ExecTrace = fmt.Sprintf("%s.%d", o.ExecTrace, k+1)
		}
		if o.LockProfile != "" && o.Runs > 1 {
			one.LockProfile = filepath.Join(o.LockProfile, fmt.Sprint(k+1))
		}
		r, err := runOnce(ctx, name, one)
		if err != nil {
			return r, err
		}
		runs = append(runs, r)
	}
	agg := Aggregate(runs)
	addPooled(&agg, runs)
	return agg, nil
}

// runOnce runs one workload once.
func runOnce(ctx context.Context, name string, o Options) (Result, error) {
	fn, ok := runners[name]
	if !ok {
		return Result{}, fmt.Errorf("unknown workload %q (want one of %v or all)", name, Workloads)
	}
	if o.Store == "" {
		o.Store = "sqlite"
	}
	if o.Store != "sqlite" && o.Store != "postgres" {
		return Result{}, fmt.Errorf("unknown store %q (want sqlite or postgres)", o.Store)
	}
	if o.Store == "postgres" && o.PostgresURL == "" {
		return Result{}, errors.New("--store postgres needs --postgres-url")
	}
	if o.Duration <= 0 {
		o.Duration = DefaultBound(name, o.Smoke)
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "ratelane-bench-")
		if err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	bound := o.Duration
	if name == "upstreams" { // Duration bounds each of its mixes
		bound *= time.Duration(len(Upstreams(o.Smoke).Mixes))
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	e := &env{opts: o, dir: dir, name: name, http: &http.Client{
		Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512},
		Timeout:   10 * time.Second,
	}}
	res, err := fn(ctx, e)
	res.Workload = name
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (over the %v bound; raise --duration)", err, o.Duration)
	}
	// A schema that could not be dropped is an error the operator must
	// see (and drop by hand), not a silent leftover in their database.
	return res, errors.Join(err, e.close())
}

// env is one workload's resources, released by close.
type env struct {
	opts    Options
	dir     string
	name    string
	http    *http.Client
	schemas []string
	clients []*ratelane.Client
	sims    []*upstream.Server
}

// close stops the workload's clients and simulators and drops its
// PostgreSQL schemas, on every end (a cancelled run too: it uses a fresh
// context); it reports the schemas it could not drop.
func (e *env) close() error {
	for _, c := range e.clients {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Stop(stopCtx)
		cancel()
	}
	e.http.CloseIdleConnections()
	for _, s := range e.sims {
		_ = s.Close()
	}
	if len(e.schemas) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.opts.PostgresURL)
	if err != nil {
		return fmt.Errorf("drop bench schemas %v: %w", e.schemas, err)
	}
	defer conn.Close(ctx)
	var errs []error
	for _, s := range e.schemas {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("drop bench schema %s: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// client opens a client on the run's store with cfg's handlers and
// limits; the region is "us".
func (e *env) client(ctx context.Context, cfg ratelane.Config) (*ratelane.Client, error) {
	if len(cfg.Regions) == 0 {
		cfg.Regions = []ratelane.Region{e.region()}
	}
	cfg.DataDir = e.dir
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e.clients = append(e.clients, c)
	return c, nil
}

// region is a new store for the workload's one region: a PostgreSQL
// schema of its own, dropped afterwards, or an SQLite file in e.dir.
func (e *env) region() ratelane.Region {
	r := ratelane.Region{Name: "us"}
	if e.opts.Store == "postgres" {
		// The pid tells whose run a schema is (and lets a test find its own).
		schema := fmt.Sprintf("bench_%s_%d_%d", e.name, os.Getpid(), time.Now().UnixNano())
		e.schemas = append(e.schemas, schema)
		r.PostgresURL, r.PostgresSchema = e.opts.PostgresURL, schema
	} else {
		r.SQLitePath = filepath.Join(e.dir, e.name+".db")
		r.SQLiteBatchHold = e.opts.SQLiteBatchHold
		r.SQLiteGapCheckpoint = e.opts.SQLiteGapCheckpoint
		r.SQLiteReadMmapSize = e.opts.SQLiteReadMmapSize
		r.SQLiteGapCheckpointOnWriter = e.opts.SQLiteGapCheckpointOnWriter
		r.SQLiteWriterNice = e.opts.SQLiteWriterNice
	}
	return r
}

func (e *env) sim(routes map[string]upstream.RouteConfig) (*upstream.Server, error) {
	s, err := upstream.New(upstream.Config{Routes: routes, Seed: 1})
	if err != nil {
		return nil, err
	}
	e.sims = append(e.sims, s)
	return s, nil
}

// post delivers one job to a simulator route and maps the answer to a
// handler result: 2xx success, 429 (and 503 with a Retry-After)
// RateLimited(Retry-After), else transient.
func (e *env) post(ctx context.Context, url, id string) error {
	status, retryAfter, err := Deliver(ctx, e.http, url, id)
	switch {
	case err != nil:
		return ratelane.Transient(err)
	case status >= 200 && status < 300:
		return nil
	case RateLimited(status, retryAfter):
		return ratelane.RateLimited(retryAfter)
	default:
		return ratelane.Transient(fmt.Errorf("upstream answered %d", status))
	}
}

// postCounted is post for a handler whose workload waits on the number of
// deliveries the upstream accepted: each success counts once in ok.
func (e *env) postCounted(ctx context.Context, ok *atomic.Int64, url, id string) error {
	err := e.post(ctx, url, id)
	if err == nil {
		ok.Add(1)
	}
	return err
}

// RateLimited reports whether an answer is congestion: a 429, or a 503
// that says when to come back (retryAfter > 0, as Deliver returns it).
func RateLimited(status int, retryAfter time.Duration) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable && retryAfter > 0
}

// Deliver POSTs an empty delivery to a simulator route with id as its
// webhook-id (the simulator counts duplicates by it) and returns the
// status code and the server-given delay (retry-after-ms, or Retry-After
// in seconds or as an HTTP-date read against the response's Date, parsed
// by internal/ratelimit), 0 when absent.
func Deliver(ctx context.Context, c *http.Client, url, id string) (status int, retryAfter time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("webhook-id", id)
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if info := ratelimit.Parse(resp.Header, time.Now()); info.HasRetryAfter {
		retryAfter = info.RetryAfter
	}
	return resp.StatusCode, retryAfter, nil
}

// insert inserts ps in batches of 1,000.
func insert(ctx context.Context, c *ratelane.Client, ps []ratelane.InsertParams) error {
	for i := 0; i < len(ps); i += 1000 {
		if _, err := c.InsertMany(ctx, ps[i:min(len(ps), i+1000)]); err != nil {
			return err
		}
	}
	return nil
}

// WaitFor polls cond every 5 ms until it holds or ctx ends.
func WaitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Sleep sleeps for d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	return sleepUntil(ctx, time.Now().Add(d))
}

// Every calls fn once per period, on a ticker, until window has passed
// since the call, and returns how many calls it made: the steady arrivals
// of the throughput and flood workloads.
func Every(ctx context.Context, period, window time.Duration, fn func() error) (int, error) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	end, n := time.Now().Add(window), 0
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-tick.C:
		}
		if err := fn(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// sleepUntil sleeps until t or ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything.
func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

// WriteJSON writes results as one JSON object: the workload's object for
// one result, or {"workload": {...}, ...} under "all".
func WriteJSON(w io.Writer, results []Result, all bool) error {
	var v any
	if all {
		m := map[string]Result{}
		for _, r := range results {
			m[r.Workload] = r
		}
		v = m
	} else if len(results) == 1 {
		v = results[0]
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteTable writes results as a readable table: one line per metric with
// its value, or its median and (min–max) over several runs.
func WriteTable(w io.Writer, results []Result) error {
	for _, r := range results {
		if _, err := fmt.Fprintf(w, "%s\n", r.Workload); err != nil {
			return err
		}
		for _, m := range r.Metrics {
			if _, err := fmt.Fprintf(w, "  %-38s %22s %s\n", m.Name, m.Format(), m.Unit); err != nil {
				return err
			}
		}
	}
	return nil
}
