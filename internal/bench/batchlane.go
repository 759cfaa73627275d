package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/review"
)

// BatchLanePlan sizes the batch-isolation workload.
type BatchLanePlan struct {
	// Files is the sweep's size: one single-file review (one batch item)
	// per file, sent as manifests of PerManifest reviews.
	Files, PerManifest int
	// Rate is the interactive reviews' arrival rate (per second); Window
	// how long the baseline phase runs, and the least the sweep phase runs.
	Rate   float64
	Window time.Duration
	// Warmup is how long interactive reviews run at Rate before the
	// baseline, measured by no figure: the phase's first second held
	// the slowest baseline reviews of a run (the first statements, the
	// connections, the heap's growth; docs/benchmarks.md, "Session 32
	// (s32h1)"), which no later phase pays.
	Warmup time.Duration
	// After is how long the second baseline window runs, once every
	// review of the sweep is published: the baseline figures pool both
	// windows, so a run's baseline and sweep phases see the machine of
	// the same stretch of time.
	After time.Duration
	// ProcessFor is how long the simulator takes to process one provider
	// batch (its items finish evenly over it).
	ProcessFor time.Duration
}

// BatchLane returns the plan of the batch-isolation workload: a sweep of
// 10,000 files (smoke: 300) while interactive reviews arrive at 10/s.
func BatchLane(smoke bool) BatchLanePlan {
	if smoke {
		return BatchLanePlan{Files: 300, PerManifest: 100, Rate: 10, Window: 3 * time.Second, Warmup: 500 * time.Millisecond,
			After: time.Second, ProcessFor: time.Second}
	}
	return BatchLanePlan{Files: 10_000, PerManifest: 1_000, Rate: 10, Window: 20 * time.Second, Warmup: 2 * time.Second,
		After: 20 * time.Second, ProcessFor: 5 * time.Second}
}

// The batch-isolation workload's sweep modes (Options.SweepWork).
const (
	// SweepWorkFull works the sweep to the end: every item sent to the
	// batch simulator, every review aggregated and published (the default).
	SweepWorkFull = "full"
	// SweepWorkIntake takes the sweep's manifests in and does no batch-lane
	// work: its 10,000 reviews and items stay queued in the store through
	// the sweep phase and the window after it.
	SweepWorkIntake = "intake"
)

// sweepIntakeOnly reports whether o asks for SweepWorkIntake, and refuses
// what it cannot run with: an unknown mode, and a batch node in a process
// of its own (BatchNodeProcess), which would work the sweep.
func sweepIntakeOnly(o Options) (bool, error) {
	switch o.SweepWork {
	case "", SweepWorkFull:
		return false, nil
	case SweepWorkIntake:
		if o.BatchNode == BatchNodeProcess {
			return false, fmt.Errorf("sweep work %s: not with batch node %s (its node would work the sweep)", SweepWorkIntake, BatchNodeProcess)
		}
		return true, nil
	}
	return false, fmt.Errorf("unknown sweep work mode %q (want %s or %s)", o.SweepWork, SweepWorkFull, SweepWorkIntake)
}

// fileDiff is a one-file unified diff, file n of a sweep or an
// interactive review.
func fileDiff(prefix string, n int) []byte {
	return fmt.Appendf(nil, "diff --git a/%[1]s/f%[2]d.go b/%[1]s/f%[2]d.go\nnew file mode 100644\n--- /dev/null\n+++ b/%[1]s/f%[2]d.go\n"+
		"@@ -0,0 +1,3 @@\n+package %[1]s\n+// handles case %[2]d\n+func F%[2]d() {}\n", prefix, n)
}

