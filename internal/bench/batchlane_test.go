package bench

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
)

// ms makes latencies of whole milliseconds.
func ms(vs ...int) []time.Duration {
	out := make([]time.Duration, len(vs))
	for i, v := range vs {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

// TestAddPooledIsOneQuantileOverEveryRun: the pooled figures are the
// quantiles of all runs' samples together, not a median of per-run
// figures. Two runs of 100 baseline reviews (10 ms, and two 50 ms
// outliers in the first) and 100 sweep reviews: the first run's sweep has
// two slow reviews (200 ms), the second five (100 ms). A p99 of 100 is the
// 2nd worst: per run the ratio is 200/50 and 100/10 (median 7). Pooled
// over 200 reviews each, p99 is the 3rd worst: baseline 10 ms, sweep
// 100 ms (ratio 10); p95 and p90 see only the 10 ms reviews. Each run's
// first 50 sweep reviews were submitted while its sweep ran (in_sweep):
// both 200 ms reviews and all five 100 ms ones, so pooled over those 100
// the p99 is the 2nd worst (200 ms) and p95 the 6th (100 ms), which the
// whole sweep phase's later reviews no longer dilute.
func TestAddPooledIsOneQuantileOverEveryRun(t *testing.T) {
	t.Parallel()
	fill := func(n, v int, extra ...int) []time.Duration {
		out := ms(extra...)
		for len(out) < n {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	run := func(base, under []time.Duration) Result {
		// Cloned first: Percentile sorts its argument.
		in := slices.Clone(under[:50])
		r := Result{Workload: "batch-isolation", samples: map[string][]time.Duration{"baseline": base, "sweep": under, "in_sweep": in}}
		r.add("p99_ratio", Percentile(under, 0.99)/Percentile(base, 0.99), "")
		return r
	}
	runs := []Result{
		run(fill(100, 10, 50, 50), fill(100, 10, 200, 200)),
		run(fill(100, 10), fill(100, 10, 100, 100, 100, 100, 100)),
	}
	agg := Aggregate(runs)
	addPooled(&agg, runs)
	want := map[string]float64{
		"pooled_runs": 2, "pooled_baseline_reviews": 200, "pooled_sweep_reviews": 200,
		"pooled_baseline_p99_ms": 10, "pooled_sweep_p99_ms": 100, "pooled_p99_ratio": 10,
		"pooled_sweep_p95_ms": 10, "pooled_p95_ratio": 1, "pooled_sweep_p90_ms": 10, "pooled_p90_ratio": 1,
		"pooled_in_sweep_reviews": 100, "pooled_in_sweep_p99_ms": 200, "pooled_in_sweep_p99_ratio": 20,
		"pooled_in_sweep_p95_ms": 100, "pooled_in_sweep_p95_ratio": 10, "pooled_in_sweep_p90_ms": 10, "pooled_in_sweep_p90_ratio": 1,
		// The additive shift beside the ratio: 200 ms less 10.
		"pooled_in_sweep_p99_delta_ms": 190,
		// The per-run ratios' median (4 and 10) stays beside the pooled one.
		"p99_ratio": 7,
	}
	for name, v := range want {
		got, ok := agg.Get(name)
		if !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	// The target's ratio and the shift come with their bootstrap
	// intervals, which hold them.
	for _, name := range []string{"pooled_in_sweep_p99_ratio", "pooled_in_sweep_p95_ratio", "pooled_in_sweep_p99_delta_ms"} {
		point, _ := agg.Get(name)
		lo, okLo := agg.Get(name + "_lo")
		hi, okHi := agg.Get(name + "_hi")
		if !okLo || !okHi || !(lo <= point && point <= hi) || !(lo < hi) {
			t.Errorf("%s = %v, interval [%v, %v] (present %v %v): want a spread that holds it", name, point, lo, hi, okLo, okHi)
		}
	}
	b, err := json.Marshal(agg)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runs map[string][]float64 `json:"runs"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if r := got.Runs["p99_ratio"]; len(r) != 2 || r[0] != 4 || r[1] != 10 {
		t.Errorf("runs.p99_ratio = %v, want [4 10]", r)
	}
	if _, ok := got.Runs["pooled_p99_ratio"]; ok {
		t.Errorf("runs lists pooled_p99_ratio, one figure over every run: %s", b)
	}

	// A workload that keeps no samples gets no pooled figures.
	plain := []Result{{Workload: "paced"}, {Workload: "paced"}}
	agg = Aggregate(plain)
	addPooled(&agg, plain)
	if len(agg.Metrics) != 0 {
		t.Errorf("pooled figures for a workload without samples: %+v", agg.Metrics)
	}
}

// TestBatchIsolationRunsPoolWithTheSimulatorsInAChild runs the smoke
// workload twice with the simulators in a child process (this test
// binary, see TestMain) and checks the pooled counts are the runs' sums
// and each run's figures are listed.
//
// The batch pacer is off (BatchCPUShare -1): nothing here is about it,
// and at its default share (a tenth) it made each sweep about ten times
// the wall time of its batch pieces, which a loaded machine stretches
// too: two sweeps took 21–32 s each at load 2 with it, and one ran past
// the 5-minute bound at load 13–18 (docs/benchmarks.md, "Session 44
// (s44h2)"). TestBenchAllSmoke (cmd/ratelane) runs the smoke at the
// default share; internal/engine's pacer tests check the share itself.
func TestBatchIsolationRunsPoolWithTheSimulatorsInAChild(t *testing.T) {
	if testing.Short() {
		t.Skip("two smoke sweeps (about 15 s)")
	}
	r, err := Run(context.Background(), "batch-isolation", Options{Smoke: true, Runs: 2, Sim: SimChild, SimNice: -3, BatchCPUShare: -1, Duration: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, phase := range []string{"baseline", "sweep"} {
		var sum float64
		for _, m := range r.Metrics {
			if m.Name == phase+"_reviews" {
				if len(m.Runs) != 2 {
					t.Fatalf("%s_reviews runs %v, want 2", phase, m.Runs)
				}
				sum = m.Runs[0] + m.Runs[1]
			}
		}
		if got, _ := r.Get("pooled_" + phase + "_reviews"); got != sum || sum == 0 {
			t.Errorf("pooled_%s_reviews = %v, want the runs' sum %v", phase, got, sum)
		}
	}
	// The child's CPU is read from /proc (Linux).
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if v, ok := r.Get("sweep_sim_cpu_seconds"); !ok || v <= 0 {
			t.Errorf("sweep_sim_cpu_seconds = %v (present %v), want the child's CPU", v, ok)
		}
		// Its priority, asked and read at the end of each run (as root:
		// a negative nice needs CAP_SYS_NICE; otherwise the bench's).
		want := -3.0
		if os.Geteuid() != 0 {
			want = 0
		}
		if v, ok := r.Get("sim_child_nice_asked"); !ok || v != -3 {
			t.Errorf("sim_child_nice_asked = %v (present %v), want -3", v, ok)
		}
		for _, name := range []string{"sim_child_nice_min", "sim_child_nice_max"} {
			if v, ok := r.Get(name); !ok || v != want {
				t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
			}
		}
	}
	// Reviews submitted while the sweep ran are some of the sweep phase's.
	in, _ := r.Get("pooled_in_sweep_reviews")
	all, _ := r.Get("pooled_sweep_reviews")
	if !(in > 0 && in <= all) {
		t.Errorf("pooled_in_sweep_reviews = %v, want 1..%v", in, all)
	}
	for _, name := range []string{"pooled_p99_ratio", "pooled_p95_ratio", "pooled_p90_ratio", "p95_ratio", "p90_ratio",
		"pooled_in_sweep_p99_ratio", "in_sweep_p99_ratio", "in_sweep_p95_ratio"} {
		if v, ok := r.Get(name); !ok || !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v (present %v)", name, v, ok)
		}
	}
	// The engine's overlap measure under the sweep: interactive work was
	// in flight beside a computing batch lane, and the share is a share.
	if v, ok := r.Get("sweep_interactive_inflight_seconds"); !ok || !(v > 0) {
		t.Errorf("sweep_interactive_inflight_seconds = %v (present %v), want the reviews' time in flight", v, ok)
	}
	if v, ok := r.Get("sweep_overlap_share"); !ok || v < 0 || v > 1 {
		t.Errorf("sweep_overlap_share = %v (present %v), want 0..1", v, ok)
	}
}

// TestSimChildEndsWithTheRun: the child serves, and is gone once closed.
func TestSimChildEndsWithTheRun(t *testing.T) {
	t.Parallel()
	c, err := startSimChild(time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	pid := c.cmd.Process.Pid
	if _, ok := c.cpuSeconds(); !ok {
		if _, err := os.Stat("/proc/self/stat"); err == nil {
			t.Errorf("cannot read the child's CPU")
		}
	}
	if err := c.close(); err != nil {
		t.Errorf("child exit: %v", err)
	}
	if !c.cmd.ProcessState.Exited() {
		t.Errorf("child %d did not exit by itself: %v", pid, c.cmd.ProcessState)
	}
}

// TestSimChildRunsAtTheNiceAsked: every thread of the simulators' child
// runs at the nice asked for, those its runtime made while it answered
// a burst of requests too (Linux, as root: a negative nice needs
// CAP_SYS_NICE). Where the OS refuses, the child still serves, at the
// bench's priority, and its note says why.
func TestSimChildRunsAtTheNiceAsked(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("reads the child's threads from /proc (Linux)")
	}
	c, err := startSimChild(time.Second, -5)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	// A burst of concurrent requests makes the child's runtime start more
	// threads, which must inherit the nice.
	burstBatchSim(c.urls.Batch)
	lo, hi, ok := c.nices()
	if !ok {
		t.Fatal("cannot read the child's threads' nice")
	}
	if os.Geteuid() != 0 {
		if lo != 0 || hi != 0 || !strings.HasPrefix(c.niceNote, "not niced") {
			t.Errorf("not root: threads' nice %d..%d, note %q; want 0 and a note that says why", lo, hi, c.niceNote)
		}
		return
	}
	if lo != -5 || hi != -5 {
		t.Errorf("child threads' nice %d..%d (%s), want -5", lo, hi, c.niceNote)
	}
	if n := len(taskNices(c.cmd.Process.Pid)); n < 2 {
		t.Errorf("%d threads read, want the Go runtime's several", n)
	}
}

// TestBatchIsolationWithABatchNode runs the smoke workload with the batch
// lane in a batch-only child process (BatchNodeProcess, this test binary:
// see TestMain) at nice 5: the sweep completes (every review published,
// which only the batch node can do: the bench's node serves the
// interactive lane only), the node's CPU is read and every one of its
// threads runs at the nice asked for (Linux).
func TestBatchIsolationWithABatchNode(t *testing.T) {
	if testing.Short() {
		t.Skip("a smoke sweep (about 8 s)")
	}
	r, err := Run(context.Background(), "batch-isolation", Options{Smoke: true, Sim: SimChild, BatchNode: BatchNodeProcess, BatchNice: 5, Duration: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Get("sweep_files"); v != float64(BatchLane(true).Files) {
		t.Fatalf("sweep_files = %v", v)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return
	}
	if v, ok := r.Get("sweep_batch_node_cpu_seconds"); !ok || v <= 0 {
		t.Errorf("sweep_batch_node_cpu_seconds = %v (present %v), want the batch node's CPU", v, ok)
	}
	lo, _ := r.Get("batch_node_nice_min")
	hi, _ := r.Get("batch_node_nice_max")
	if lo != 5 || hi != 5 {
		t.Errorf("batch node threads' nice %v..%v, want 5", lo, hi)
	}
}

// TestSweepIntakeOnly: the sweep modes, and the combination refused (a
// batch node of its own would work the sweep intake leaves queued).
func TestSweepIntakeOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		work, node   string
		intake, fail bool
	}{
		{"", "", false, false}, {SweepWorkFull, BatchNodeProcess, false, false}, {SweepWorkIntake, "", true, false},
		{SweepWorkIntake, BatchNodeInProcess, true, false}, {SweepWorkIntake, BatchNodeProcess, false, true}, {"none", "", false, true},
	} {
		intake, err := sweepIntakeOnly(Options{SweepWork: tc.work, BatchNode: tc.node})
		if intake != tc.intake || (err != nil) != tc.fail {
			t.Errorf("sweep work %q, batch node %q: intake %v, error %v; want %v, an error %v", tc.work, tc.node, intake, err, tc.intake, tc.fail)
		}
	}
}

// TestCPUShareInEffect: a result's batch_cpu_share is the share that
// paced its sweep: the engine's default for an unset flag, off as 0.
func TestCPUShareInEffect(t *testing.T) {
	for _, tc := range []struct{ asked, want float64 }{
		{0, engine.DefaultBatchCPUShare}, {0.25, 0.25}, {0.1, 0.1}, {-1, 0}, {1, 0}, {1.5, 0},
	} {
		if got := cpuShare(tc.asked); got != tc.want {
			t.Errorf("cpuShare(%v) = %v, want %v", tc.asked, got, tc.want)
		}
	}
}

// TestSchedSamplePerSecond: a window's collector figures per second are
// its totals over its wall time, and GC assist is a part of GC CPU.
func TestSchedSamplePerSecond(t *testing.T) {
	t.Parallel()
	var r Result
	schedSample{n: 1, secs: 2, gc: gcSample{cycles: 6, gcCPU: 0.5, assistCPU: 0.1}}.add(&r, "w")
	for name, want := range map[string]float64{"w_gc_cycles": 6, "w_gc_cycles_per_second": 3, "w_gc_cpu_per_second": 0.25, "w_gc_assist_cpu_per_second": 0.05} {
		if got, ok := r.Get(name); !ok || math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}

// TestReadGCAssistIsPartOfGC: the runtime's readings readGC takes are the
// ones named: after forced collections with allocating goroutines, cycles
// were counted, and the assist CPU is at most the collector's whole CPU
// (a reading of another class in its place, or the two swapped, breaks it).
func TestReadGCAssistIsPartOfGC(t *testing.T) {
	a := readGC()
	var sink [][]byte
	for i := range 2000 {
		sink = append(sink, make([]byte, 64<<10))
		if i%200 == 0 {
			runtime.GC()
			sink = sink[:0]
		}
	}
	runtime.KeepAlive(sink)
	d := readGC().sub(a)
	if d.cycles < 10 {
		t.Errorf("%d cycles, want at least the 10 forced", d.cycles)
	}
	if !(d.gcCPU > 0) || d.assistCPU < 0 || d.assistCPU >= d.gcCPU {
		t.Errorf("GC CPU %v s, assist %v s: want 0 <= assist < GC CPU > 0", d.gcCPU, d.assistCPU)
	}
	if d.sched == nil {
		t.Error("no scheduler latency histogram")
	}
}

// burstBatchSim sends 64 concurrent requests to the batch simulator at
// url, so that the child serving it starts more threads (each test then
// checks they inherited its priority).
func burstBatchSim(url string) {
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			resp, err := hc.Get(url + "/v1/batches/none")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
}
