package sqlite_test

import (
	"runtime"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T) store.Store {
	t.Helper()
	s := sqlite.OpenTest(t, sqlite.Config{})
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, open) }

// TestConformanceReadMmap runs the suite with the read pool memory-mapped
// (Config.ReadMmapSize), off by default.
func TestConformanceReadMmap(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		t.Helper()
		return sqlite.OpenTest(t, sqlite.Config{ReadMmapSize: 64 << 20})
	})
}

// TestConformanceWriterNice runs the suite with the writer locked to a
// thread of its own nice (Config.WriterNice), off by default. A positive
// nice needs no privilege.
func TestConformanceWriterNice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("WriterNice is Linux's")
	}
	storetest.Run(t, func(t *testing.T) store.Store {
		t.Helper()
		return sqlite.OpenTest(t, sqlite.Config{WriterNice: 5})
	})
}
