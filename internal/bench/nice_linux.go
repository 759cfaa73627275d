package bench

import "syscall"

// setThreadNice sets one thread's nice value: on Linux setpriority with
// PRIO_PROCESS and a thread id acts on that thread alone, which is why
// renice walks every task of the child.
func setThreadNice(tid, nice int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice)
}
