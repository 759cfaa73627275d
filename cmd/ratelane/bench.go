package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/bench"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/upstream"
)

func init() {
	register("bench", "run an end-to-end benchmark workload (throughput, paced, fairness, flood, adapt, upstreams, http-enqueue, http-batch, http-workers, batch-isolation, batch-floor, io-floor, all)", helpOK(runBench))
}

// runBench runs `ratelane bench <workload> [flags]`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := commandFlags("bench", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ratelane bench <throughput|paced|fairness|flood|adapt|upstreams|http-enqueue|http-batch|http-workers|batch-isolation|batch-floor|io-floor|all> [flags]")
		fs.PrintDefaults()
		fmt.Fprint(stderr, benchMetricsHelp)
	}
	var o bench.Options
	var asJSON bool
	fs.StringVar(&o.Store, "store", "sqlite", "store: sqlite (a temporary file) or postgres")
	fs.StringVar(&o.PostgresURL, "postgres-url", "", "PostgreSQL URL for --store postgres (a schema per workload, dropped afterwards)")
	fs.DurationVar(&o.Duration, "duration", 0, "upper bound of each run of a workload (default 1m; batch-isolation 10m; batch-floor 2m; upstreams: each mix)")
	fs.BoolVar(&o.Smoke, "smoke", false, "shrink every workload to a few seconds (CI)")
	fs.IntVar(&o.Runs, "runs", 1, "run each workload this many times and report each metric's median (JSON adds \"runs\": every run's value; the table shows min–max); batch-isolation adds pooled_* figures over every run's reviews together")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object instead of a table")
	fs.IntVar(&o.BatchPieces, "batch-pieces", 0, "batch-isolation only: Config.BatchPieces, the batch budget (0: the default, 1; -1: off)")
	fs.IntVar(&o.BatchCPUs, "batch-cpus", 0, "batch-isolation only: Config.BatchCPUs, the batch lane's CPU governor (0: the default, half the CPUs and at least one; -1: off; 1 or more: at most that many computing batch pieces at once)")
	fs.Float64Var(&o.BatchCPUShare, "batch-cpu-share", 0, "batch-isolation only: Config.BatchCPUShare, the batch pacer's share of wall time for computing batch pieces while interactive work is about (0: the default, 0.1; -1, or any other value outside 0 to 1: off)")
	fs.StringVar(&o.BatchThreads, "batch-threads", "", "batch-isolation only: Config.BatchThreadPolicy; idle (Linux) runs the batch lane's computing pieces on SCHED_IDLE threads, and raises GOMAXPROCS by the governor's width (--batch-cpus, pinned at its default for the Ps before when 0) for them to sit on (empty: the default, normal threads)")
	fs.DurationVar(&o.SQLiteBatchHold, "sqlite-batch-hold", 0, "SQLite only: Region.SQLiteBatchHold, how long the writer may hold a batch-lane transaction open while interactive work is in flight (0: the default, 10ms; negative: off)")
	fs.IntVar(&o.SQLiteGapCheckpoint, "sqlite-gap-checkpoint", 0, "SQLite only: Region.SQLiteGapCheckpoint, the WAL frames at which the store checkpoints between transactions while no interactive work is in flight (0: the default, 1,000; negative: off, SQLite checkpoints inside a commit at 1,000)")
	fs.Int64Var(&o.SQLiteReadMmapSize, "sqlite-read-mmap", 0, "SQLite only: Region.SQLiteReadMmapSize, the bytes of the database file each read connection memory-maps (PRAGMA mmap_size; 0: off, the readers pread)")
	fs.IntVar(&o.SQLiteWriterNice, "sqlite-writer-nice", 0, "SQLite only: Region.SQLiteWriterNice, lock the writer to one OS thread of this nice (-20 to 19; negative needs CAP_SYS_NICE; Linux; 0: off)")
	gapBeside := fs.Bool("sqlite-gap-checkpoint-beside", true, "SQLite only: run the gap checkpoints (--sqlite-gap-checkpoint) on a connection and goroutine of their own beside the writer (the default); false runs them on the writer's connection (Region.SQLiteGapCheckpointOnWriter)")
	fs.DurationVar(&o.BatchYieldMax, "batch-yield-max", 0, "batch-isolation and upstreams only: Config.BatchYieldMax, the yield gate's longest hold of one piece of computing batch work (0: the default, off; negative: off; try 100ms)")
	// A real provider is remote: the simulators' CPU in the bench's process
	// competed with the interactive reviews inside one Go scheduler
	// (docs/benchmarks.md, "Session 24 (s24h1)").
	fs.StringVar(&o.Sim, "sim", bench.SimChild, "batch-isolation and batch-floor only: where the LLM and batch simulators run: child (a child process of this executable on loopback, ended with the run) or in (the bench's own process, as before session 24)")
	fs.StringVar(&o.BatchNode, "batch-node", bench.BatchNodeInProcess, "batch-isolation only: where the batch lane runs: in (the bench's one node serves both lanes) or process (a batch-only node in a child process of this executable on the same store, at --batch-nice; the bench's node serves the interactive lane only)")
	fs.StringVar(&o.TraceTail, "trace-tail", "", "batch-isolation only: write a per-review and per-event timeline (stage spans, simulator requests, manifests, 10 ms CPU/GC/commit/OS-run-queue samples) to `FILE` (FILE.k for run k of --runs) and add tail_* figures: what the slowest in-sweep reviews waited for. Costs CPU: for attribution, not headline runs")
	fs.StringVar(&o.LockProfile, "lock-profile", "", "batch-isolation only: record Go's block and mutex profiles (every wait on a Go mutex, channel or select, including the default SQLite driver's own locks) from the baseline's start and write them to `DIR` at the end of the baseline (block.baseline.pb.gz, mutex.baseline.pb.gz) and of the sweep (block.sweep-end.pb.gz, ...; the sweep's own: go tool pprof -base block.baseline.pb.gz block.sweep-end.pb.gz), DIR/k for run k of --runs. Costs CPU: for attribution, not headline runs")
	fs.StringVar(&o.ExecTrace, "exec-trace", "", "batch-isolation only: write a runtime/trace (go tool trace) of the baseline phase and the sweep's first 25 s to `FILE` (FILE.k for run k of --runs), with every interactive review's and stage's ids and times logged on the goroutines that served them. Costs CPU: for attribution, not headline runs")
	// The simulators stand for a remote provider, whose answers do not
	// wait for this machine's cores (docs/benchmarks.md, "Session 29
	// (s29h1)").
	fs.IntVar(&o.SimNice, "sim-nice", 0, "batch-isolation with --sim child: the simulator child's nice, -20 to 0 (Linux, as root or with CAP_SYS_NICE; refused, the run goes on at the bench's priority and says so; 0, the default, leaves it at the bench's priority)")
	// The batch simulator stands for a remote provider's batch API: in the
	// one simulator child its sweep work took this machine's cores from
	// the interactive reviews (docs/benchmarks.md, "Session 42 (s42h2)").
	fs.StringVar(&o.BatchSim, "batch-sim", bench.BatchSimShared, "batch-isolation and batch-floor with --sim child: where the batch simulator runs: shared (the default: the one simulator child, beside the LLM simulator, at --sim-nice) or idle (a child process of its own whose every thread is on SCHED_IDLE, Linux: it gets a core only when nothing else wants one; the LLM simulator stays in the normal child; refused or elsewhere, the run goes on with it at the bench's priority and says so)")
	// The floor under batch-isolation's ratio: CPU that is not ratelane's
	// at the sweep phase's rate (docs/benchmarks.md, "Session 32 (s32h2)").
	fs.Float64Var(&o.BurnChild, "burn-child", 0.04, "batch-floor only: CPU seconds per second a burner child process burns in every other window, CPU that is not ratelane's on the same cores (the default: the simulator child's share of the 10,000-file sweep phase, session 32; the whole phase's CPU beyond the interactive reviews was 0.23; 0: none)")
	fs.Float64Var(&o.BurnBench, "burn-bench", 0, "batch-floor only: CPU seconds per second burner goroutines in the bench's own process burn in the same windows (a stand-in for the sweep's CPU in ratelane's process; 0: none)")
	fs.DurationVar(&o.BurnPiece, "burn-piece", 0, "batch-floor only: the longest spin of the --burn-bench burner's goroutines before they yield their P (runtime.Gosched); the same CPU per second in shorter run slices (0: the default, 2ms pieces, yielding only by sleeping)")
	// The batch lane on idle threads, piloted on the floor
	// (docs/benchmarks.md, "Session 36 (s36h1)").
	fs.IntVar(&o.BurnWorkers, "burn-workers", 0, "batch-floor only: goroutines the --burn-bench burner spreads its rate over (0: GOMAXPROCS)")
	fs.BoolVar(&o.BurnIdle, "burn-idle", false, "batch-floor only: run the --burn-bench burner's goroutines locked to SCHED_IDLE threads (Linux): the kernel gives them a core only when no normal thread wants one; give the process spare Ps (GOMAXPROCS = cores + --burn-workers), as each keeps its P while starved")
	// The device's floor under the interactive commit, without SQLite or
	// ratelane's CPU (docs/benchmarks.md, "Session 34: the merge (lead)").
	fs.Float64Var(&o.IOFloorRate, "io-rate", 0, "io-floor only: the interactive writer's mean commits per second, Poisson arrivals (0: the default, 23, the batch-isolation bench's interactive commit rate under the sweep)")
	fs.IntVar(&o.IOFloorPages, "io-pages", 0, "io-floor only: pages (4 KiB) each interactive commit appends before its fdatasync (0: the default, 10)")
	fs.Float64Var(&o.IOFloorBatchPages, "io-batch-pages", 0, "io-floor only: pages per second the synthetic batch writer appends (0: the default, 720)")
	fs.Float64Var(&o.IOFloorBatchSyncs, "io-batch-syncs", 0, "io-floor only: fdatasyncs per second of the synthetic batch writer (0: the default, 60)")
	fs.StringVar(&o.IOFloorReplay, "io-replay", "", "io-floor only: a writer timeline to replay as I/O in an arm of its own: the `FILE` RATELANE_WRITESTATS names in a -tags cpulabels build's batch-isolation run (its WALTx lines)")
	fs.StringVar(&o.IOFloorReplayPhase, "io-replay-phase", "", "io-floor with --io-replay: the recorded phase to replay (default sweep; all for every phase)")
	fs.Float64Var(&o.IOFloorBurnShare, "io-burn-share", 0, "io-floor only: the share of each core the CPU burst arms spin, one goroutine per GOMAXPROCS (0: the default, 0.25)")
	var ioBurnPieces string
	fs.StringVar(&ioBurnPieces, "io-burn-pieces", "", "io-floor only: comma-separated burst lengths, one CPU burst arm each (default 5ms,500us; none: no burst arm)")
	// The sweep's presence apart from its work (docs/benchmarks.md,
	// "Session 45 (s45h2)").
	fs.StringVar(&o.SweepWork, "sweep-work", bench.SweepWorkFull, "batch-isolation only: what the batch lane does with the sweep: full (works it to the end: sent to the batch simulator, aggregated, published) or intake (its manifests go in as with full, but the bench's node serves the interactive lane alone and no batch-lane work happens: the 10,000 items stay queued, the sweep phase lasts the baseline's window from the last manifest accepted, sweep_work_intake is 1; not with --batch-node process)")
	fs.IntVar(&o.BatchNice, "batch-nice", 10, "batch-isolation with --batch-node process: the batch node's nice, 0 to 19 (Linux; 0 leaves it at the bench's priority)")
	var mixes string
	var verbose bool
	fs.StringVar(&mixes, "mix", "", "upstreams only: run just these mixes (comma-separated, e.g. issue,sliding)")
	fs.DurationVar(&o.Phase, "phase", bench.DefaultPhase, "upstreams only: start every run this far into the upstream simulator's second, 0 to 999ms (default: a single run at 0, run k of --runs N at k/N of a second)")
	fs.BoolVar(&verbose, "verbose", false, "upstreams only: print each mix's accepted/refused timeline to stderr")
	// The profiles cover the whole process: in the http-* workloads the
	// API server and its simulated clients run in it together.
	var cpuProfile, memProfile string
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to `FILE` (go tool pprof)")
	fs.StringVar(&memProfile, "memprofile", "", "write an allocation profile (allocs: every allocation since start) to `FILE` at the end")
	// The workload may come before or after the flags.
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageError{err.Error()}
	}
	o.SQLiteGapCheckpointOnWriter = !*gapBeside
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if name == "" {
		fs.Usage()
		return usageError{"name a workload"}
	}
	if mixes != "" {
		var known []string
		for _, m := range bench.Upstreams(false).Mixes {
			known = append(known, m.Name)
		}
		for _, m := range strings.Split(mixes, ",") {
			if !slices.Contains(known, m) {
				return usageError{fmt.Sprintf("--mix %q: not an upstreams mix (want some of %s)", m, strings.Join(known, ","))}
			}
			o.Mixes = append(o.Mixes, m)
		}
	}
	if verbose {
		o.Trace = stderr
	}
	if o.Sim != bench.SimInProcess && o.Sim != bench.SimChild {
		return usageError{fmt.Sprintf("--sim %q: want %s or %s", o.Sim, bench.SimInProcess, bench.SimChild)}
	}
	if o.BatchSim != bench.BatchSimShared && o.BatchSim != bench.BatchSimIdle {
		return usageError{fmt.Sprintf("--batch-sim %q: want %s or %s", o.BatchSim, bench.BatchSimShared, bench.BatchSimIdle)}
	}
	if o.BatchSim == bench.BatchSimIdle && o.Sim != bench.SimChild {
		return usageError{fmt.Sprintf("--batch-sim %s: only with --sim %s (the simulators in child processes)", bench.BatchSimIdle, bench.SimChild)}
	}
	if o.BatchNode != bench.BatchNodeInProcess && o.BatchNode != bench.BatchNodeProcess {
		return usageError{fmt.Sprintf("--batch-node %q: want %s or %s", o.BatchNode, bench.BatchNodeInProcess, bench.BatchNodeProcess)}
	}
	switch o.SweepWork {
	case bench.SweepWorkFull:
	case bench.SweepWorkIntake:
		if o.BatchNode == bench.BatchNodeProcess {
			return usageError{fmt.Sprintf("--sweep-work %s: not with --batch-node %s (its batch node would work the sweep)", bench.SweepWorkIntake, bench.BatchNodeProcess)}
		}
	default:
		return usageError{fmt.Sprintf("--sweep-work %q: want %s or %s", o.SweepWork, bench.SweepWorkFull, bench.SweepWorkIntake)}
	}
	if o.BatchNice < 0 || o.BatchNice > 19 {
		return usageError{fmt.Sprintf("--batch-nice %d: want 0 to 19 (a lower priority than the bench's, or the same)", o.BatchNice)}
	}
	if o.SimNice < -20 || o.SimNice > 0 {
		return usageError{fmt.Sprintf("--sim-nice %d: want -20 to 0 (a higher priority than the bench's, or the same)", o.SimNice)}
	}
	if o.BurnChild < 0 || o.BurnBench < 0 {
		return usageError{fmt.Sprintf("--burn-child %g --burn-bench %g: want 0 or more CPU seconds per second", o.BurnChild, o.BurnBench)}
	}
	switch o.BatchThreads {
	case "":
	case engine.BatchThreadsIdle:
		if o.BatchNode != bench.BatchNodeInProcess {
			return usageError{"--batch-threads idle: only with --batch-node in"}
		}
		procs, width, ok := engine.IdleThreadProcs(runtime.GOMAXPROCS(0), o.BatchCPUs, 1)
		if !ok {
			return usageError{"--batch-threads idle needs the CPU governor on (--batch-cpus 0 or more)"}
		}
		// Spare Ps for the idle threads' pieces, the governor's width
		// pinned so that it does not follow them.
		o.BatchCPUs = width
		runtime.GOMAXPROCS(procs)
	default:
		return usageError{fmt.Sprintf("--batch-threads %q: want idle or nothing", o.BatchThreads)}
	}
	if o.BurnWorkers < 0 {
		return usageError{fmt.Sprintf("--burn-workers %d: want 0 or more", o.BurnWorkers)}
	}
	if o.BurnPiece < 0 {
		return usageError{fmt.Sprintf("--burn-piece %v: want 0 or more", o.BurnPiece)}
	}
	if o.IOFloorRate < 0 || o.IOFloorPages < 0 || o.IOFloorBatchPages < 0 || o.IOFloorBatchSyncs < 0 || o.IOFloorBurnShare < 0 || o.IOFloorBurnShare > 1 {
		return usageError{"--io-rate, --io-pages, --io-batch-pages, --io-batch-syncs: want 0 or more; --io-burn-share: want 0 to 1"}
	}
	switch ioBurnPieces {
	case "":
	case "none":
		o.IOFloorBurnPieces = []time.Duration{}
	default:
		for _, p := range strings.Split(ioBurnPieces, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(p))
			if err != nil || d <= 0 {
				return usageError{fmt.Sprintf("--io-burn-pieces %q: want positive durations such as 5ms,500us", ioBurnPieces)}
			}
			o.IOFloorBurnPieces = append(o.IOFloorBurnPieces, d)
		}
	}
	if o.Runs < 1 {
		return usageError{fmt.Sprintf("--runs %d: want 1 or more", o.Runs)}
	}
	fs.Visit(func(f *flag.Flag) { o.PhaseFixed = o.PhaseFixed || f.Name == "phase" })
	if err := upstream.CheckPhase(o.Phase); err != nil {
		return usageError{"--phase: " + err.Error()}
	}
	names := []string{name}
	if name == "all" {
		names = bench.Workloads
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return usageError{fmt.Sprintf("--cpuprofile: %v", err)}
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if memProfile != "" {
		f, err := os.Create(memProfile)
		if err != nil {
			return usageError{fmt.Sprintf("--memprofile: %v", err)}
		}
		defer func() {
			runtime.GC() // up-to-date statistics
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintf(stderr, "ratelane: --memprofile: %v\n", err)
			}
			f.Close()
		}()
	}
	var results []bench.Result
	var failed []error
	for _, n := range names {
		if !asJSON {
			fmt.Fprintf(stderr, "running %s...\n", n)
		}
		r, err := bench.Run(ctx, n, o)
		if err != nil {
			var ue error = err
			if r.Workload == "" {
				ue = usageError{err.Error()}
			}
			if name != "all" || ctx.Err() != nil {
				return fmt.Errorf("%s: %w", n, ue)
			}
			// One failed workload of `all` (a bound too short, say) must
			// not throw away the minutes of figures the others took: say
			// so, go on, print what was measured, and exit non-zero.
			fmt.Fprintf(stderr, "ratelane bench: %s: %v\n", n, ue)
			failed = append(failed, fmt.Errorf("%s: %w", n, ue))
			continue
		}
		results = append(results, r)
	}
	var err error
	if asJSON {
		err = bench.WriteJSON(stdout, results, name == "all")
	} else {
		err = bench.WriteTable(stdout, results)
	}
	return errors.Join(append(failed, err)...)
}

