package bench

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data to the device as SQLite's unix VFS does on
// Linux (fdatasync, not fsync: the inode's times are not flushed).
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
