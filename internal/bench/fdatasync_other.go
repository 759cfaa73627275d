//go:build !linux

package bench

import "os"

// fdatasync flushes f to the device: File.Sync (fsync, or F_FULLFSYNC
// on darwin) where Linux's fdatasync is not to be had.
func fdatasync(f *os.File) error { return f.Sync() }