// benchMetricsHelp lists the stable JSON metric names of each workload
// (docs/benchmarks.md describes them).
const benchMetricsHelp = `
JSON metrics (one object per workload; under its name with "all"):
  throughput  jobs_per_second insert_jobs_per_second enqueue_to_start_p50_ms enqueue_to_start_p99_ms
  paced       goodput goodput_min rate_limited_share rate_limited_share_after_first_second
              duplicates makespan_seconds makespan_ratio
  fairness    jain_index heavy_share light_share_min backlogged_starts
  flood       interactive_p50_ms interactive_p99_ms interactive_max_ms goodput rate_limited_share duplicates
  adapt       goodput rate_limited_share converge_seconds goodput_phaseN rate_limited_share_phaseN
              converge_seconds_changeN
  upstreams   makespan_ratio rate_limited_share duplicates lost goodput_min start_phase_ms
              makespan_ratio_issue makespan_seconds_issue ideal_seconds_issue rate_limited_share_issue
              duplicates_issue lost_issue goodput_min_issue
              makespan_ratio_sliding makespan_seconds_sliding ideal_seconds_sliding rate_limited_share_sliding
              duplicates_sliding lost_sliding goodput_min_sliding
              makespan_ratio_fixed makespan_seconds_fixed ideal_seconds_fixed rate_limited_share_fixed
              duplicates_fixed lost_fixed goodput_min_fixed
              makespan_ratio_rising makespan_seconds_rising ideal_seconds_rising rate_limited_share_rising
              duplicates_rising lost_rising goodput_min_rising
              makespan_ratio_many makespan_seconds_many ideal_seconds_many rate_limited_share_many
              duplicates_many lost_many goodput_min_many
              makespan_ratio_unforeseen makespan_seconds_unforeseen ideal_seconds_unforeseen
              rate_limited_share_unforeseen duplicates_unforeseen lost_unforeseen goodput_min_unforeseen
              goodput_issue_sliding-date finish_seconds_issue_sliding-date ideal_seconds_issue_sliding-date
              refused_issue_sliding-date goodput_issue_half-none finish_seconds_issue_half-none
              ideal_seconds_issue_half-none refused_issue_half-none goodput_issue_halving-503
              finish_seconds_issue_halving-503 ideal_seconds_issue_halving-503 refused_issue_halving-503
  http-enqueue requests_per_second p50_ms p99_ms
  http-batch  jobs_per_second batch_p50_ms batch_p99_ms
  http-workers jobs_per_second lease_p99_ms complete_p99_ms
  batch-isolation sweep_files sweep_seconds interactive_rate baseline_reviews baseline_p50_ms
              baseline_p99_ms sweep_reviews sweep_p50_ms sweep_p99_ms p99_ratio
              warmup_seconds (a_warm-up_in_no_figure) baseline_before_reviews baseline_after_reviews
              baseline_before_p99_ms baseline_after_p99_ms baseline_drift_p99_ratio (baseline=before+after)
              baseline_commits_per_review sweep_commits_per_file sweep_writes_per_file
              sweep_interactive_writes sweep_interactive_behind_max sweep_interactive_behind_over_1
              sweep_interactive_write_wait_p99_ms sweep_interactive_write_wait_ms_per_review (SQLite)
              baseline_cpu_seconds sweep_cpu_seconds sweep_cpu_ms_per_file gomaxprocs sweep_budget_pieces
              stage_run_sweep_mean_ms stage_aggregate_wait_sweep_p99_ms
              p95_ratio p90_ratio pooled_runs pooled_baseline_reviews pooled_sweep_reviews
              pooled_baseline_p99_ms pooled_sweep_p99_ms pooled_p99_ratio pooled_p95_ratio pooled_p90_ratio
              in_sweep_reviews in_sweep_p99_ms in_sweep_p99_ratio in_sweep_p95_ratio pooled_in_sweep_reviews
              pooled_in_sweep_p99_ratio pooled_in_sweep_p95_ratio pooled_in_sweep_p90_ratio
              pooled_in_sweep_p99_ratio_lo pooled_in_sweep_p99_ratio_hi (90-percent-block-bootstrap,2s-blocks)
              pooled_in_sweep_p95_ratio_lo pooled_in_sweep_p95_ratio_hi
              pooled_in_sweep_p99_ratio_iid_lo pooled_in_sweep_p99_ratio_iid_hi (single-review-bootstrap)
              in_sweep_p99_delta_ms pooled_in_sweep_p99_delta_ms pooled_in_sweep_p99_delta_ms_lo
              pooled_in_sweep_p99_delta_ms_hi (in-sweep_p99_less_baseline_p99) sweep_work_intake
              sweep_intake_seconds sweep_items_pending_at_end sweep_items_succeeded_at_end
              in_sweep_after_intake_reviews in_sweep_after_intake_p99_ms
              baseline_host_steal_seconds sweep_host_steal_seconds after_host_steal_seconds
              baseline_host_iowait_seconds sweep_host_iowait_seconds after_host_iowait_seconds (Linux)
              sim_child_nice_asked sim_child_nice_min sim_child_nice_max (Linux)
              baseline_sim_cpu_seconds sweep_sim_cpu_seconds (the-simulator-child,the-LLM-simulator's-alone-with---batch-sim-idle)
              (--batch-sim-idle,Linux:baseline_batch_sim_cpu_seconds,sweep_batch_sim_cpu_seconds,batch_sim_threads,batch_sim_idle_threads,sweep_batch_sim_runqueue_wait_ms)
              baseline_gc_cycles_per_second sweep_gc_cycles_per_second after_gc_cycles_per_second
              baseline_gc_cpu_per_second sweep_gc_cpu_per_second baseline_gc_assist_cpu_per_second
              sweep_gc_assist_cpu_per_second after_gc_assist_cpu_per_second baseline_sched_latency_p99_ms
              sweep_sched_latency_p99_ms after_sched_latency_p99_ms
              (sweep_÷_baseline,where-the-baseline's-is-above-0:sweep_gc_cycles_per_second_ratio,sweep_gc_assist_cpu_per_second_ratio,sweep_sched_latency_p99_ms_ratio)
  batch-floor burn_child_asked burn_bench_asked burn_piece_ms baseline_reviews burn_reviews baseline_p99_ms
              burn_p99_ms burn_p99_ratio burn_p95_ratio burn_p90_ratio burn_p50_ratio baseline_burn_child_cpu_per_second
              burn_burn_child_cpu_per_second baseline_bench_cpu_per_second burn_bench_cpu_per_second burn_workers burn_idle gomaxprocs
              baseline_sim_cpu_per_second burn_sim_cpu_per_second pooled_in_sweep_p99_ratio
              pooled_in_sweep_p99_ratio_lo pooled_in_sweep_p99_ratio_hi (burner-on-as-sweep)
  io-floor    interactive_rate_asked interactive_pages window_seconds synthetic_pages_asked synthetic_syncs_asked
              burn_share_asked alone_windows alone_commits alone_commits_per_second alone_p50_ms alone_p99_ms
              alone_p999_ms alone_late_p99_ms synthetic_windows synthetic_commits synthetic_commits_per_second
              synthetic_p50_ms synthetic_p99_ms synthetic_p999_ms synthetic_late_p99_ms synthetic_p50_ratio
              synthetic_p99_ratio synthetic_p999_ratio synthetic_p99_ratio_lo synthetic_p99_ratio_hi
              synthetic_batch_pages_per_second synthetic_batch_syncs_per_second burn5000us_windows
              burn5000us_commits burn5000us_commits_per_second burn5000us_p50_ms burn5000us_p99_ms
              burn5000us_p999_ms burn5000us_late_p99_ms burn5000us_p50_ratio burn5000us_p99_ratio
              burn5000us_p999_ratio burn5000us_p99_ratio_lo burn5000us_p99_ratio_hi burn5000us_burn_cpu_per_second
              burn500us_windows burn500us_commits burn500us_commits_per_second burn500us_p50_ms burn500us_p99_ms
              burn500us_p999_ms burn500us_late_p99_ms burn500us_p50_ratio burn500us_p99_ratio burn500us_p999_ratio
              burn500us_p99_ratio_lo burn500us_p99_ratio_hi burn500us_burn_cpu_per_second
              (burnNus:one-arm-per---io-burn-pieces)
              (Linux,/proc/diskstats-of-the-files'-device:ARM_device_writes_per_second,ARM_device_ms_per_write,ARM_device_flushes_per_second,ARM_device_ms_per_flush)
              (replay_*:the-same-figures-with---io-replay,+replay_checkpoints,replay_checkpoint_pages,replay_recorded_seconds,replay_recorded_pages_per_second,replay_recorded_syncs_per_second,replay_recorded_checkpoints)
`