// runBatchLane measures what a batch-lane sweep does to interactive
// reviews. One region has two provider profiles of one account (one
// model, one RequestsKey): "interactive" on the LLM simulator of
// internal/upstream and "batch" on the batch simulator of
// internal/upstream/batchsim. Interactive reviews arrive at a steady rate
// and each one's latency (Submit to published) is measured; first alone
// (baseline), then while a sweep goes through the batch lane, from its
// first manifest until every review of the sweep is published (and at
// least the baseline's window), and alone again once it is (after). A
// warm-up before the baseline is left out of every figure. The review plug-in, the engine and the
// store are the real ones; only the providers are simulated.
//
// With SweepWorkIntake the sweep's manifests go in as always but the
// Client serves the interactive lane alone, so no batch-lane work
// happens: the sweep phase lasts plan.Window from the last manifest
// accepted, and every review of that phase is in-sweep.
func runBatchLane(ctx context.Context, e *env) (Result, error) {
	plan := BatchLane(e.opts.Smoke)
	intake, err := sweepIntakeOnly(e.opts)
	if err != nil {
		return Result{}, err
	}
	// The simulators (startSims); childCPU reads the child's CPU per phase,
	// batchSimCPU the batch simulator's own child's (BatchSimIdle).
	sm, err := startSims(e, plan.ProcessFor)
	if err != nil {
		return Result{}, err
	}
	defer sm.end()
	llmURL, batchURL, child, childCPU, batchSimCPU := sm.llm, sm.batch, sm.child, sm.cpu, sm.batchCPU
	if bc := sm.batchChild; bc != nil {
		if idle, all, ok := bc.idleThreads(); !ok || idle != all {
			batchSimIdleRefused.Do(func() {
				fmt.Fprintf(os.Stderr, "ratelane bench: the batch simulator's child is not on SCHED_IDLE (%s; %d of %d threads idle); measuring without it\n", bc.idleNote, idle, all)
			})
		}
	}
	if child != nil {
		if lo, hi, ok := child.nices(); e.opts.SimNice != 0 && (!ok || lo != e.opts.SimNice || hi != e.opts.SimNice) {
			simNiceRefused.Do(func() {
				fmt.Fprintf(os.Stderr, "ratelane bench: the simulator child runs at the bench's priority (%s); measuring without it\n", child.niceNote)
			})
		}
	}
	// --trace-tail: a per-review and per-event timeline (tailtrace.go).
	var tr *tailTrace
	if e.opts.TraceTail != "" {
		tr = newTailTrace(e.opts.TraceTail)
	}
	// --exec-trace: a runtime/trace of the sweep's first stretch (exectrace.go).
	var xt *execTrace
	if e.opts.ExecTrace != "" {
		xt = &execTrace{path: e.opts.ExecTrace}
		defer xt.finish()
	}
	// --lock-profile: block and mutex profiles per phase (lockprofile.go).
	var lp *lockProfile
	if e.opts.LockProfile != "" {
		lp = &lockProfile{dir: e.opts.LockProfile}
		defer lp.stop()
	}
	rv, err := batchLaneReviews(llmURL, batchURL, tr)
	if err != nil {
		return Result{}, err
	}
	reg := prometheus.NewRegistry()
	// The process's CPU seconds (process_cpu_seconds_total) for the
	// phases' CPU figures; absent where the collector cannot read them.
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pubs := newPublications(publishedFallback)
	plugins := []ratelane.Plugin{rv, pubs}
	if tr != nil {
		plugins = append(plugins, tr)
	}
	if xt != nil {
		plugins = append(plugins, xt)
	}
	cfg := ratelane.Config{Workers: 16, Plugins: plugins, Registry: reg, BatchPieces: e.opts.BatchPieces, BatchCPUs: e.opts.BatchCPUs,
		BatchCPUShare: e.opts.BatchCPUShare, BatchYieldMax: e.opts.BatchYieldMax, BatchThreadPolicy: e.opts.BatchThreads, Regions: []ratelane.Region{e.region()}}
	// The batch lane in a node of its own (Options.BatchNode): this
	// Client serves the interactive lane, a batch-only Client in a child
	// process at a lower priority serves the batch lane on the same store.
	var node *batchNode
	nodeCPU := func() (float64, bool) { return 0, false }
	switch e.opts.BatchNode {
	case "", BatchNodeInProcess:
	case BatchNodeProcess:
		cfg.Lanes = []ratelane.Lane{ratelane.LaneInteractive}
	default:
		return Result{}, fmt.Errorf("unknown batch node mode %q (want %s or %s)", e.opts.BatchNode, BatchNodeInProcess, BatchNodeProcess)
	}
	if intake {
		// No node serves the batch lane: the sweep's jobs and items wait
		// in the store, as a backlog nobody works would.
		cfg.Lanes = []ratelane.Lane{ratelane.LaneInteractive}
	}
	c, err := e.client(ctx, cfg) // migrates the store before the batch node opens it
	if err != nil {
		return Result{}, err
	}
	if e.opts.BatchNode == BatchNodeProcess {
		node, err = startBatchNode(batchNodeConfig{Region: cfg.Regions[0], DataDir: e.dir, LLM: llmURL, Batch: batchURL,
			BatchPieces: e.opts.BatchPieces, BatchCPUs: e.opts.BatchCPUs, BatchYieldMax: e.opts.BatchYieldMax}, e.opts.BatchNice)
		if err != nil {
			return Result{}, err
		}
		defer node.close()
		nodeCPU = node.cpuSeconds
	}
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	if tr != nil {
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		go tr.sample(sctx, childCPU)
	}

	// ir submits and times the interactive reviews; its reads count the
	// bench's own store reads waiting for them, per phase below.
	ir := &interactiveReviews{ctx: ctx, rv: rv, c: c, pubs: pubs, tr: tr, xt: xt}
	// interactive runs reviews at plan.Rate until stop is closed and at
	// least window has passed, and returns their latencies and, at the
	// same index, the instants they were submitted.
	interactive := func(phase string, window time.Duration, stop <-chan struct{}) ([]time.Duration, []time.Time, error) {
		var (
			lats []time.Duration
			ats  []time.Time
		)
		tick := time.NewTicker(time.Duration(float64(time.Second) / plan.Rate))
		defer tick.Stop()
		end := time.Now().Add(window)
		for {
			if err := ir.next(tick.C); err != nil {
				return nil, nil, err
			}
			if time.Now().After(end) {
				select {
				case <-stop:
					ir.wait()
					return lats, ats, ir.failures()
				default:
				}
			}
			ir.submit(phase, func(start time.Time, lat time.Duration) {
				lats = append(lats, lat)
				ats = append(ats, start)
			})
		}
	}

	closed := make(chan struct{})
	close(closed)
	cpulabel.SetPhase("warmup")
	if _, _, err := interactive("warmup", plan.Warmup, closed); err != nil {
		return Result{}, fmt.Errorf("warm-up: %w", err)
	}
	ir.reads.Store(0)
	host0 := readHost()
	w0 := storeWrites(reg)
	c0, _ := childCPU()
	n0, _ := nodeCPU()
	bs0, _ := batchSimCPU()
	// The OS scheduler's view of both processes per phase (procsched.go):
	// their threads' run-queue wait, which Go's scheduler latencies miss.
	ps0, ks0, t0 := readProcSched(os.Getpid()), childSched(child), time.Now()
	bks0 := childSched(sm.batchChild)
	cpulabel.SetPhase("baseline")
	if err := xt.start(); err != nil {
		return Result{}, err
	}
	if err := lp.start(); err != nil {
		return Result{}, err
	}
	baseSched := sampleSched()
	base, baseAt, err := interactive("baseline", plan.Window, closed)
	baseRun := baseSched()
	baseReads := ir.reads.Load()
	host1 := readHost()
	if err != nil {
		return Result{}, fmt.Errorf("baseline: %w", err)
	}
	if err := lp.write("baseline"); err != nil {
		return Result{}, err
	}

	// The sweep: its manifests go in from one goroutine while the
	// interactive reviews keep arriving; done closes when every review of
	// the sweep is final.
	w1 := storeWrites(reg)
	c1, _ := childCPU()
	n1, _ := nodeCPU()
	bs1, _ := batchSimCPU()
	ps1, ks1, t1 := readProcSched(os.Getpid()), childSched(child), time.Now()
	bks1 := childSched(sm.batchChild)
	done := make(chan struct{})
	var (
		sweepErr    error
		sweepTook   time.Duration
		sweepIntake time.Duration // first manifest to the last accepted
		intakeEnd   time.Time     // the last manifest accepted
		sweepEnd    time.Time
		published   int
		ids         []string
	)
	cpulabel.SetPhase("sweep")
	xt.phase("sweep")
	go func() {
		defer close(done)
		start := time.Now()
		for m := 0; m < plan.Files; m += plan.PerManifest {
			var rs []review.BatchReview
			for i := m; i < min(plan.Files, m+plan.PerManifest); i++ {
				rs = append(rs, review.BatchReview{Repo: "acme/mono", Change: "sweep", Diff: fileDiff("mono", i),
					Publish: review.Publish{Kind: "none"}})
			}
			at := time.Now()
			cpulabel.Set(cpulabel.BatchIntake)
			s, err := rv.SubmitBatch(ctx, review.BatchRequest{Region: "us", Provider: "batch", Reviews: rs})
			tr.event("manifest", at, time.Now())
			if err != nil {
				sweepErr = fmt.Errorf("sweep manifest %d: %w", m/plan.PerManifest, err)
				return
			}
			ids = append(ids, s.ID)
		}
		intakeEnd = time.Now()
		sweepIntake = intakeEnd.Sub(start)
		cpulabel.Set(cpulabel.BenchWait)
		if intake {
			// Nothing will work the sweep: its presence lasts a window.
			sweepErr = Sleep(ctx, plan.Window)
		} else {
			published, sweepErr = sweepDone(ctx, rv, ids, start)
		}
		sweepEnd = time.Now()
		sweepTook = sweepEnd.Sub(start)
		tr.event("sweep", start, sweepEnd)
	}()
	sweepSched := sampleSched()
	under, underAt, err := interactive("sweep", plan.Window, done)
	<-done
	if err := xt.finish(); err != nil {
		return Result{}, fmt.Errorf("--exec-trace: %w", err)
	}
	// The sweep phase lasts at least plan.Window, and a sweep often ends
	// before it (7-11 s of 20 on a 2-core machine): the reviews submitted
	// after its batches were done see no sweep, and would dilute the
	// sweep's figures. inSweep are those submitted while it ran.
	var (
		inSweep   []time.Duration
		inSweepAt []time.Time
	)
	for i, at := range underAt {
		if at.Before(sweepEnd) {
			inSweep, inSweepAt = append(inSweep, under[i]), append(inSweepAt, at)
		}
	}
	// Of them, those submitted once every manifest was in: the sweep's
	// rows without its intake's writes (with SweepWorkIntake, its
	// presence alone; with the default, its work too).
	var afterIntake []time.Duration
	for i, at := range inSweepAt {
		if !at.Before(intakeEnd) {
			afterIntake = append(afterIntake, inSweep[i])
		}
	}
	cpulabel.SetPhase("after")
	sweepRun := sweepSched()
	if err := lp.write("sweep-end"); err != nil {
		return Result{}, err
	}
	lp.stop()
	sweepReads := ir.reads.Load() - baseReads
	if err != nil {
		return Result{}, fmt.Errorf("under the sweep: %w", err)
	}
	if sweepErr != nil {
		return Result{}, sweepErr
	}
	if published != plan.Files && !intake {
		return Result{}, fmt.Errorf("the sweep's batches ended with %d of %d items succeeded", published, plan.Files)
	}
	// Every sweep review must be published too (the batch is done when its
	// items are; its reviews are aggregated and published after). Checked
	// every 100 ms: the listing scans the jobs table, and at WaitFor's
	// 5 ms it took two thirds of the 10,000-file run's CPU (a profile).
	// Validated ones too: a review aggregated but not yet published is
	// sweep work still queued for the writer (until session 20 the wait
	// ended with thousands of them left for the publication pool, which
	// a build that aggregates faster than it publishes hid).
	for !intake {
		if unpublishedReviews(ctx, c) == 0 {
			break
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			return Result{}, fmt.Errorf("sweep reviews left unpublished: %w", err)
		}
	}
	w2 := storeWrites(reg)
	c2, childOK := childCPU()
	n2, nodeOK := nodeCPU()
	bs2, batchSimOK := batchSimCPU()
	ps2, ks2, t2 := readProcSched(os.Getpid()), childSched(child), time.Now()
	bks2 := childSched(sm.batchChild)
	host2 := readHost()
	// The second baseline window: the machine after the sweep, for the
	// pooled baseline, and beside the first, the drift within the run.
	afterSched := sampleSched()
	after, afterAt, err := interactive("after", plan.After, closed)
	afterRun := afterSched()
	host3 := readHost()
	if err != nil {
		return Result{}, fmt.Errorf("after the sweep: %w", err)
	}
	// What became of the sweep's items, read from the store at the end:
	// in intake mode, proof that none was worked.
	left, err := sweepItems(ctx, rv, ids)
	if err != nil {
		return Result{}, fmt.Errorf("the sweep's items at the end: %w", err)
	}
	// Blocks for the block bootstrap (blockRatioInterval), taken before
	// Percentile sorts the latencies away from their submit times.
	blocks := map[string][][]time.Duration{
		"baseline": append(blocksOf(base, baseAt, reviewBlock), blocksOf(after, afterAt, reviewBlock)...),
		"in_sweep": blocksOf(inSweep, inSweepAt, reviewBlock),
	}
	// before is the first baseline window alone, the one every
	// per-review figure below divides by (the counters were read around
	// it); base is both windows, for the latencies.
	before := base
	base = append(slices.Clone(before), after...)

	bp50, bp99 := Percentile(base, 0.50), Percentile(base, 0.99)
	up50, up99 := Percentile(under, 0.50), Percentile(under, 0.99)
	b1p99, a1p99 := Percentile(before, 0.99), Percentile(after, 0.99)
	var r Result
	// Run pools every run's samples (addPooled): a p99 of one round's
	// 100-200 reviews is its 2nd or 3rd worst, and spreads 2.6-8.8 on one
	// binary (docs/benchmarks.md, "Session 24 (s24h1)").
	r.samples = map[string][]time.Duration{"baseline": base, "sweep": under, "in_sweep": inSweep}
	r.blocks = blocks
	r.add("sweep_files", float64(plan.Files), "files (one batch item each)")
	if intake {
		r.add("sweep_work_intake", 1, "the sweep was taken in and not worked (--sweep-work intake): no sweep-done check, no publication")
		r.add("sweep_seconds", sweepTook.Seconds(), "s (first manifest to the phase's end, a window after the last manifest)")
	} else {
		r.add("sweep_work_intake", 0, "the sweep was worked to the end (--sweep-work full)")
		r.add("sweep_seconds", sweepTook.Seconds(), "s (first manifest to every batch done)")
	}
	r.add("sweep_intake_seconds", sweepIntake.Seconds(), "s (first manifest to the last accepted)")
	r.add("sweep_items_pending_at_end", float64(left.Pending), "sweep items never sent to the provider, read from the store at the run's end")
	r.add("sweep_items_succeeded_at_end", float64(left.Succeeded), "sweep items whose result was recorded, read from the store at the run's end")
	r.add("interactive_rate", plan.Rate, "reviews/s")
	r.add("warmup_seconds", plan.Warmup.Seconds(), "s of interactive reviews before the baseline, in no figure")
	r.add("baseline_reviews", float64(len(base)), "reviews, both baseline windows (before the sweep and after it)")
	r.add("baseline_p50_ms", bp50, "ms (submit to published), both baseline windows")
	r.add("baseline_p99_ms", bp99, "ms, both baseline windows")
	r.add("baseline_before_reviews", float64(len(before)), "reviews, the baseline window before the sweep")
	r.add("baseline_after_reviews", float64(len(after)), "reviews, the baseline window after every sweep review was published")
	r.add("baseline_before_p99_ms", b1p99, "ms, the window before the sweep")
	r.add("baseline_after_p99_ms", a1p99, "ms, the window after it")
	r.add("baseline_drift_p99_ratio", a1p99/b1p99, "after ÷ before: how far the machine moved within the run")
	// Episode-robust figures beside the p99s, never instead of them: a
	// baseline window's p99 is its 2nd or 3rd slowest review, which one
	// stall episode of the machine sets (docs/benchmarks.md, "Session 40
	// (s40h1)").
	r.add("baseline_before_over_2x_median_reviews", float64(overMedian(before, 2)), "reviews over twice the window's median, the window before the sweep")
	r.add("baseline_after_over_2x_median_reviews", float64(overMedian(after, 2)), "reviews over twice the window's median, the window after it")
	bt, it := blockTrimmedQuantile(blocks["baseline"], 0.99, trimBlockShare), blockTrimmedQuantile(blocks["in_sweep"], 0.99, trimBlockShare)
	r.add("baseline_p99_trimmed_ms", bt, "ms, both baseline windows without their slowest 2 s blocks (one in ten): a figure one stall episode does not set")
	r.add("in_sweep_p99_trimmed_ms", it, "ms, the in-sweep reviews without their slowest 2 s blocks (one in ten)")
	r.add("in_sweep_p99_trimmed_ratio", it/bt, "in-sweep ÷ baseline, both block-trimmed (beside in_sweep_p99_ratio, not instead)")
	addHost(&r, "baseline", host0, host1)
	addHost(&r, "sweep", host1, host2)
	addHost(&r, "after", host2, host3)
	r.add("sweep_reviews", float64(len(under)), "reviews (during the sweep)")
	r.add("sweep_p50_ms", up50, "ms")
	r.add("sweep_p99_ms", up99, "ms")
	r.add("p99_ratio", up99/bp99, "sweep ÷ baseline (target < 1.1)")
	r.add("in_sweep_reviews", float64(len(inSweep)), "reviews submitted before the sweep's batches were done (intake: before the phase's end)")
	addVsBaseline(&r, []float64{0.99, 0.95}, base, inSweep, "", "in_sweep_", "in_sweep_", "reviews submitted while the sweep ran")
	// The additive shift beside the ratio: a ratio punishes a fast
	// baseline, and the sweep's cost reads as ms (docs/benchmarks.md,
	// "Session 44: the merge (lead)").
	r.add("in_sweep_p99_delta_ms", Percentile(inSweep, 0.99)-bp99, "ms, in-sweep p99 less the baseline's")
	r.add("in_sweep_after_intake_reviews", float64(len(afterIntake)), "in-sweep reviews submitted after the last manifest was accepted")
	r.add("in_sweep_after_intake_p99_ms", Percentile(afterIntake, 0.99), "ms, of those (0: none)")
	addVsBaseline(&r, []float64{0.95, 0.90}, base, under, "baseline_", "sweep_", "", "the sweep phase's reviews")
	r.add("baseline_bench_reads_per_review", float64(baseReads)/float64(max(1, len(before))), "store reads the bench made waiting for one interactive review, baseline")
	r.add("sweep_bench_reads_per_review", float64(sweepReads)/float64(max(1, len(under))), "store reads the bench made waiting for one interactive review, under the sweep")
	// The store's writes and commits (SQLite only: PostgreSQL does not
	// count them), load-independent: the sweep phase's, less what its
	// interactive reviews cost at the baseline's rate, per sweep file.
	if w2.ok && len(before) > 0 && node == nil { // a batch node's writes are its own process's
		perReview := func(a, b float64) float64 { return (b - a) / float64(len(before)) }
		txReview, wReview := perReview(w0.txs, w1.txs), perReview(w0.writes, w1.writes)
		r.add("baseline_commits_per_review", txReview, "store transactions per interactive review")
		r.add("sweep_commits_per_file", (w2.txs-w1.txs-txReview*float64(len(under)))/float64(plan.Files),
			"store transactions per sweep file (the interactive reviews' share removed)")
		r.add("sweep_writes_per_file", (w2.writes-w1.writes-wReview*float64(len(under)))/float64(plan.Files),
			"store writes per sweep file (the interactive reviews' share removed)")
	}
	// The writer's queue under the sweep (SQLite), the load-independent
	// half: how many batch-lane writes each interactive write waited
	// behind, and how long it waited for the writer.
	if behind := w2.behind.sub(w1.behind); behind.count > 0 {
		wait := w2.wait.sub(w1.wait)
		r.add("sweep_interactive_writes", behind.count, "interactive-lane store writes during the sweep")
		r.add("sweep_interactive_behind_max", behind.max(), "most batch-lane writes one interactive write waited behind (bucket bound; target ≤ 1)")
		r.add("sweep_interactive_behind_over_1", behind.count-behind.atMost(1), "interactive writes that waited behind more than one batch-lane write")
		r.add("sweep_interactive_write_wait_p99_ms", 1000*wait.quantile(0.99), "ms an interactive write waited for the writer, p99 (bucket bound)")
		r.add("sweep_interactive_write_wait_ms_per_review", 1000*wait.sum/float64(max(1, len(under))),
			"ms interactive writes waited for the writer, summed, per interactive review")
	}
	// The engine's yield gate under the sweep: how many pieces of batch-lane
	// work found interactive work in flight and waited (held until it
	// ended, or released by the bound), and for how long in all.
	if pieces := w2.yield["passed"] + w2.yield["held"] + w2.yield["bounded"] - w1.yield["passed"] - w1.yield["held"] - w1.yield["bounded"]; pieces > 0 {
		r.add("sweep_batch_pieces", pieces, "pieces of batch-lane work at the yield gate during the sweep")
		r.add("sweep_batch_pieces_held", w2.yield["held"]-w1.yield["held"], "of them held until no interactive work was in flight")
		r.add("sweep_batch_pieces_bounded", w2.yield["bounded"]-w1.yield["bounded"], "of them released by the bound with interactive work in flight")
		r.add("sweep_batch_held_seconds", w2.yieldSecs-w1.yieldSecs, "s batch-lane work waited at the yield gate, summed")
	}
	// The batch budget under the sweep: pieces of batch-lane work that
	// found a turn and those that waited for one, and for how long.
	if pieces := w2.budget["passed"] + w2.budget["held"] - w1.budget["passed"] - w1.budget["held"]; pieces > 0 {
		r.add("sweep_budget_pieces", pieces, "pieces of batch-lane work at the batch budget during the sweep")
		r.add("sweep_budget_pieces_held", w2.budget["held"]-w1.budget["held"], "of them held for a turn while interactive work was in flight")
		r.add("sweep_budget_held_seconds", w2.budgetSecs-w1.budgetSecs, "s batch-lane work waited for a turn, summed")
	}
	// The batch pacer under the sweep: the wall time it rested the lane.
	if rest := w2.restSecs - w1.restSecs; rest > 0 {
		r.add("sweep_pacer_rest_seconds", rest, "s the batch pacer rested the computing batch turns (BatchCPUShare)")
	}
	// What the pacer was charged under the sweep, by clock: wall time, or
	// (BatchThreadPolicy idle) the idle threads' CPU time, beside the wall
	// time those pieces spanned.
	if wall, cpu := w2.charged["wall"]-w1.charged["wall"], w2.charged["thread_cpu"]-w1.charged["thread_cpu"]; wall+cpu > 0 {
		r.add("sweep_pacer_charged_wall_seconds", wall, "s the pacer charged by wall time (pieces on normal threads, the writer's time of charged writes)")
		r.add("sweep_pacer_charged_thread_cpu_seconds", cpu, "s the pacer charged pieces on idle threads by their thread's CPU time")
		r.add("sweep_pacer_thread_wall_seconds", w2.threadWall-w1.threadWall, "s of wall time those idle-thread pieces spanned")
	}
	// What an interactive review met of batch computing under the sweep,
	// load-independently: the share of the time interactive work was in
	// flight that a computing batch piece ran too (the pacer spreads the
	// lane's CPU over wall time; a piece that overlaps a review slows it).
	if inter := w2.overlap["interactive"] - w1.overlap["interactive"]; inter > 0 {
		both := w2.overlap["both"] - w1.overlap["both"]
		r.add("sweep_interactive_inflight_seconds", inter, "s interactive work was in flight in the engine during the sweep")
		r.add("sweep_batch_computing_seconds", w2.overlap["batch"]-w1.overlap["batch"], "s computing batch-lane pieces ran during the sweep")
		r.add("sweep_overlap_seconds", both, "s both ran at once")
		r.add("sweep_overlap_share", both/inter, "share of interactive in-flight time overlapped by batch computing")
	}
	// The governor's leases under the sweep, and the goroutines that wanted
	// a CPU (the scheduler's own counts, sampled): with the batch lane
	// bounded, fewer goroutines queue for the cores interactive work needs.
	if leased := w2.leases["leased"] - w1.leases["leased"]; leased > 0 {
		r.add("sweep_governor_leased", leased, "batch jobs leased with a turn of the CPU governor")
		r.add("sweep_governor_capped", w2.leases["capped"]-w1.leases["capped"], "leases that asked for no batch job: no turn free")
	}
	baseRun.add(&r, "baseline")
	sweepRun.add(&r, "sweep")
	afterRun.add(&r, "after")
	// The collector's pace per second of each window beside the baseline's
	// (the sweep's allocations start cycles whose assists tax whoever
	// allocates, interactive reviews included).
	for _, f := range []string{"gc_cycles_per_second", "gc_assist_cpu_per_second", "sched_latency_p99_ms"} {
		b, okB := r.Get("baseline_" + f)
		u, okU := r.Get("sweep_" + f)
		if okB && okU && b > 0 {
			r.add("sweep_"+f+"_ratio", u/b, "sweep ÷ baseline (first baseline window)")
		}
	}
	if len(before) > 0 && sweepRun.created > 0 {
		// Load-independent: each goroutine created waits in a run queue
		// at least once, beside the interactive reviews' (a sweep's
		// per-statement watchers were most of its runnable spikes:
		// docs/benchmarks.md, "Session 21 (s21h4)").
		perReview := float64(baseRun.created) / float64(len(before))
		r.add("sweep_goroutines_created_per_file", (float64(sweepRun.created)-perReview*float64(len(under)))/float64(plan.Files),
			"goroutines created per sweep file (the interactive reviews' share at the baseline's rate removed)")
		r.add("baseline_goroutines_created_per_review", perReview, "goroutines created per interactive review, baseline")
		// The sweep's allocations and collections per file, the interactive
		// reviews' share at the baseline's rate removed: load-independent.
		per := func(b, u float64) float64 {
			return (u - b/float64(len(before))*float64(len(under))) / float64(plan.Files)
		}
		r.add("sweep_alloc_kb_per_file", per(float64(baseRun.gc.allocBytes), float64(sweepRun.gc.allocBytes))/1024, "KiB allocated per sweep file (interactive share removed)")
		r.add("sweep_allocs_per_file", per(float64(baseRun.gc.allocObjects), float64(sweepRun.gc.allocObjects)), "objects allocated per sweep file (interactive share removed)")
		r.add("sweep_gc_cycles_per_1k_files", 1000*per(float64(baseRun.gc.cycles), float64(sweepRun.gc.cycles)), "garbage collections per 1,000 sweep files (interactive share removed)")
		r.add("sweep_gc_cpu_ms_per_file", 1000*per(baseRun.gc.gcCPU, sweepRun.gc.gcCPU), "ms of GC CPU per sweep file (interactive share removed)")
	}
	// CPU: the process's user + system seconds in each phase (much less
	// sensitive to the machine's load than latency), and the sweep's share
	// beyond the interactive reviews' at the baseline's rate.
	if len(before) > 0 {
		r.add("baseline_cpu_seconds", w1.cpu-w0.cpu, "s CPU (user + system) of the baseline phase")
		r.add("sweep_cpu_seconds", w2.cpu-w1.cpu, "s CPU of the sweep phase, to every sweep review published")
		r.add("sweep_cpu_ms_per_file", 1000*(w2.cpu-w1.cpu-(w1.cpu-w0.cpu)/float64(len(before))*float64(len(under)))/float64(plan.Files),
			"ms CPU per sweep file (the interactive reviews' share at the baseline's rate removed)")
	}
	// The Ps the run had: --batch-threads idle raises them.
	r.add("gomaxprocs", float64(runtime.GOMAXPROCS(0)), "the bench process's GOMAXPROCS")
	r.add("batch_cpu_share", cpuShare(e.opts.BatchCPUShare), "the batch pacer's share in effect (Config.BatchCPUShare after its default; 0: off)")
	// The simulators' CPU when they run in a child process: what the
	// in-process mode adds to the figures above.
	if childOK {
		r.add("baseline_sim_cpu_seconds", c1-c0, "s CPU of the simulators' child process (the LLM simulator's alone with --batch-sim idle), baseline")
		r.add("sweep_sim_cpu_seconds", c2-c1, "s CPU of the simulators' child process (the LLM simulator's alone with --batch-sim idle), sweep phase")
	}
	// The batch simulator's own child (BatchSimIdle): its CPU per phase,
	// the OS scheduler's view of it, and its threads' policy at the end,
	// every thread its runtime made during the run too.
	if batchSimOK {
		r.add("baseline_batch_sim_cpu_seconds", bs1-bs0, "s CPU of the batch simulator's own child process, baseline")
		r.add("sweep_batch_sim_cpu_seconds", bs2-bs1, "s CPU of the batch simulator's own child process, sweep phase")
	}
	addProcSched(&r, "baseline", "batch_sim", bks0, bks1, t1.Sub(t0).Seconds())
	addProcSched(&r, "sweep", "batch_sim", bks1, bks2, t2.Sub(t1).Seconds())
	if bc := sm.batchChild; bc != nil {
		if idle, all, ok := bc.idleThreads(); ok {
			r.add("batch_sim_threads", float64(all), "threads of the batch simulator's child at the end")
			r.add("batch_sim_idle_threads", float64(idle), "of them on SCHED_IDLE ("+bc.idleNote+")")
		}
	}
	addProcSched(&r, "baseline", "bench", ps0, ps1, t1.Sub(t0).Seconds())
	addProcSched(&r, "sweep", "bench", ps1, ps2, t2.Sub(t1).Seconds())
	addProcSched(&r, "baseline", "sim", ks0, ks1, t1.Sub(t0).Seconds())
	addProcSched(&r, "sweep", "sim", ks1, ks2, t2.Sub(t1).Seconds())
	// The simulator child's priority (SimChild), read at the end: every
	// thread its runtime made during the run too.
	if child != nil {
		r.add("sim_child_nice_asked", float64(e.opts.SimNice), "nice asked for the simulators' child (0: the bench's priority)")
		if lo, hi, ok := child.nices(); ok {
			r.add("sim_child_nice_min", float64(lo), "least nice of the simulator child's threads at the end ("+child.niceNote+")")
			r.add("sim_child_nice_max", float64(hi), "greatest nice of the simulator child's threads at the end")
		}
	}
	// The batch node's CPU and priority (BatchNodeProcess): the sweep's
	// CPU is there, not in the figures above.
	if nodeOK {
		r.add("baseline_batch_node_cpu_seconds", n1-n0, "s CPU of the batch node's process, baseline")
		r.add("sweep_batch_node_cpu_seconds", n2-n1, "s CPU of the batch node's process, sweep phase")
		r.add("sweep_batch_node_cpu_ms_per_file", 1000*(n2-n1)/float64(plan.Files), "ms CPU of the batch node per sweep file")
		if lo, hi, ok := node.nices(); ok {
			r.add("batch_node_nice_min", float64(lo), "least nice of the batch node's threads at the end ("+node.niceNote+")")
			r.add("batch_node_nice_max", float64(hi), "greatest nice of the batch node's threads at the end")
		}
	}
	// Where an interactive review's time goes, stage by stage (the
	// engine's histograms; p99 is a bucket bound): baseline and under the
	// sweep.
	for _, st := range engine.StageNames {
		key := "interactive/" + st
		b, u := w1.stages[key].sub(w0.stages[key]), w2.stages[key].sub(w1.stages[key])
		if b.count == 0 && u.count == 0 {
			continue
		}
		mean := func(h histReading) float64 { return 1000 * h.sum / max(1, h.count) }
		r.add("stage_"+st+"_baseline_mean_ms", mean(b), "ms, interactive lane, baseline")
		r.add("stage_"+st+"_sweep_mean_ms", mean(u), "ms, interactive lane, under the sweep")
		r.add("stage_"+st+"_baseline_p99_ms", 1000*b.finiteQuantile(0.99), "ms (bucket bound; the last bound means at least that)")
		r.add("stage_"+st+"_sweep_p99_ms", 1000*u.finiteQuantile(0.99), "ms (bucket bound; the last bound means at least that)")
	}
	if tr != nil {
		tr.markInSweep(sweepEnd)
		tr.summarize(&r)
		if err := tr.write(); err != nil {
			return r, fmt.Errorf("--trace-tail: %w", err)
		}
	}
	return r, nil
}

