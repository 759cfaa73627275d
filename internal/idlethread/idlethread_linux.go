//go:build linux

package idlethread

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// schedIdle is SCHED_IDLE (linux/sched.h); the syscall package does not
// name it. The calls below are the standard library's raw
// sched_getscheduler / sched_setscheduler (pid 0: the calling thread), so
// that the engine, which imports this package, stays on the standard
// library (internal/deptest's layering).
const schedIdle = 5

// schedParam is struct sched_param: the static priority, 0 for every
// policy but the real-time ones.
type schedParam struct{ priority int32 }

func getScheduler() (policy int, p schedParam, err error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, 0, 0, 0)
	if e != 0 {
		return 0, p, e
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETPARAM, 0, uintptr(unsafe.Pointer(&p)), 0); e != 0 {
		return 0, p, e
	}
	return int(r), p, nil
}

func setScheduler(policy int, p schedParam) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, uintptr(policy), uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}

func enter() (*Thread, error) {
	runtime.LockOSThread()
	policy, param, err := getScheduler()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	if err := setScheduler(schedIdle, schedParam{}); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return &Thread{tid: syscall.Gettid(), restore: func() bool {
		// Back to the policy (and, for a real-time one, the priority)
		// the thread had; unprivileged, the kernel refuses (RLIMIT_NICE).
		if setScheduler(policy, param) != nil {
			// Still SCHED_IDLE: stay locked, so that this thread runs no
			// other goroutine and ends with this one.
			return false
		}
		runtime.UnlockOSThread()
		return true
	}}, nil
}

func idle() (bool, error) {
	policy, _, err := getScheduler()
	if err != nil {
		return false, err
	}
	// The policy may carry SCHED_RESET_ON_FORK (0x40000000).
	return policy&^0x40000000 == schedIdle, nil
}

// threadCPU reads thread tid's CPU clock: the clock id the kernel makes
// for a thread's scheduler time (make_thread_cpuclock(tid, CPUCLOCK_SCHED)
// in linux/posix-timers.h, what glibc's pthread_getcpuclockid returns),
// so that a goroutine other than the locked one (an engine's abandoning
// of a handler) reads the same clock. The standard library's raw call,
// as above: the engine stays off golang.org/x/sys.
func threadCPU(tid int) (time.Duration, bool) {
	clock := int32(^uint32(tid)<<3 | 6) // CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED
	var ts syscall.Timespec
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, uintptr(clock), uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false // the thread has ended
	}
	return time.Duration(ts.Nano()), true
}
