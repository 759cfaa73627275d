package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestBatchSyncDeferHasNoEffect: Config.BatchSyncDefer, retired in
// session 35, is accepted and changes nothing. With it set to an hour and
// a watcher reporting interactive work in flight throughout, a batch-lane
// PutObjects (a write the retired deferral committed without an fsync and
// answered only at the next sync: here, at the hour's bound) is answered
// by its own commit, and every write took a transaction of its own
// committed as any other.
func TestBatchSyncDeferHasNoEffect(t *testing.T) {
	t.Parallel()
	s := OpenTest(t, Config{BatchSyncDefer: time.Hour})
	s.WatchInteractive(func() bool { return true })
	batch := store.WithLane(context.Background(), job.LaneBatch)
	txs := s.txs.Load()
	for i := range 3 {
		// Without the retirement this call did not return (its answer
		// waited for an interactive commit or the hour).
		if err := s.PutObjects(batch, []store.Object{{Kind: "test", ID: string(rune('a' + i)), Body: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.txs.Load() - txs; got != 3 {
		t.Errorf("3 batch-lane writes, one after another, took %d transactions; want 3", got)
	}
}
