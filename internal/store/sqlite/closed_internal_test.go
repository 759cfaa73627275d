package sqlite

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestWriteAfterCloseReturns: a write queued once Close has stopped the
// writer is answered errClosed, not left waiting. The queue has room, so
// the write's send succeeds after the writer's last look at it; it
// waited forever (an engine's last finish hung its Stop when a test
// closed the store first). Writes racing Close each return, run or not.
func TestWriteAfterCloseReturns(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Go(func() {
			ctx := context.Background()
			if i%2 == 0 {
				ctx = store.WithLane(ctx, job.LaneBatch)
			}
			errs <- s.write(ctx, func(*writeTx) error { return nil })
		})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { errs <- s.write(context.Background(), func(*writeTx) error { return nil }) })
	wg.Go(func() {
		errs <- s.writePieces(store.WithLane(context.Background(), job.LaneBatch), 3*batchPiece, func(*writeTx, int, int) error { return nil })
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("writes made as and after the store closed did not return within 10 s")
	}
	close(errs)
	closed := 0
	for err := range errs {
		if err != nil && !errors.Is(err, errClosed) {
			t.Errorf("write: %v, want nil or errClosed", err)
		}
		if errors.Is(err, errClosed) {
			closed++
		}
	}
	if closed < 2 {
		t.Errorf("%d writes answered errClosed, want at least the two made after Close", closed)
	}
}
