//go:build cpulabels && linux

package sqlite

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// threadClocks reads the calling thread's clocks: its CPU time
// (CLOCK_THREAD_CPUTIME_ID, exact to the call, user and system), the
// monotonic clock (CLOCK_MONOTONIC, the clock the kernel's "mono" trace
// clock reads, for a join with ftrace), both in ns.
func threadClocks() (cpu, mono int64) {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	cpu = ts.Nano()
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return cpu, ts.Nano()
}

// gettid is the calling thread's id.
func gettid() int { return syscall.Gettid() }

// threadSched is an open /proc/thread-self/schedstat of the thread that
// opened it (the writer's, locked to it).
type threadSched struct {
	f   *os.File
	tid int
}

// openThreadSched opens the calling thread's schedstat; nil when it cannot
// (a kernel without CONFIG_SCHED_INFO).
func openThreadSched() *threadSched {
	f, err := os.Open("/proc/thread-self/schedstat")
	if err != nil {
		return nil
	}
	t := &threadSched{f: f, tid: syscall.Gettid()}
	traceThread(t.tid)
	return t
}

// traceThread points the scheduler events of the trace instance named by
// $RATELANE_ANATOMY_FTRACE (bench/commitanatomy/ftrace.sh sets it) at
// thread tid, the writer's: its switches on and off a CPU and its wakeups,
// from which bench/commitanatomy splits a COMMIT's time off a CPU into
// runnable, asleep in a sync, and asleep elsewhere (a thread parked by Go
// waiting for a P). A later writer (the next store) takes them over.
func traceThread(tid int) {
	dir := os.Getenv("RATELANE_ANATOMY_FTRACE")
	if dir == "" {
		return
	}
	id := strconv.Itoa(tid)
	os.WriteFile(dir+"/events/sched/sched_switch/filter", []byte("prev_pid == "+id+" || next_pid == "+id), 0)
	os.WriteFile(dir+"/events/sched/sched_wakeup/filter", []byte("pid == "+id), 0)
}

// read returns the thread's run-queue wait (run_delay: the time it was
// runnable but not running, ns, summed up to its last time on a CPU) and
// its timeslices (times it was put on a CPU). Its first field, the CPU
// time, is only as fresh as the thread's last tick or switch: the CPU
// time comes from threadClocks instead.
func (t *threadSched) read() (wait, slices int64) {
	if t == nil {
		return 0, 0
	}
	var b [96]byte
	n, err := t.f.ReadAt(b[:], 0)
	if n == 0 && err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b[:n]))
	if len(f) < 3 {
		return 0, 0
	}
	wait, _ = strconv.ParseInt(f[1], 10, 64)
	slices, _ = strconv.ParseInt(f[2], 10, 64)
	return wait, slices
}

func (t *threadSched) close() {
	if t != nil {
		t.f.Close()
	}
}
