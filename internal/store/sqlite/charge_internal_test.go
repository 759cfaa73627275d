package sqlite

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestBatchWriteCharge: a batch-lane write whose context carries a
// charge (store.WithWriteCharge) has the writer tell it how long it ran
// the write, once per write and once per piece of a write in pieces; an
// interactive write's charge is never called (interactive work is not
// paced), nor is anything called for a batch write without one. The
// engine charges the pacer so for the batch lane's writes outside a
// paced piece (docs/benchmarks.md, "Session 28 (s28h1)").
func TestBatchWriteCharge(t *testing.T) {
	t.Parallel()
	s := OpenTest(t, Config{Synchronous: SyncNormal})
	var (
		mu      sync.Mutex
		charged []time.Duration
	)
	charge := func(d time.Duration) {
		mu.Lock()
		charged = append(charged, d)
		mu.Unlock()
	}
	const hold = 5 * time.Millisecond
	slow := func(tx *writeTx) error {
		if _, err := tx.Exec(`INSERT INTO objects (kind, id, body, updated_at) VALUES ('test', ?, x'00', 0)`, time.Now().String()); err != nil {
			return err
		}
		time.Sleep(hold)
		return nil
	}
	batch := store.WithWriteCharge(store.WithLane(context.Background(), job.LaneBatch), charge)
	if err := s.write(batch, slow); err != nil {
		t.Fatal(err)
	}
	if err := s.write(store.WithWriteCharge(context.Background(), charge), slow); err != nil { // interactive
		t.Fatal(err)
	}
	if err := s.write(store.WithLane(context.Background(), job.LaneBatch), slow); err != nil { // no charge
		t.Fatal(err)
	}
	// A batch-lane write of 3 pieces: each piece is charged.
	if err := s.writePieces(batch, 3*batchPiece, func(tx *writeTx, lo, hi int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(charged) != 4 {
		t.Fatalf("charged %d times (%v), want 4: the batch write and 3 pieces", len(charged), charged)
	}
	if charged[0] < hold {
		t.Errorf("the batch write was charged %v, want at least the %v it ran", charged[0], hold)
	}
}
