// Package atomicfile writes a file so that a reader, or the process after
// a crash or a power loss, sees either the old file or the whole new one:
// the data goes to a temporary file in the same directory, is synced,
// renamed over the target, and the directory is synced so the rename
// itself is on disk.
//
// ratelane marks some things done only after such a file is written (an
// rdjsonl publication, the bootstrap admin key): without the syncs a power
// loss after the rename could leave an empty file behind work already
// recorded as published.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// Write writes path atomically with the given mode (set on the temporary
// file before any data is written, so the content is never readable under
// a wider mode). write receives the temporary file; its error aborts the
// write and leaves path as it was.
func Write(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := write(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. Windows cannot sync a directory
// handle (its file system records the rename in its own journal), so
// there it does nothing.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
