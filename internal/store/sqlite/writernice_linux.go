//go:build linux

package sqlite

import (
	"runtime"
	"syscall"
)

// niceWriterThread locks the calling goroutine (the writer) to its OS
// thread for the rest of its life and sets that thread's nice to n. The
// goroutine never unlocks: when it returns (Close), Go ends the thread
// with it (or, should it be the process's main thread, parks it for good),
// so the changed priority never reaches another goroutine.
// Lowering a nice (n below the process's) needs CAP_SYS_NICE or a
// matching RLIMIT_NICE; the error says so.
func niceWriterThread(n int) error {
	runtime.LockOSThread()
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), n)
}

// writerNiceHook is niceWriterThread, a variable so that a test can have the
// OS refuse.
var writerNiceHook = niceWriterThread

// writerNiceSupported reports whether WriterNice can be set here.
const writerNiceSupported = true
