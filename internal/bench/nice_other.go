//go:build !linux

package bench

import "errors"

// setThreadNice is Linux-only (nice_linux.go); renice does not call it
// elsewhere, and the bench's children (the batch node, the simulators)
// then run at their parent's priority.
func setThreadNice(tid, nice int) error {
	return errors.New("bench: setting a thread's priority is implemented for Linux only")
}
