// Package idlethread runs a goroutine's CPU on an operating-system thread
// the kernel schedules only when no normal thread wants a core (Linux
// SCHED_IDLE, sched(7)).
//
// Go cannot prioritise one goroutine over another: the batch lane's
// governor and pacer bound how much batch CPU runs, not who gets a core
// first when both lanes want one (docs/benchmarks.md, "Session 36
// (s36h1)"). The kernel can, per thread: a waking normal thread preempts a
// SCHED_IDLE one at once. A goroutine that calls Enter is locked to its
// thread (runtime.LockOSThread) and that thread enters SCHED_IDLE; Leave
// puts the thread back and unlocks it when the kernel allows, or leaves
// the goroutine locked, so that the runtime ends the thread when the
// goroutine exits and no idle thread ever runs another goroutine.
//
// The goroutine keeps its P while the kernel starves its thread: with
// GOMAXPROCS equal to the cores, each idle goroutine running is a P lost
// to the rest of the process. Callers give the process spare Ps
// (GOMAXPROCS above the cores) for the idle threads to sit on.
package idlethread

import (
	"errors"
	"time"
)

// ErrUnsupported is what Enter returns where the operating system has no
// idle scheduling class (every system but Linux).
var ErrUnsupported = errors.New("idlethread: SCHED_IDLE needs Linux")

// Thread is the calling goroutine's hold on an idle thread, from Enter.
type Thread struct {
	restore func() bool // puts the thread's policy back; false: not permitted
	tid     int         // the thread's id, for its CPU clock
}

// Enter locks the calling goroutine to its thread and moves the thread to
// SCHED_IDLE. On error the goroutine is as it was (not locked). Every
// successful Enter needs a Leave on the same goroutine.
func Enter() (*Thread, error) { return enter() }

// Leave ends t's hold. Where the kernel lets the thread leave SCHED_IDLE
// (root, CAP_SYS_NICE or an RLIMIT_NICE that allows the old nice) it does
// and the goroutine is unlocked; otherwise the goroutine stays locked to
// the idle thread, which the runtime ends when the goroutine exits, so a
// caller that could not restore should let the goroutine end soon. It
// reports whether the thread was restored.
func (t *Thread) Leave() bool {
	if t == nil {
		return true
	}
	return t.restore()
}

// CPU returns the CPU time (user and system) t's thread has used since it
// was made, from the kernel's clock of that thread (the clock the thread
// itself reads as CLOCK_THREAD_CPUTIME_ID), and whether it could read it.
// Between Enter and Leave the goroutine that entered is locked to the
// thread and the thread runs nothing else, so the difference of two
// readings is that goroutine's CPU time: not the time it waited for a
// core, which on an idle thread may be most of its wall time. Any
// goroutine may call it meanwhile (the clock is the thread's, not the
// caller's). After Leave the thread may run other goroutines or have
// ended: read it last before Leave.
func (t *Thread) CPU() (time.Duration, bool) {
	if t == nil {
		return 0, false
	}
	return threadCPU(t.tid)
}

// Idle reports whether the calling goroutine's thread is SCHED_IDLE at
// this moment (false, with an error, where it cannot say). Tests ask it
// from inside a handler; a goroutine that is not locked may be on another
// thread a moment later.
func Idle() (bool, error) { return idle() }
