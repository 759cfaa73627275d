package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratelane/ratelane/internal/store"
)

// TestReadPoolRefusesRemovedFile: a database file deleted under a running
// store is not recreated by the read pool. A reader connection opened
// after the deletion (the pool opens them as it needs, and drops idle
// ones) used to create a new, empty database at the path, which reads
// then answered from as if every job were gone.
func TestReadPoolRefusesRemovedFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "us.db")
	s := OpenTest(t, Config{Path: path, Synchronous: SyncNormal})
	s.rdb.SetMaxIdleConns(0) // every read opens a new connection
	if _, err := s.Get(context.Background(), "no-such-job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get on a healthy store: %v, want ErrNotFound", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(context.Background(), "no-such-job")
	if err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the file was removed: %v, want an error opening it", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the read pool recreated the removed file: %v", err)
	}
}
