package sqlite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
)

// laneWriter drives the single writer of a real store with writes of
// either lane whose bodies the test holds, and records the order the
// writer ran them in.
type laneWriter struct {
	t     *testing.T
	s     *Store
	mu    sync.Mutex
	order []string
	wg    sync.WaitGroup
	errs  chan error
}

func newLaneWriter(t *testing.T) *laneWriter {
	t.Helper()
	s := OpenTest(t, Config{Synchronous: SyncNormal})
	return &laneWriter{t: t, s: s, errs: make(chan error, 64)}
}

// submit calls write in lane from its own goroutine; the write inserts
// an object named name (a real statement in the writer's transaction),
// then, when hold is not nil, signals started and waits for hold, then
// returns fail.
func (w *laneWriter) submit(lane job.Lane, name string, started chan<- struct{}, hold <-chan struct{}, fail error) {
	ctx := store.WithLane(context.Background(), lane)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		err := w.s.write(ctx, func(tx *writeTx) error {
			w.mu.Lock()
			w.order = append(w.order, name)
			w.mu.Unlock()
			if _, err := tx.Exec(`INSERT INTO objects (kind, id, body, updated_at) VALUES ('test', ?, x'00', 0)`, name); err != nil {
				return err
			}
			if hold != nil {
				close(started)
				<-hold
			}
			return fail
		})
		if !errors.Is(err, fail) {
			w.errs <- fmt.Errorf("write %s: %v, want %v", name, err, fail)
		}
	}()
}

// running submits a write of lane that holds the writer until the
// returned channel is closed, and waits until the writer runs it.
func (w *laneWriter) running(lane job.Lane, name string, fail error) chan<- struct{} {
	started, hold := make(chan struct{}), make(chan struct{})
	w.submit(lane, name, started, hold, fail)
	testkit.Recv(w.t, started, testkit.Timeout, name+" running")
	return hold
}

// queued waits until n writes wait in q.
func (w *laneWriter) queued(q chan *writeReq, n int, what string) {
	testkit.WaitFor(w.t, testkit.Timeout, what, func() bool { return len(q) == n })
}

