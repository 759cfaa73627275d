package sqlite_test

import (
	"testing"
	"time"

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

// TestConformanceBatchSyncDefer runs the conformance suite with the
// batch lane's deferred syncs on (sqlite.Config.BatchSyncDefer): its
// batch-lane writes are committed without an fsync and answered after a
// later one, and must keep every promise of the contract.
func TestConformanceBatchSyncDefer(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		t.Helper()
		return sqlite.OpenTest(t, sqlite.Config{BatchSyncDefer: 5 * time.Millisecond})
	})
}
