package bench

import (
	"errors"
	"syscall"
)

// setThreadNice sets one thread's nice value: on Linux setpriority with
// PRIO_PROCESS and a thread id acts on that thread alone, which is why
// renice walks every task of the child. A thread that has exited since
// it was listed has nothing left to set (nil).
func setThreadNice(tid, nice int) error {
	err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
