package engine

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane/internal/idlethread"
)

// BatchThreadsIdle is Config.BatchThreadPolicy's one value besides the
// default (""): the batch lane computes on SCHED_IDLE threads.
const BatchThreadsIdle = "idle"

// threadPolicy is how this engine runs its computing batch pieces on
// operating-system threads (Config.BatchThreadPolicy).
//
// Go has no goroutine priorities: the governor and the pacer bound how
// much batch CPU runs, not who gets a core first when both lanes want one,
// and an interactive goroutine woken beside a computing batch piece waits
// in the OS run queue for it (docs/benchmarks.md, "Session 35 (s35h1)").
// Under the idle policy a computing batch piece locks its goroutine to
// its thread and moves the thread to SCHED_IDLE (internal/idlethread):
// the kernel runs it only on a core no normal thread wants, and a waking
// normal thread preempts it at once. Each such goroutine keeps its P
// while starved, so the process needs spare Ps (GOMAXPROCS = cores +
// BatchCPUs, with BatchCPUs pinned): the caller sets them, not the
// engine.
type threadPolicy struct {
	// handlers: computing batch handlers run on idle threads, each on a
	// goroutine of its own that ends with the job, so that a thread that
	// cannot leave SCHED_IDLE ends with it.
	handlers bool
	// pieces: the other computing pieces (a batch group's aggregation, a
	// sweep stretch) too, on the engine's long-lived goroutines; only
	// where the kernel lets a thread leave SCHED_IDLE (root, CAP_SYS_NICE,
	// RLIMIT_NICE), as the goroutine goes on with other work after.
	pieces bool

	// entered counts pieces that ran on an idle thread; ended the threads
	// that could not be restored and ended with their goroutine (threads
	// the runtime had to make anew).
	entered, ended atomic.Int64
}

// newThreadPolicy sets the policy named up for this process: it tries
// entering SCHED_IDLE and leaving it on a thread of its own, and logs
// what it could not do. An unknown name is an error; "" is off.
func newThreadPolicy(name string, log *slog.Logger) (*threadPolicy, error) {
	switch name {
	case "":
		return &threadPolicy{}, nil
	case BatchThreadsIdle:
	default:
		return nil, fmt.Errorf("engine: BatchThreadPolicy %q: want \"\" or %q", name, BatchThreadsIdle)
	}
	in, back, err := probeIdle()
	switch {
	case !in:
		log.Warn("batch thread policy idle: SCHED_IDLE not available, batch work runs on normal threads", "err", err)
		return &threadPolicy{}, nil
	case !back:
		log.Info("batch thread policy idle: threads cannot leave SCHED_IDLE here (no CAP_SYS_NICE): computing batch handlers only, one thread each")
	}
	return &threadPolicy{handlers: true, pieces: back}, nil
}

// probeIdle tries idlethread.Enter and Leave on a goroutine of its own,
// whose thread ends with it should it stay idle.
func probeIdle() (in, back bool, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t, e := idlethread.Enter()
		if e != nil {
			err = e
			return
		}
		in, back = true, t.Leave()
	}()
	<-done
	return in, back, err
}

// enter moves the calling goroutine to an idle thread when on is true and
// returns its hold on it, nil otherwise (nil's methods do nothing). A
// failure leaves the piece on its thread as it was: it still runs, at
// normal priority, and is paced by its wall time.
func (p *threadPolicy) enter(on bool) *idleThread {
	if !on {
		return nil
	}
	t, err := idlethread.Enter()
	if err != nil {
		return nil
	}
	p.entered.Add(1)
	return &idleThread{p: p, t: t}
}

// idleThread is a computing piece's hold on its idle thread (enter), and
// the thread's CPU clock for the pacer (pieceClock).
type idleThread struct {
	p *threadPolicy
	t *idlethread.Thread
	// left is set once leave read the clock a last time (final, ok):
	// after Leave the thread runs other goroutines, or has ended.
	left    atomic.Bool
	final   time.Duration
	finalOK bool
}

// cpu is the thread's CPU time so far (frozen at leave), and whether it
// could be read; false for nil.
func (th *idleThread) cpu() (time.Duration, bool) {
	if th == nil {
		return 0, false
	}
	if th.left.Load() {
		return th.final, th.finalOK
	}
	return th.t.CPU()
}

// leave ends the hold, once (a second UnlockOSThread would undo a
// caller's lock); only the goroutine that entered calls it.
func (th *idleThread) leave() {
	if th == nil || th.left.Load() {
		return
	}
	th.final, th.finalOK = th.t.CPU()
	th.left.Store(true)
	if !th.t.Leave() {
		th.p.ended.Add(1)
	}
}

// ThreadCounts are an engine's batch thread-policy totals
// (Config.BatchThreadPolicy).
type ThreadCounts struct {
	// Policy is what runs on idle threads: "" (nothing), "handlers" or
	// "pieces" (handlers and the other computing pieces).
	Policy string
	// Entered counts computing pieces that ran on an idle thread; Ended
	// the threads that could not leave SCHED_IDLE and ended with their
	// goroutine, each one the runtime makes anew.
	Entered, Ended int64
}

// ThreadCounts returns the engine's batch thread-policy totals. It is safe
// for concurrent use.
func (e *Engine) ThreadCounts() ThreadCounts {
	p := e.threads
	c := ThreadCounts{Entered: p.entered.Load(), Ended: p.ended.Load()}
	switch {
	case p.pieces:
		c.Policy = "pieces"
	case p.handlers:
		c.Policy = "handlers"
	}
	return c
}

// IdleThreadProcs is what a process whose engines run under
// BatchThreadsIdle sets: the governor's width pinned at what it is for
// procs Ps (batchCPUs when positive, otherwise DefaultBatchCPUs(procs)),
// and GOMAXPROCS raised by that width for each of its engines, so that
// the interactive lane keeps procs Ps on normal threads while each
// computing batch piece sits on a spare one. With the governor off
// (batchCPUs negative) the batch lane's computing pieces are not bounded
// and no count of spare Ps would do: ok is false.
func IdleThreadProcs(procs, batchCPUs, engines int) (gomaxprocs, width int, ok bool) {
	if batchCPUs < 0 {
		return procs, batchCPUs, false
	}
	width = cmp.Or(batchCPUs, DefaultBatchCPUs(procs))
	return procs + width*max(1, engines), width, true
}