// sweepItems sums the items of the sweep's batches (ids) by state, read
// from the store: every batch of the region is one of the sweep's, so one
// listing of them holds them all.
func sweepItems(ctx context.Context, rv *review.Plugin, ids []string) (store.BatchCounts, error) {
	var sum store.BatchCounts
	if len(ids) == 0 {
		return sum, nil
	}
	bs, err := rv.ListBatches(ctx, "us", review.BatchListParams{Limit: len(ids)})
	if err != nil {
		return sum, err
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	seen := 0
	for _, b := range bs {
		if !want[b.ID] {
			continue
		}
		seen++
		sum.Total += b.Counts.Total
		sum.Pending += b.Counts.Pending
		sum.Submitted += b.Counts.Submitted
		sum.Succeeded += b.Counts.Succeeded
		sum.Failed += b.Counts.Failed
		sum.Canceled += b.Counts.Canceled
	}
	if seen != len(ids) {
		return sum, fmt.Errorf("%d of the sweep's %d batches listed", seen, len(ids))
	}
	return sum, nil
}

// batchLaneReviews is the workload's review plug-in: one region, two
// provider profiles of one account (one model, one RequestsKey),
// "interactive" on the LLM simulator at llmURL and "batch" on the batch
// simulator at batchURL. The bench's Client and a batch node
// (BatchNodeProcess) configure it alike.
func batchLaneReviews(llmURL, batchURL string, tr *tailTrace) (*review.Plugin, error) {
	var interHTTP, batchHTTP *http.Client // nil: the provider's default
	if tr != nil {
		interHTTP, batchHTTP = tr.client("interactive"), tr.client("batch")
	}
	const key = "openai:bench-model" // one account: both profiles spend it
	inter, err := review.NewProvider(review.Profile{Name: "interactive", Kind: "openai-compatible", Region: "us", Model: "bench-model",
		BaseURL: llmURL + "/v1", APIKey: "sk-bench", RequestsKey: key, RequestsPerMinute: 6000, HTTPClient: interHTTP})
	if err != nil {
		return nil, err
	}
	batch, err := review.NewProvider(review.Profile{Name: "batch", Kind: "openai", Region: "us", Model: "bench-model",
		BaseURL: batchURL + "/v1/", APIKey: "sk-bench", RequestsKey: key, HTTPClient: batchHTTP})
	if err != nil {
		return nil, err
	}
	return review.New(review.Config{Regions: map[string]review.RegionConfig{"us": {Providers: []review.Provider{inter, batch},
		SweepEvery: 500 * time.Millisecond, Batch: review.BatchConfig{PollInterval: 200 * time.Millisecond}}}}), nil
}

// unpublishedReviews counts the region's reviews still accepted or
// validated (at most one of each: the caller only asks whether any is
// left); a failed listing counts as one.
func unpublishedReviews(ctx context.Context, c *ratelane.Client) int {
	n := 0
	for _, st := range []ratelane.State{ratelane.StateAccepted, ratelane.StateValidated} {
		js, err := c.List(ctx, "us", ratelane.ListParams{Kind: review.KindReview, State: st, Limit: 1})
		if err != nil {
			return 1
		}
		n += len(js)
	}
	return n
}

// publications is a plug-in of the batch-isolation client that only
// listens: the engine tells it of every recorded publication
// (PluginRegion.OnPublished), and wait wakes the waiter of that job. The
// bench waited for each interactive review by polling its job every 5 ms
// at first (then 2 % of the time waited), and those reads were 13 % of
// the process's CPU under the sweep, on the cores the reviews it
// measures need (docs/benchmarks.md, "Session 18 (s18h6)").
type publications struct {
	fallback time.Duration // between two reads of a job no signal came for

	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func newPublications(fallback time.Duration) *publications {
	return &publications{fallback: fallback, waiting: map[string]chan struct{}{}}
}

// Name names the plug-in.
func (p *publications) Name() string { return "bench-publications" }

// Bind listens for the region's publications.
func (p *publications) Bind(_ context.Context, r *ratelane.PluginRegion) error {
	r.OnPublished(p.published)
	return nil
}

func (p *publications) published(id string) {
	p.mu.Lock()
	ch := p.waiting[id]
	delete(p.waiting, id)
	p.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// publishedFallback is how often the bench reads a job no signal came for:
// the signal covers publication, the read covers a review that ends
// terminal (never published) and is the only other way out.
const publishedFallback = 250 * time.Millisecond

// wait waits until review id is published (its signal) or terminal (read
// once at first, then every p.fallback), counting its reads. It
// reads the review's job row alone (Client.Job), not the review's status
// (review.Plugin.Get also lists its parts).
func (p *publications) wait(ctx context.Context, c *ratelane.Client, id string, reads *atomic.Int64) error {
	ch := make(chan struct{})
	p.mu.Lock()
	p.waiting[id] = ch // before the first read: a publication between the two is not missed
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.waiting, id)
		p.mu.Unlock()
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		reads.Add(1)
		j, err := c.Job(ctx, "us", id)
		if err == nil && (j.State == ratelane.StatePublished || j.State == ratelane.StateTerminal) {
			return nil
		}
		t.Reset(p.fallback)
	}
}

// pollAfter is how long a poll of something started at start waits before
// its next look: 5 ms at first, then a fiftieth of the time waited so far
// (at most 1 s), so that a long wait reads the store ~50 times rather
// than once per 5 ms. What it measures is late by at most 2%.
func pollAfter(start time.Time) time.Duration {
	return min(time.Second, max(5*time.Millisecond, time.Since(start)/50))
}

// sweepDone waits until every batch of ids is done (pollAfter's pace from
// start) and returns their items that succeeded. It reads the region's
// done batches in one listing, without their chunks: GetBatch per batch,
// every 5 ms, decoded each batch's chunk records (a thousand custom ids
// each) and took ~6% of the 10,000-file run's CPU, on the CPU the
// interactive reviews it measures need (docs/benchmarks.md, "Session 15
// (s15h2)").
func sweepDone(ctx context.Context, rv *review.Plugin, ids []string, start time.Time) (int, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for {
		// The sweep's are the store's only batches: one page holds them.
		bs, err := rv.ListBatches(ctx, "us", review.BatchListParams{State: "done", Limit: len(ids)})
		done, succeeded := 0, 0
		for _, b := range bs {
			if want[b.ID] {
				done++
				succeeded += b.Counts.Succeeded
			}
		}
		if err == nil && done == len(ids) {
			return succeeded, nil
		}
		if err := Sleep(ctx, pollAfter(start)); err != nil {
			return 0, err
		}
	}
}

// writeCounts is a reading of the store's write counters, and of the
// interactive lane's write histograms.
type writeCounts struct {
	writes, txs  float64
	ok           bool
	wait, behind histReading
	// yield is the engine's yield gate: pieces of batch-lane work by
	// result (passed, held, bounded), and yieldSecs their summed wait.
	yield     map[string]float64
	yieldSecs float64
	// budget is the engine's batch budget: pieces by result (passed,
	// held), and budgetSecs their summed wait.
	budget     map[string]float64
	budgetSecs float64
	// restSecs is the time the batch pacer rested the computing turns;
	// charged what it was charged by clock (wall, thread_cpu), threadWall
	// the wall time of the pieces charged by their thread's CPU.
	restSecs   float64
	charged    map[string]float64
	threadWall float64
	// overlap is the engine's overlap totals by what ran (interactive,
	// batch, both), in seconds.
	overlap map[string]float64
	// leases are the CPU governor's leases by result (leased, capped).
	leases map[string]float64
	// stages are the engine's stage histograms by "lane/stage".
	stages map[string]histReading
	// cpu is the process's CPU time (user + system) so far, in seconds
	// (process_cpu_seconds_total; 0 where it is not collected).
	cpu float64
}

// histReading is a reading of a cumulative histogram.
type histReading struct {
	bounds     []float64
	buckets    []float64 // cumulative, per bound
	count, sum float64
}

func readHist(h interface {
	GetBucket() []*dto.Bucket
	GetSampleCount() uint64
	GetSampleSum() float64
}) histReading {
	var r histReading
	for _, b := range h.GetBucket() {
		r.bounds = append(r.bounds, b.GetUpperBound())
		r.buckets = append(r.buckets, float64(b.GetCumulativeCount()))
	}
	r.count, r.sum = float64(h.GetSampleCount()), h.GetSampleSum()
	return r
}

// sub is what was observed between an earlier reading a and h.
func (h histReading) sub(a histReading) histReading {
	out := histReading{bounds: h.bounds, count: h.count - a.count, sum: h.sum - a.sum}
	for i, b := range h.buckets {
		if i < len(a.buckets) {
			b -= a.buckets[i]
		}
		out.buckets = append(out.buckets, b)
	}
	return out
}

// atMost is how many observations were at most bound (a bucket bound).
func (h histReading) atMost(bound float64) float64 {
	for i, b := range h.bounds {
		if b == bound {
			return h.buckets[i]
		}
	}
	return 0
}

// quantile is the bound of the first bucket holding the q quantile (+Inf
// past the last bound).
func (h histReading) quantile(q float64) float64 {
	for i, b := range h.buckets {
		if b >= q*h.count {
			return h.bounds[i]
		}
	}
	return math.Inf(1)
}

// finiteQuantile is quantile with +Inf (past the last bound) read as the
// last bound, for JSON.
func (h histReading) finiteQuantile(q float64) float64 {
	v := h.quantile(q)
	if math.IsInf(v, 1) && len(h.bounds) > 0 {
		v = h.bounds[len(h.bounds)-1]
	}
	return v
}

// max is the bound of the highest bucket any observation reached.
func (h histReading) max() float64 { return h.quantile(1) }

// addByResult adds counter m to sums under the value of its "result" label.
func addByResult(sums map[string]float64, m *dto.Metric) {
	for _, l := range m.GetLabel() {
		if l.GetName() == "result" {
			sums[l.GetValue()] += m.GetCounter().GetValue()
		}
	}
}

// storeWrites reads ratelane_store_writes_total and
// ratelane_store_transactions_total from reg (ok false when the store
// does not count them), with the engine's yield-gate, batch-budget and
// stage figures and the process's CPU seconds.
func storeWrites(reg *prometheus.Registry) writeCounts {
	w := writeCounts{charged: map[string]float64{}, overlap: map[string]float64{}, yield: map[string]float64{}, budget: map[string]float64{}, leases: map[string]float64{}, stages: map[string]histReading{}}
	mfs, err := reg.Gather()
	if err != nil {
		return w
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "ratelane_store_writes_total":
				w.writes += m.GetCounter().GetValue()
				w.ok = true
			case "ratelane_store_transactions_total":
				w.txs += m.GetCounter().GetValue()
			case "ratelane_batch_yield_total":
				addByResult(w.yield, m)
			case "ratelane_batch_yield_seconds_total":
				w.yieldSecs += m.GetCounter().GetValue()
			case "process_cpu_seconds_total":
				w.cpu = m.GetCounter().GetValue()
			case "ratelane_batch_budget_total":
				addByResult(w.budget, m)
			case "ratelane_batch_budget_seconds_total":
				w.budgetSecs += m.GetCounter().GetValue()
			case "ratelane_batch_pace_rest_seconds_total":
				w.restSecs += m.GetCounter().GetValue()
			case "ratelane_batch_pace_charged_seconds_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "clock" {
						w.charged[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			case "ratelane_batch_pace_thread_wall_seconds_total":
				w.threadWall += m.GetCounter().GetValue()
			case "ratelane_batch_budget_leases_total":
				addByResult(w.leases, m)
			case "ratelane_batch_overlap_seconds_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "running" {
						w.overlap[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			case "ratelane_engine_stage_seconds":
				var lane, stage string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "lane":
						lane = l.GetValue()
					case "stage":
						stage = l.GetValue()
					}
				}
				w.stages[lane+"/"+stage] = readHist(m.GetHistogram())
			case "ratelane_store_write_wait_seconds", "ratelane_store_write_behind":
				if !hasLabel(m, "lane", string(ratelane.LaneInteractive)) {
					continue
				}
				if mf.GetName() == "ratelane_store_write_wait_seconds" {
					w.wait = readHist(m.GetHistogram())
				} else {
					w.behind = readHist(m.GetHistogram())
				}
			}
		}
	}
	return w
}

