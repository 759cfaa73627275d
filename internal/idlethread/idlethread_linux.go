//go:build linux

package idlethread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

func enter() (*Thread, error) {
	runtime.LockOSThread()
	old, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	attr := *old
	attr.Size = unix.SizeofSchedAttr
	attr.Policy = unix.SCHED_IDLE
	attr.Priority = 0
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	back := *old
	back.Size = unix.SizeofSchedAttr
	return &Thread{restore: func() bool {
		if unix.SchedSetAttr(0, &back, 0) != nil {
			// Still SCHED_IDLE: stay locked, so that this thread runs no
			// other goroutine and ends with this one.
			return false
		}
		runtime.UnlockOSThread()
		return true
	}}, nil
}

func idle() (bool, error) {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return false, err
	}
	return a.Policy == unix.SCHED_IDLE, nil
}
