package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/idlethread"
)

// The batch-floor workload (issue 15 item 3): the batch-isolation
// workload's interactive reviews beside a plain CPU burner instead of a
// sweep. What the burner moves the review p99 by is the floor under the
// batch-isolation ratio on this machine: CPU that is not ratelane's, at
// the rate the sweep phase used. BurnChild stands for the simulator
// child's CPU (a remote provider's, on the same cores here), BurnBench
// for the bench process's own.

// BurnChildEnv, set in a process's environment, makes ServeSimChildIfAsked
// run a CPU burner instead of the program (batch-floor): it reads rates
// (CPU seconds per second, one per line) on stdin and burns at the last
// one until stdin ends.
const BurnChildEnv = "RATELANE_BENCH_BURNER"

// burnPeriod is the burner's duty cycle: each of its workers spins for
// its share of every period and sleeps the rest. Short, as the sweep's
// CPU comes in pieces of a few milliseconds, not in whole time slices.
const burnPeriod = 2 * time.Millisecond

// floorSlices is how many windows of each kind (burner off, on) the
// workload alternates, in the order off on on off: the two kinds see the
// machine over the same stretch of time, which one baseline phase before
// one sweep phase did not (docs/benchmarks.md, "Session 31: the merge").
const floorSlices = 4

// burner spins the CPU at a settable rate from GOMAXPROCS workers.
type burner struct {
	mu   sync.Mutex
	rate float64       // CPU seconds per second, all workers together
	set0 time.Time     // when rate was set: each worker's debt runs from it
	wake chan struct{} // closed and replaced by set: idle workers sleep on it
	// piece, when above 0 and below burnPeriod, is the longest spin
	// before the worker yields its P (runtime.Gosched) and spins on:
	// the same CPU per second in shorter run slices.
	piece time.Duration
	// idle runs each worker locked to a SCHED_IDLE thread (idlethread).
	idle bool
	err  error // the first worker's failure to enter its thread policy
}

// set makes the burner burn rate CPU seconds per second (0: idle, its
// workers asleep until the next set, so that an idle burner does not
// wake up 500 times a second beside the reviews it should leave alone).
func (b *burner) set(rate float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rate, b.set0 = max(0, rate), time.Now()
	if b.wake != nil {
		close(b.wake)
	}
	b.wake = make(chan struct{})
}

// now is the rate, when it was set, and what wakes an idle worker.
func (b *burner) now() (float64, time.Time, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	return b.rate, b.set0, b.wake
}

// run burns until ctx ends, from n workers. Each owes rate/n of the wall
// time since the rate was set (at most all of it) and spins off its debt
// in pieces of at most burnPeriod (or b.piece, yielding between them),
// sleeping a period whenever it is even: a sleep that overshoots is made up by the next spin, so the rate
// is what was asked even where timers are coarse. A spin is timed by the
// wall clock, so a machine with no CPU to spare gives the burner less
// than it asks (the workload reports what it got).
func (b *burner) run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.idle {
				t, err := idlethread.Enter()
				if err != nil {
					b.fail(err)
					return
				}
				defer t.Leave()
			}
			var (
				from time.Time
				spun time.Duration
			)
			for ctx.Err() == nil {
				rate, at, wake := b.now()
				if rate == 0 {
					select {
					case <-ctx.Done():
					case <-wake:
					}
					continue
				}
				if !at.Equal(from) {
					from, spun = at, 0
				}
				share := min(1, rate/float64(n))
				debt := time.Duration(share*float64(time.Since(from))) - spun
				if debt <= 0 {
					time.Sleep(burnPeriod)
					continue
				}
				d, yield := b.spin(debt)
				t0 := time.Now()
				for time.Since(t0) < d {
					// spin: the CPU is the point
				}
				spun += time.Since(t0)
				if yield {
					// A goroutine woken meanwhile gets this P now, not
					// when the spin would have ended.
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
}

// fail records a worker's failure to start (the first one); err reads it.
func (b *burner) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
}