// hasLabel reports whether m has label name=value.
func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// schedSample is the scheduler's goroutine counts over a phase, sampled
// every 10 ms: those running on a CPU and those runnable, waiting for one;
// and the goroutines the process created in the phase.
type schedSample struct {
	n                     int
	running, runnable     float64 // sums
	mostRunning, mostRunn uint64
	// runn are the runnable counts sampled, for their quantiles.
	runn []uint64
	// created counts goroutines created between the phase's start and end
	// (/sched/goroutines-created), a count independent of the machine's
	// load: every one is put in a run queue at least once.
	created uint64
	// gc is the runtime's garbage-collector and allocation totals over the
	// phase: what the phase's allocations cost every goroutine (the mark
	// workers take a CPU, the assists tax whoever allocates).
	gc gcSample
	// secs is the phase's wall time, for the per-second figures: phases
	// differ in length (the sweep's lasts until its last review is
	// published), so totals alone do not compare.
	secs float64
}

// gcSample is a phase's garbage-collector figures (runtime/metrics): cycles,
// the CPU the collector took (all of it, and its assists: the share charged
// to goroutines that allocate, interactive ones included), bytes and
// objects allocated, and the time goroutines spent runnable before they ran
// (the scheduler's latency histogram).
type gcSample struct {
	cycles, allocBytes, allocObjects uint64
	gcCPU, assistCPU                 float64
	sched                            *metrics.Float64Histogram
}

