//go:build linux

package engine

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// ownThreadCPU is the calling thread's CPU time read with
// CLOCK_THREAD_CPUTIME_ID, apart from idlethread's clock of a thread by
// its id: the test's own measure of what a piece computed.
func ownThreadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// pacedPiece runs work as one computing piece of a budget of one turn
// with the pacer on (interactive work about), on an idle thread (idle) or
// on a goroutine that is not locked to its thread, and returns the
// pacer's counts and the piece's CPU and wall time measured by the test.
func pacedPiece(t *testing.T, idle bool, work func()) (c BudgetCounts, cpu, wall time.Duration) {
	t.Helper()
	in := newInFlight()
	b := newBatchBudget(0, 1, newBatchPacer(0.5, in), in)
	in.enter() // interactive work in flight: the pacer rests the lane
	defer in.leave()
	p := &threadPolicy{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !b.takeTurn(context.Background(), &yieldGate{}) {
			t.Error("the budget of one turn gave none")
			return
		}
		th := p.enter(idle)
		if idle && th == nil {
			t.Error("could not enter an idle thread")
		}
		release := b.releaser(th)
		runtime.LockOSThread() // for the test's own clock; nested in the idle thread's lock
		c0, w0 := ownThreadCPU(), time.Now()
		work()
		cpu, wall = ownThreadCPU()-c0, time.Since(w0)
		runtime.UnlockOSThread()
		release()
	}()
	<-done
	return (&Engine{budget: b, threads: p}).BudgetCounts(), cpu, wall
}

// spin computes for about d of the thread's CPU time.
func spin(d time.Duration) {
	for c0 := ownThreadCPU(); ownThreadCPU()-c0 < d; {
	}
}

// TestPacerChargesIdleThreadCPU: a piece on an idle thread is charged its
// thread's CPU time, not its wall time: one that waits 60 ms (a piece the
// kernel keeps off the CPU waits as much) is charged next to nothing, one
// that computes 30 ms is charged about that. A piece on a goroutine not
// locked to its thread is charged its wall time, waiting or not.
func TestPacerChargesIdleThreadCPU(t *testing.T) {
	sleep := func() { time.Sleep(60 * time.Millisecond) }
	compute := func() { spin(30 * time.Millisecond) }
	ms := func(d float64) time.Duration { return time.Duration(d * float64(time.Second)) }

	c, cpu, wall := pacedPiece(t, true, sleep)
	if got := ms(c.ChargedSeconds); got > 10*time.Millisecond || got > cpu+5*time.Millisecond {
		t.Errorf("idle thread, a piece that waited %v (CPU %v): charged %v, want its CPU time (counts %+v)", wall, cpu, got, c)
	}
	if ms(c.ThreadWallSeconds) < 60*time.Millisecond || c.ThreadCPUSeconds != c.ChargedSeconds {
		t.Errorf("idle thread, waiting piece: counts %+v, want the thread's wall ≥ 60 ms and all charged by its CPU", c)
	}

	c, cpu, wall = pacedPiece(t, true, compute)
	if got := ms(c.ChargedSeconds); got < cpu-2*time.Millisecond || got > cpu+5*time.Millisecond || got > wall+time.Millisecond {
		t.Errorf("idle thread, a piece that computed %v in %v: charged %v, want its CPU time (counts %+v)", cpu, wall, got, c)
	}

	c, _, wall = pacedPiece(t, false, sleep)
	if got := ms(c.ChargedSeconds); got < wall || c.ThreadCPUSeconds != 0 || c.ThreadWallSeconds != 0 {
		t.Errorf("normal thread, a piece that waited %v: charged %v, want its wall time (counts %+v)", wall, got, c)
	}
	c, _, wall = pacedPiece(t, false, compute)
	if got := ms(c.ChargedSeconds); got < wall || c.ThreadCPUSeconds != 0 {
		t.Errorf("normal thread, a piece that computed for %v: charged %v, want its wall time (counts %+v)", wall, got, c)
	}
}
