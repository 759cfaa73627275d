//go:build unix

package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// File modes and the umask are Unix's: on Windows the store's files get
// their access from the directory's ACL.

// TestFileModes opens a new store with the umask cleared (the worst case:
// nothing removes group and other bits) and checks the directory is 0700
// and the database, -wal and -shm files 0600. It changes the process
// umask, so it is not parallel (parallel tests start after it ends).
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, "us.db")
	s := sqlite.OpenTest(t, sqlite.Config{Path: path})
	if _, err := s.Insert(context.Background(), []*job.Job{storetest.NewJob("t", job.LaneBatch, "k")}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{dir: 0o700, path: 0o600, path + "-wal": 0o600, path + "-shm": 0o600}
	for p, mode := range want {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("%s: mode %o, want %o", p, got, mode)
		}
	}
}