// gcMetrics are the runtime/metrics names readGC reads, in its order.
var gcMetrics = []string{"/gc/cycles/total:gc-cycles", "/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/assist:cpu-seconds", "/gc/heap/allocs:bytes", "/gc/heap/allocs:objects", "/sched/latencies:seconds"}

// readGC reads the runtime's totals now; a figure this runtime does not
// know stays zero.
func readGC() gcSample {
	ms := make([]metrics.Sample, len(gcMetrics))
	for i, n := range gcMetrics {
		ms[i].Name = n
	}
	metrics.Read(ms)
	u := func(i int) uint64 {
		if ms[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return ms[i].Value.Uint64()
	}
	f := func(i int) float64 {
		if ms[i].Value.Kind() != metrics.KindFloat64 {
			return 0
		}
		return ms[i].Value.Float64()
	}
	g := gcSample{cycles: u(0), gcCPU: f(1), assistCPU: f(2), allocBytes: u(3), allocObjects: u(4)}
	if ms[5].Value.Kind() == metrics.KindFloat64Histogram {
		g.sched = ms[5].Value.Float64Histogram()
	}
	return g
}

// sub is g less an earlier reading a.
func (g gcSample) sub(a gcSample) gcSample {
	d := gcSample{cycles: g.cycles - a.cycles, gcCPU: g.gcCPU - a.gcCPU, assistCPU: g.assistCPU - a.assistCPU,
		allocBytes: g.allocBytes - a.allocBytes, allocObjects: g.allocObjects - a.allocObjects}
	if g.sched != nil && a.sched != nil && len(g.sched.Counts) == len(a.sched.Counts) {
		d.sched = &metrics.Float64Histogram{Buckets: g.sched.Buckets, Counts: make([]uint64, len(g.sched.Counts))}
		for i := range g.sched.Counts {
			d.sched.Counts[i] = g.sched.Counts[i] - a.sched.Counts[i]
		}
	}
	return d
}

// schedQuantile is the q quantile of the scheduling latencies (the bucket's
// upper bound, in seconds); 0 when unknown.
func (g gcSample) schedQuantile(q float64) float64 {
	if g.sched == nil {
		return 0
	}
	var total uint64
	for _, c := range g.sched.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range g.sched.Counts {
		seen += c
		if seen >= want {
			if b := g.sched.Buckets[i+1]; !math.IsInf(b, 1) {
				return b
			}
			return g.sched.Buckets[i] // the last bucket: at least its lower bound
		}
	}
	return 0
}

// schedOver counts the scheduling latencies above d seconds (by bucket:
// those in buckets whose lower bound is at least d).
func (g gcSample) schedOver(d float64) uint64 {
	if g.sched == nil {
		return 0
	}
	var n uint64
	for i, c := range g.sched.Counts {
		if g.sched.Buckets[i] >= d {
			n += c
		}
	}
	return n
}

// sampleSched samples the process's running and runnable goroutines
// (runtime/metrics) until the returned func is called, which returns the
// samples.
func sampleSched() (stop func() schedSample) {
	done, out := make(chan struct{}), make(chan schedSample)
	created := func() uint64 {
		m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(m)
		if m[0].Value.Kind() != metrics.KindUint64 {
			return 0 // not known to this runtime
		}
		return m[0].Value.Uint64()
	}
	created0 := created()
	gc0 := readGC()
	t0 := time.Now()
	go func() {
		ms := []metrics.Sample{{Name: "/sched/goroutines/running:goroutines"}, {Name: "/sched/goroutines/runnable:goroutines"}}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var s schedSample
		for {
			select {
			case <-done:
				s.created = created() - created0
				s.gc = readGC().sub(gc0)
				s.secs = time.Since(t0).Seconds()
				out <- s
				return
			case <-tick.C:
			}
			metrics.Read(ms)
			if ms[0].Value.Kind() != metrics.KindUint64 || ms[1].Value.Kind() != metrics.KindUint64 {
				continue // not known to this runtime
			}
			run, runn := ms[0].Value.Uint64(), ms[1].Value.Uint64()
			s.n++
			s.running += float64(run)
			s.runnable += float64(runn)
			s.mostRunning, s.mostRunn = max(s.mostRunning, run), max(s.mostRunn, runn)
			s.runn = append(s.runn, runn)
		}
	}()
	return func() schedSample {
		close(done)
		return <-out
	}
}

// runnableQuantile is the q quantile of the runnable counts sampled.
func (s schedSample) runnableQuantile(q float64) float64 {
	if len(s.runn) == 0 {
		return 0
	}
	v := slices.Clone(s.runn)
	slices.Sort(v)
	return float64(v[min(len(v)-1, int(q*float64(len(v))))])
}

// add reports the samples of phase in r.
func (s schedSample) add(r *Result, phase string) {
	if s.n == 0 {
		return
	}
	r.add(phase+"_goroutines_running_mean", s.running/float64(s.n), "goroutines on a CPU, sampled every 10 ms (runtime/metrics)")
	r.add(phase+"_goroutines_runnable_mean", s.runnable/float64(s.n), "goroutines waiting for a CPU, sampled every 10 ms")
	r.add(phase+"_goroutines_runnable_p99", s.runnableQuantile(0.99), "goroutines waiting for a CPU, p99 of the samples")
	r.add(phase+"_goroutines_runnable_max", float64(s.mostRunn), "goroutines waiting for a CPU, most in one sample")
	r.add(phase+"_goroutines_created", float64(s.created), "goroutines created in the phase (/sched/goroutines-created)")
	r.add(phase+"_gc_cycles", float64(s.gc.cycles), "garbage collections in the phase")
	r.add(phase+"_gc_cpu_seconds", s.gc.gcCPU, "s CPU the garbage collector took in the phase (runtime/metrics estimate)")
	r.add(phase+"_gc_assist_cpu_seconds", s.gc.assistCPU, "s of it in assists, charged to the goroutines that allocated")
	r.add(phase+"_alloc_mb", float64(s.gc.allocBytes)/(1<<20), "MiB allocated in the phase")
	if s.secs > 0 {
		r.add(phase+"_gc_cycles_per_second", float64(s.gc.cycles)/s.secs, "garbage collections per second of the phase")
		r.add(phase+"_gc_cpu_per_second", s.gc.gcCPU/s.secs, "s of GC CPU per second of the phase (runtime/metrics estimate, every class)")
		r.add(phase+"_gc_assist_cpu_per_second", s.gc.assistCPU/s.secs, "s of GC assist CPU per second of the phase: the collector's work charged to goroutines that allocated, interactive ones included")
	}
	r.add(phase+"_sched_latency_p50_ms", 1000*s.gc.schedQuantile(0.50), "ms a goroutine waited runnable before it ran, p50 (bucket bound, every goroutine)")
	r.add(phase+"_sched_latency_p90_ms", 1000*s.gc.schedQuantile(0.90), "ms a goroutine waited runnable before it ran, p90 (bucket bound)")
	r.add(phase+"_sched_latency_p99_ms", 1000*s.gc.schedQuantile(0.99), "ms a goroutine waited runnable before it ran, p99 (bucket bound, every goroutine)")
	r.add(phase+"_sched_latency_p999_ms", 1000*s.gc.schedQuantile(0.999), "ms a goroutine waited runnable before it ran, p99.9 (bucket bound)")
	r.add(phase+"_sched_latency_over_1ms", float64(s.gc.schedOver(0.001)), "goroutine runs that waited ≥ 1 ms runnable")
	r.add(phase+"_sched_latency_over_10ms", float64(s.gc.schedOver(0.01)), "goroutine runs that waited ≥ 10 ms runnable")
}

// pooledQuantiles are the quantiles addPooled reports: p99 as the issue's
// target names it, and p95 and p90, which a few hundred samples per
// phase resolve better (one round's p99 is its 2nd or 3rd worst review).
var pooledQuantiles = []float64{0.99, 0.95, 0.90}

// addPooled adds to agg the quantiles of every run's samples pooled,
// baseline against sweep phase: one figure over all rounds' reviews
// rather than the median of each round's ratio. It adds nothing when a
// run kept no samples (a workload other than batch-isolation).
func addPooled(agg *Result, runs []Result) {
	var base, under, in []time.Duration
	for _, r := range runs {
		if r.samples == nil {
			return
		}
		base = append(base, r.samples["baseline"]...)
		under = append(under, r.samples["sweep"]...)
		in = append(in, r.samples["in_sweep"]...)
	}
	if len(base) == 0 || len(under) == 0 {
		return
	}
	agg.add("pooled_runs", float64(len(runs)), "runs whose samples are pooled")
	agg.add("pooled_baseline_reviews", float64(len(base)), "reviews, baseline phases of every run")
	agg.add("pooled_sweep_reviews", float64(len(under)), "reviews, sweep phases of every run")
	addVsBaseline(agg, pooledQuantiles, base, under, "pooled_baseline_", "pooled_sweep_", "pooled_", "every run's sweep-phase reviews")
	if len(in) == 0 {
		return
	}
	agg.add("pooled_in_sweep_reviews", float64(len(in)), "reviews submitted while a sweep ran, every run")
	addVsBaseline(agg, pooledQuantiles, base, in, "", "pooled_in_sweep_", "pooled_in_sweep_", "every run's reviews submitted while its sweep ran")
	// The target's figure with its spread: a ratio whose interval
	// straddles 1.1 is not shown below it. Whole blocks of reviews are
	// resampled (blockRatioInterval): slow reviews come in bursts, and a
	// bootstrap of single reviews, reported beside it (_iid), was too
	// narrow for them (docs/benchmarks.md, "Session 32 (s32h1)").
	baseBlocks, inBlocks := pooledBlocks(runs, "baseline"), pooledBlocks(runs, "in_sweep")
	bt, it := blockTrimmedQuantile(baseBlocks, 0.99, trimBlockShare), blockTrimmedQuantile(inBlocks, 0.99, trimBlockShare)
	agg.add("pooled_baseline_p99_trimmed_ms", bt, "ms, every run's baseline reviews without the slowest 2 s blocks (one in ten)")
	agg.add("pooled_in_sweep_p99_trimmed_ms", it, "ms, every run's in-sweep reviews without the slowest 2 s blocks (one in ten)")
	agg.add("pooled_in_sweep_p99_trimmed_ratio", it/bt, "in-sweep ÷ baseline, both block-trimmed: a figure a few stall episodes do not set (beside pooled_in_sweep_p99_ratio, not instead)")
	seed := uint64(len(base))<<32 | uint64(len(in))
	// The additive shift beside the ratio (the ratio punishes a fast
	// baseline): the same blocks, the same resamples.
	b99, i99 := Percentile(base, 0.99), Percentile(in, 0.99)
	agg.add("pooled_in_sweep_p99_delta_ms", i99-b99, "ms, every run's in-sweep p99 less the pooled baseline's")
	lo, hi := blockDeltaInterval(baseBlocks, inBlocks, 0.99, 0.9, bootstrapResamples, seed)
	agg.add("pooled_in_sweep_p99_delta_ms_lo", lo, "ms, 5th percentile of the block bootstrap of the difference")
	agg.add("pooled_in_sweep_p99_delta_ms_hi", hi, "ms, 95th percentile of the block bootstrap of the difference")
	for _, q := range []float64{0.99, 0.95} {
		lo, hi := blockRatioInterval(baseBlocks, inBlocks, q, 0.9, bootstrapResamples, seed)
		name := fmt.Sprintf("pooled_in_sweep_p%.0f_ratio", 100*q)
		agg.add(name+"_lo", lo, "÷ baseline, 5th percentile of a block bootstrap (2 s blocks of reviews resampled whole)")
		agg.add(name+"_hi", hi, "÷ baseline, 95th percentile of the block bootstrap")
		lo, hi = ratioInterval(base, in, q, 0.9, bootstrapResamples, seed)
		agg.add(name+"_iid_lo", lo, "÷ baseline, 5th percentile of a bootstrap of single reviews (too narrow for bursts)")
		agg.add(name+"_iid_hi", hi, "÷ baseline, 95th percentile of the bootstrap of single reviews")
	}
}

// pooledBlocks is every run's blocks of phase (Result.blocks), one
// block per review for a run that kept none.
func pooledBlocks(runs []Result, phase string) [][]time.Duration {
	var out [][]time.Duration
	for _, r := range runs {
		if bs, ok := r.blocks[phase]; ok {
			out = append(out, bs...)
		} else {
			out = append(out, singletons(r.samples[phase])...)
		}
	}
	return out
}

// addVsBaseline adds to r, for each quantile q (as pN), xs's quantile
// (xsMs+"pN_ms") and its ratio to base's (ratio+"pN_ratio"), and base's
// own when baseMs is not empty; what says whose reviews xs are.
func addVsBaseline(r *Result, qs []float64, base, xs []time.Duration, baseMs, xsMs, ratio, what string) {
	for _, q := range qs {
		b, x := Percentile(base, q), Percentile(xs, q)
		name := fmt.Sprintf("p%.0f", 100*q)
		if baseMs != "" {
			r.add(baseMs+name+"_ms", b, "ms, baseline reviews")
		}
		r.add(xsMs+name+"_ms", x, "ms, "+what)
		r.add(ratio+name+"_ratio", x/b, "÷ baseline, "+what)
	}
}

// cpuShare is the batch pacer's share a Config.BatchCPUShare of asked
// runs at: the engine's default for zero, 0 for off (outside 0 to 1), so
// a result says which share paced its sweep whatever the flag was.
func cpuShare(asked float64) float64 {
	if asked == 0 {
		return engine.DefaultBatchCPUShare
	}
	if !(asked > 0 && asked < 1) {
		return 0
	}
	return asked
}
