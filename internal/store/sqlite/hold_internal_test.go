package sqlite

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// insertObject is a small real write: one objects row.
func insertObject(tx *writeTx) error {
	_, err := tx.Exec(`INSERT INTO objects (kind, id, body, updated_at) VALUES ('test', ?, x'00', 0)`, time.Now().String())
	return err
}

// TestInteractiveWriteJoinsHeldBatchTx checks that, while a watcher
// reports interactive work in flight, a transaction of batch-lane writes
// stays open for an interactive write that arrives after the batch-lane
// write ran, and both commit together: the interactive write does not
// wait for a batch-lane commit of its own.
func TestInteractiveWriteJoinsHeldBatchTx(t *testing.T) {
	t.Parallel()
	s, _ := heldStore(t)
	txs := s.txs.Load()
	batchDone := heldBatchWrite(t, s, insertObject)
	// Without the hold the writer commits the batch-lane write at once;
	// give it ample time to, so that the check below cannot pass by a
	// race.
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-batchDone:
		t.Fatalf("the batch-lane write committed (err %v) while interactive work was in flight, before the bound", err)
	default:
	}
	t0 := time.Now()
	if err := s.write(context.Background(), insertObject); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the interactive write took %v: it waited for the hold's bound", d)
	}
	if err := <-batchDone; err != nil {
		t.Fatal(err)
	}
	if got := s.txs.Load() - txs; got != 1 {
		t.Errorf("the two writes took %d transactions, want 1: the interactive write joins the held batch-lane transaction", got)
	}
}

// TestBatchHoldBounded checks that the hold never keeps a batch-lane write
// past Config.BatchHold, however long interactive work stays in flight,
// that it holds nothing when no interactive work is in flight, and that
// it is off with BatchHold negative.
func TestBatchHoldBounded(t *testing.T) {
	t.Parallel()
	const hold = 40 * time.Millisecond
	batch := store.WithLane(context.Background(), job.LaneBatch)
	s := OpenTest(t, Config{Synchronous: SyncNormal, BatchHold: hold})
	var busy atomic.Bool
	busy.Store(true) // continuously in flight
	s.WatchInteractive(busy.Load)
	for i := range 5 {
		t0 := time.Now()
		if !writeWithin(t, s, batch, hold+5*time.Second) {
			t.Fatalf("batch-lane write %d not committed %v after its call: the hold is not bounded", i, hold+5*time.Second)
		}
		if d := time.Since(t0); d < hold {
			t.Errorf("batch-lane write %d committed after %v, want the hold of %v while interactive work is in flight", i, d, hold)
		}
	}

	// Nothing in flight: no hold.
	idle := OpenTest(t, Config{Synchronous: SyncNormal, BatchHold: time.Hour})
	idle.WatchInteractive(func() bool { return false })
	off := OpenTest(t, Config{Synchronous: SyncNormal, BatchHold: -1})
	off.WatchInteractive(func() bool { return true })
	for name, s := range map[string]*Store{"nothing in flight": idle, "BatchHold -1": off} {
		if !writeWithin(t, s, batch, 30*time.Second) {
			t.Fatalf("%s: the batch-lane write was held", name)
		}
	}
}

// writeWithin makes one write of an object on s with ctx (its lane) and
// reports whether it committed within d; a write that fails fails t.
func writeWithin(t *testing.T, s *Store, ctx context.Context, d time.Duration) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.write(ctx, insertObject) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		return true
	case <-time.After(d):
		return false
	}
}