// spin is how long a worker owing debt spins next, and whether it yields
// its P after: at most burnPeriod, or b.piece when that is shorter, with
// a yield (runtime.Gosched) after each such piece, so that a goroutine
// woken during the spin waits at most about a piece for this P.
func (b *burner) spin(debt time.Duration) (d time.Duration, yield bool) {
	piece := burnPeriod
	if b.piece > 0 && b.piece < burnPeriod {
		piece = b.piece
	}
	return min(debt, piece), piece < burnPeriod
}

// serveBurner is the burner child (BurnChildEnv): it says it is ready on
// out, then burns at the rate of the last line read from in until in ends.
func serveBurner(in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var b burner
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.run(ctx, runtime.GOMAXPROCS(0))
	}()
	if _, err := fmt.Fprintln(out, "burning"); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		r, err := strconv.ParseFloat(strings.TrimSpace(sc.Text()), 64)
		if err != nil {
			return fmt.Errorf("burner rate %q: %w", sc.Text(), err)
		}
		b.set(r)
	}
	cancel()
	<-done
	return sc.Err()
}

// burnerChild is a running burner child.
type burnerChild struct{ *selfChild }

// startBurnerChild starts this executable as a burner child, idle.
func startBurnerChild() (*burnerChild, error) {
	sc, err := startSelf("burner child", BurnChildEnv+"=1", 0, time.Second, func(line string) error {
		if strings.TrimSpace(line) != "burning" {
			return errors.New("not burning")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &burnerChild{selfChild: sc}, nil
}

// set asks the child to burn rate CPU seconds per second.
func (c *burnerChild) set(rate float64) error {
	_, err := fmt.Fprintf(c.stdin, "%g\n", rate)
	return err
}

// cpuSeconds is the child's CPU time so far (procCPUSeconds).
func (c *burnerChild) cpuSeconds() (float64, bool) { return procCPUSeconds(c.cmd.Process.Pid) }

// sims are the batch-isolation workloads' simulators (startSims).
type sims struct {
	// llm and batch are their base URLs.
	llm, batch string
	// child is the simulators' child process (SimChild; nil in process):
	// both simulators', or the LLM simulator's alone where batchChild is
	// set (BatchSimIdle), the batch simulator's child on SCHED_IDLE.
	child, batchChild *simChild
	end               func()
}

// cpu reads the child's CPU (procCPUSeconds); ok false in process.
func (s *sims) cpu() (float64, bool) {
	if s.child == nil {
		return 0, false
	}
	return s.child.cpuSeconds()
}

// batchCPU reads the batch simulator's own child's CPU; ok false without
// one.
func (s *sims) batchCPU() (float64, bool) {
	if s.batchChild == nil {
		return 0, false
	}
	return s.batchChild.cpuSeconds()
}

// startSims starts the batch-isolation workloads' simulators where
// e.opts.Sim and e.opts.BatchSim say. The simulators stand for remote
// providers; in a child process their CPU stays out of the bench's
// scheduler and figures, and on SCHED_IDLE (BatchSimIdle) the batch
// simulator's off the cores the interactive reviews want.
func startSims(e *env, processFor time.Duration) (*sims, error) {
	switch e.opts.BatchSim {
	case "", BatchSimShared, BatchSimIdle:
	default:
		return nil, fmt.Errorf("unknown batch simulator mode %q (want %s or %s)", e.opts.BatchSim, BatchSimShared, BatchSimIdle)
	}
	idle := e.opts.BatchSim == BatchSimIdle
	switch e.opts.Sim {
	case SimChild:
		if !idle {
			child, err := startSimChild(processFor, e.opts.SimNice)
			if err != nil {
				return nil, err
			}
			return &sims{llm: child.urls.LLM, batch: child.urls.Batch, child: child, end: func() { _ = child.close() }}, nil
		}
		child, err := startSimChildOf(processFor, simServesLLM, e.opts.SimNice, false)
		if err != nil {
			return nil, err
		}
		bchild, err := startSimChildOf(processFor, simServesBatch, 0, true)
		if err != nil {
			_ = child.close()
			return nil, err
		}
		return &sims{llm: child.urls.LLM, batch: bchild.urls.Batch, child: child, batchChild: bchild,
			end: func() { _ = bchild.close(); _ = child.close() }}, nil
	case "", SimInProcess:
		if idle {
			return nil, fmt.Errorf("batch simulator mode %s needs the simulators in a child process (%s)", BatchSimIdle, SimChild)
		}
		l, b, err := newSims(processFor)
		if err != nil {
			return nil, err
		}
		e.sims = append(e.sims, l)
		return &sims{llm: l.LLMBaseURL("openai"), batch: b.URL(), end: func() { _ = b.Close() }}, nil
	default:
		return nil, fmt.Errorf("unknown simulator mode %q (want %s or %s)", e.opts.Sim, SimInProcess, SimChild)
	}
}

// floorSample is one interactive review of batch-floor: its latency and
// whether the burner was on when it was submitted.
type floorSample struct {
	lat time.Duration
	on  bool
}

// runBatchFloor runs batch-floor: batch-isolation's region, providers and
// interactive reviews (at its rate), no sweep; instead a burner is on in
// every other window (floorSlices of each, off on on off, each a quarter
// of the batch-isolation baseline's window): BurnChild CPU seconds per
// second in a child process, BurnBench in goroutines of the bench's own
// process, after a warm-up window that counts for neither. A review
// counts for the window it was submitted in.
func runBatchFloor(ctx context.Context, e *env) (Result, error) {
	plan := BatchLane(e.opts.Smoke)
	sm, err := startSims(e, plan.ProcessFor)
	if err != nil {
		return Result{}, err
	}
	defer sm.end()
	// Both simulators' CPU, where the batch simulator has a child of its own.
	simCPU := func() (float64, bool) {
		a, ok := sm.cpu()
		b, _ := sm.batchCPU()
		return a + b, ok
	}
	rv, err := batchLaneReviews(sm.llm, sm.batch, nil)
	if err != nil {
		return Result{}, err
	}
	pubs := newPublications(publishedFallback)
	c, err := e.client(ctx, ratelane.Config{Workers: 16, Plugins: []ratelane.Plugin{rv, pubs}, Regions: []ratelane.Region{e.region()}})
	if err != nil {
		return Result{}, err
	}
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	var child *burnerChild
	if e.opts.BurnChild > 0 {
		if child, err = startBurnerChild(); err != nil {
			return Result{}, err
		}
		defer child.close(5 * time.Second)
	}
	bctx, stopBurn := context.WithCancel(ctx)
	defer stopBurn()
	inBench := burner{piece: e.opts.BurnPiece, idle: e.opts.BurnIdle}
	workers := cmp.Or(e.opts.BurnWorkers, runtime.GOMAXPROCS(0))
	if e.opts.BurnBench > 0 {
		go inBench.run(bctx, workers)
	}
	setBurn := func(on bool) error {
		k := 0.0
		if on {
			k = 1
		}
		inBench.set(k * e.opts.BurnBench)
		if child != nil {
			return child.set(k * e.opts.BurnChild)
		}
		return nil
	}
	childCPU := func() float64 {
		if child == nil {
			return 0
		}
		v, _ := child.cpuSeconds()
		return v
	}
	benchCPU := func() float64 { v, _ := procCPUSeconds(os.Getpid()); return v }
	simCPUNow := func() float64 { v, _ := simCPU(); return v }

	ir := &interactiveReviews{ctx: ctx, rv: rv, c: c, pubs: pubs}
	var samples []floorSample
	// cpu sums each kind of window's CPU readings: [on] of the burner
	// child, the bench process and the simulator child, and wall time.
	type cpuSums struct{ child, bench, sim, wall float64 }
	var sums [2]cpuSums
	slice := plan.Window / floorSlices
	tick := time.NewTicker(time.Duration(float64(time.Second) / plan.Rate))
	defer tick.Stop()
	// Window -1 warms up and counts for neither kind: the process's first
	// reviews are slower (connections, caches, the store's first pages),
	// and with nothing burning the off windows read a p99 ratio of 0.68
	// [0.48, 0.91] when the first window counted (docs/benchmarks.md,
	// "Session 32 (s32h2)").
	for i := -1; i < 2*floorSlices; i++ {
		kind := i%4 == 1 || i%4 == 2 // off on on off
		warm := i < 0
		if err := setBurn(kind); err != nil {
			return Result{}, fmt.Errorf("burner: %w", err)
		}
		at, ch, be, si := time.Now(), childCPU(), benchCPU(), simCPUNow()
		end := at.Add(slice)
		for time.Now().Before(end) {
			if err := ir.next(tick.C); err != nil {
				return Result{}, err
			}
			// A review counts for the window it was submitted in.
			ir.submit("floor", func(_ time.Time, lat time.Duration) {
				if !warm {
					samples = append(samples, floorSample{lat: lat, on: kind})
				}
			})
		}
		k := 0
		if kind {
			k = 1
		}
		if warm {
			continue
		}
		sums[k].child += childCPU() - ch
		sums[k].bench += benchCPU() - be
		sums[k].sim += simCPUNow() - si
		sums[k].wall += time.Since(at).Seconds()
	}
	_ = setBurn(false)
	stopBurn()
	inBench.mu.Lock()
	burnErr := inBench.err
	inBench.mu.Unlock()
	if burnErr != nil {
		return Result{}, fmt.Errorf("bench burner on an idle thread: %w", burnErr)
	}
	ir.wait()
	if err := ir.failures(); err != nil {
		return Result{}, err
	}
	var off, burn []time.Duration
	for _, s := range samples {
		if s.on {
			burn = append(burn, s.lat)
		} else {
			off = append(off, s.lat)
		}
	}
	var r Result
	// The burner's windows stand for the sweep in the pooled figures
	// (addPooled): pooled_in_sweep_* are the burner's, with their
	// bootstrap intervals.
	r.samples = map[string][]time.Duration{"baseline": off, "sweep": burn, "in_sweep": burn}
	r.add("burn_child_asked", e.opts.BurnChild, "CPU s/s asked of the burner child")
	r.add("burn_bench_asked", e.opts.BurnBench, "CPU s/s asked of the burner in the bench process")
	r.add("burn_piece_ms", float64(min(burnPeriod, cmp.Or(e.opts.BurnPiece, burnPeriod)))/1e6, "ms, the bench burner's longest spin between yields")
	r.add("burn_workers", float64(workers), "goroutines of the bench-process burner")
	idle := 0.0
	if e.opts.BurnIdle {
		idle = 1
	}
	r.add("burn_idle", idle, "1: the bench-process burner's goroutines on SCHED_IDLE threads")
	r.add("gomaxprocs", float64(runtime.GOMAXPROCS(0)), "the bench process's GOMAXPROCS")
	r.add("baseline_reviews", float64(len(off)), "reviews submitted with the burner off")
	r.add("burn_reviews", float64(len(burn)), "reviews submitted with the burner on")
	for _, q := range []float64{0.50, 0.90, 0.95, 0.99} {
		name := fmt.Sprintf("p%.0f", 100*q)
		b, x := Percentile(off, q), Percentile(burn, q)
		r.add("baseline_"+name+"_ms", b, "ms (submit to published), burner off")
		r.add("burn_"+name+"_ms", x, "ms, burner on")
		r.add("burn_"+name+"_ratio", x/b, "burner on ÷ off")
	}
	perSec := func(v, wall float64) float64 { return v / max(wall, 1e-9) }
	for k, kind := range []string{"baseline", "burn"} {
		s := sums[k]
		r.add(kind+"_burn_child_cpu_per_second", perSec(s.child, s.wall), "CPU s/s of the burner child (its own /proc figure)")
		r.add(kind+"_bench_cpu_per_second", perSec(s.bench, s.wall), "CPU s/s of the bench process (burner goroutines included)")
		r.add(kind+"_sim_cpu_per_second", perSec(s.sim, s.wall), "CPU s/s of the simulator child")
	}
	return r, nil
}