func (w *laneWriter) finish() []string {
	w.wg.Wait()
	close(w.errs)
	for err := range w.errs {
		w.t.Error(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.order)
}

// TestInteractiveWriteWaitsBehindAtMostOneBatchWrite: while a batch-lane
// write runs, five more batch-lane writes queue and then an interactive
// one; the interactive write runs right after the running batch write
// (in its transaction), before the five, so it waited behind one batch
// write, and the writer's Behind histogram says so. With one FIFO queue
// it ran after all six.
func TestInteractiveWriteWaitsBehindAtMostOneBatchWrite(t *testing.T) {
	t.Parallel()
	w := newLaneWriter(t)
	hold := w.running(job.LaneBatch, "b0", nil)
	for i := 1; i <= 5; i++ {
		w.submit(job.LaneBatch, fmt.Sprintf("b%d", i), nil, nil, nil)
	}
	w.queued(w.s.batchReqs, 5, "five batch-lane writes queued")
	w.submit(job.LaneInteractive, "i", nil, nil, nil)
	w.queued(w.s.reqs, 1, "the interactive write queued")
	close(hold)
	order := w.finish()
	if len(order) != 7 || order[0] != "b0" || order[1] != "i" {
		t.Fatalf("the writer ran %v, want b0, i, then b1..b5", order)
	}
	lanes := w.s.WriteCounts().Lanes
	in := lanes[job.LaneInteractive].Behind
	if in.Count != 1 || in.Buckets[1] != 1 || in.Buckets[0] != 0 { // bounds 0, 1, ...
		t.Fatalf("interactive Behind %+v, want one write behind exactly one batch write", in)
	}
	// b0 committed with the interactive write; b1..b5 ran after it.
	if b := lanes[job.LaneBatch].Behind; b.Count != 6 || b.Buckets[0] != 0 || b.Buckets[1] != 6 {
		t.Fatalf("batch Behind %+v, want each of the six behind the one interactive write", b)
	}
	if wt := lanes[job.LaneInteractive].Wait; wt.Count != 1 || lanes[job.LaneBatch].Wait.Count != 6 {
		t.Fatalf("Wait counts interactive %d, batch %d; want 1 and 6", wt.Count, lanes[job.LaneBatch].Wait.Count)
	}
}

// TestInteractiveWritesGoFirst: writes queued while an interactive write
// runs: batch-lane ones first, then interactive ones. The waiting
// interactive writes join the running one's transaction; the batch-lane
// writes wait for the next, so they do not delay the interactive commit.
func TestInteractiveWritesGoFirst(t *testing.T) {
	t.Parallel()
	w := newLaneWriter(t)
	hold := w.running(job.LaneInteractive, "i0", nil)
	w.submit(job.LaneBatch, "b1", nil, nil, nil)
	w.submit(job.LaneBatch, "b2", nil, nil, nil)
	w.queued(w.s.batchReqs, 2, "two batch-lane writes queued")
	w.submit(job.LaneInteractive, "i1", nil, nil, nil)
	w.submit(job.LaneInteractive, "i2", nil, nil, nil)
	w.queued(w.s.reqs, 2, "two interactive writes queued")
	tx0 := w.s.WriteCounts().Transactions
	close(hold)
	order := w.finish()
	if len(order) != 5 || order[0] != "i0" || !slices.Contains(order[1:3], "i1") || !slices.Contains(order[1:3], "i2") {
		t.Fatalf("the writer ran %v, want i0, i1 and i2, then b1 and b2", order)
	}
	if n := w.s.WriteCounts().Transactions - tx0; n != 2 {
		t.Fatalf("%d transactions, want 2: the interactive writes', then the batch lane's", n)
	}
	if in := w.s.WriteCounts().Lanes[job.LaneInteractive].Behind; in.Buckets[0] != 3 {
		t.Fatalf("interactive Behind %+v, want all three behind no batch write", in)
	}
}

// TestFailedFirstWriteLeavesTheOthers: the first write of a transaction
// runs without a savepoint; when it fails, the transaction is rolled back
// alone and the writes queued meanwhile commit in the next one.
func TestFailedFirstWriteLeavesTheOthers(t *testing.T) {
	t.Parallel()
	w := newLaneWriter(t)
	boom := errors.New("boom")
	hold := w.running(job.LaneBatch, "b0", boom)
	w.submit(job.LaneInteractive, "i", nil, nil, nil)
	w.queued(w.s.reqs, 1, "the interactive write queued")
	close(hold)
	if order := w.finish(); !slices.Equal(order, []string{"b0", "i"}) {
		t.Fatalf("the writer ran %v, want b0 then i", order)
	}
	ctx := context.Background()
	if _, err := w.s.GetObject(ctx, "test", "b0"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the failed write's object: %v, want it rolled back", err)
	}
	if _, err := w.s.GetObject(ctx, "test", "i"); err != nil {
		t.Fatalf("the interactive write's object: %v", err)
	}
}

// TestInteractiveWriteBetweenBatchPieces: a batch-lane write of 100 rows
// goes through the writer as pieces of batchPiece rows; an interactive
// write queued while the first piece runs runs right after that piece,
// before the other three, and every piece runs once, in order. As one
// write (before pieces) the interactive write waited for all 100 rows.
func TestInteractiveWriteBetweenBatchPieces(t *testing.T) {
	t.Parallel()
	w := newLaneWriter(t)
	started, hold := make(chan struct{}), make(chan struct{})
	const rows = 100
	var pieces int
	done := make(chan error, 1)
	go func() {
		done <- w.s.writePieces(store.WithLane(context.Background(), job.LaneBatch), rows, func(tx *writeTx, lo, hi int) error {
			w.mu.Lock()
			w.order = append(w.order, fmt.Sprintf("b%d-%d", lo, hi))
			w.mu.Unlock()
			if pieces++; pieces == 1 {
				close(started)
				<-hold
			}
			return nil
		})
	}()
	testkit.Recv(t, started, testkit.Timeout, "the first piece running")
	w.queued(w.s.batchReqs, 3, "the other three pieces queued")
	w.submit(job.LaneInteractive, "i", nil, nil, nil)
	w.queued(w.s.reqs, 1, "the interactive write queued")
	close(hold)
	if err := testkit.Recv(t, done, testkit.Timeout, "the pieces written"); err != nil {
		t.Fatal(err)
	}
	want := []string{"b0-32", "i", "b32-64", "b64-96", "b96-100"}
	if order := w.finish(); !slices.Equal(order, want) {
		t.Fatalf("the writer ran %v, want %v", order, want)
	}
}

// TestBatchPiecesAfterAFailureDoNotRun: a piece that fails stops the
// write: the pieces after it are not run, and the write answers the
// failure.
func TestBatchPiecesAfterAFailureDoNotRun(t *testing.T) {
	t.Parallel()
	w := newLaneWriter(t)
	boom := errors.New("refused")
	var ran []int
	err := w.s.writePieces(store.WithLane(context.Background(), job.LaneBatch), 100, func(tx *writeTx, lo, hi int) error {
		ran = append(ran, lo)
		if lo == 32 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !slices.Equal(ran, []int{0, 32}) {
		t.Fatalf("pieces run from %v, err %v; want 0 and 32, then %v", ran, err, boom)
	}
}
