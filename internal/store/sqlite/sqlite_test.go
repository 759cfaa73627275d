package sqlite_test

import (
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
