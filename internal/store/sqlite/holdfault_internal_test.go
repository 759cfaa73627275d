package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// The writer's hold (store.InteractiveWatcher, Config.BatchHold) keeps a
// transaction of batch-lane writes open while interactive work is in
// flight, so more writes share it than before, and for longer. These are
// its faults: a write rejected inside the held transaction, a failure
// that ends the transaction under the writes that joined it, and Close
// while the hold is open.

// putObject is a write of one objects row with id (a fresh one each
// call unless the caller repeats it): a repeat breaks the primary key.
func putObject(id string) func(tx *writeTx) error {
	return func(tx *writeTx) error {
		_, err := tx.Exec(`INSERT INTO objects (kind, id, body, updated_at) VALUES ('test', ?, x'00', 0)`, id)
		return err
	}
}

// hasObject reports whether the objects row id is committed, by a read
// on the read pool.
func hasObject(t *testing.T, s *Store, id string) bool {
	t.Helper()
	var n int
	if err := s.rdb.QueryRow(`SELECT count(*) FROM objects WHERE kind = 'test' AND id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// heldStore opens a store whose writer holds a batch-lane transaction
// open for up to 10 s while busy, true until the test says otherwise,
// reports interactive work in flight.
func heldStore(t *testing.T) (*Store, *atomic.Bool) {
	s := OpenTest(t, Config{Synchronous: SyncNormal, BatchHold: 10 * time.Second})
	busy := new(atomic.Bool)
	busy.Store(true)
	s.WatchInteractive(busy.Load)
	return s, busy
}

// heldBatchWrite starts a batch-lane write of fn on s, whose watcher
// reports interactive work in flight, and returns its answer once it ran
// (the writer then holds its transaction open).
func heldBatchWrite(t *testing.T, s *Store, fn func(tx *writeTx) error) <-chan error {
	t.Helper()
	ran := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.write(store.WithLane(context.Background(), job.LaneBatch), func(tx *writeTx) error {
			defer close(ran)
			return fn(tx)
		})
	}()
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the batch-lane write never ran")
	}
	return done
}

// joinHeld queues a write of fn on ctx's lane that joins the held
// transaction, and returns its answer; it waits until the writer ran it.
func joinHeld(ctx context.Context, s *Store, fn func(tx *writeTx) error) <-chan error {
	ran := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.write(ctx, func(tx *writeTx) error {
			defer close(ran)
			return fn(tx)
		})
	}()
	<-ran
	return done
}

// TestHeldTxRejectedWriteIsItsOwn: inside a held transaction, a
// batch-lane write rejected by the database (a duplicate primary key) and
// an interactive write that fails after its insert are each undone alone
// (their savepoints), and the batch-lane write that began the transaction
// and the interactive write that joins after them commit, in one
// transaction. A rejection must not take the held transaction's other
// writes with it: they were told nothing of it.
func TestHeldTxRejectedWriteIsItsOwn(t *testing.T) {
	t.Parallel()
	s, _ := heldStore(t)
	txs := s.txs.Load()
	batch := store.WithLane(context.Background(), job.LaneBatch)

	first := heldBatchWrite(t, s, putObject("first"))
	dup := joinHeld(batch, s, putObject("first")) // rejected: the key is first's
	errFailed := errors.New("the handler's write failed")
	failed := joinHeld(batch, s, func(tx *writeTx) error {
		if err := putObject("undone")(tx); err != nil {
			return err
		}
		return errFailed
	})
	select {
	case err := <-first:
		t.Fatalf("the held transaction committed (first: %v) before the interactive write joined", err)
	default:
	}
	if err := s.write(context.Background(), putObject("last")); err != nil {
		t.Fatalf("the interactive write that joined after the rejections: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the write that began the held transaction: %v", err)
	}
	if err := <-dup; err == nil {
		t.Fatal("a duplicate primary key was accepted: no write was rejected, the test injected no fault")
	}
	if err := <-failed; !errors.Is(err, errFailed) {
		t.Fatalf("the failing write answered %v, want its own error", err)
	}
	for id, want := range map[string]bool{"first": true, "undone": false, "last": true} {
		if got := hasObject(t, s, id); got != want {
			t.Errorf("object %q committed = %v, want %v", id, got, want)
		}
	}
	if got := s.txs.Load() - txs; got != 1 {
		t.Errorf("the writes took %d transactions, want 1: every one joined the held transaction", got)
	}
}

// TestHeldTxRolledBackUnderAWrite: a write whose failure ends the whole
// transaction (SQLite rolls a transaction back itself on some errors: a
// full disk, here PRAGMA max_page_count, and an INSERT OR ROLLBACK
// conflict) takes the writes before it in the transaction with it, and
// they must all be answered with an error. A write queued after it must
// not run outside the writer's transaction: its SAVEPOINT then began a
// transaction of its own, which its RELEASE committed at once, and the
// batch's COMMIT, failing for want of a transaction, answered a
// committed write with an error. It runs in the next transaction and is
// answered nil. The write that ended the transaction is answered its own
// error, and the others one that says their transaction failed and why
// (session 34: both were answered the transaction's bare "rolled back
// under one of its writes").
func TestHeldTxRolledBackUnderAWrite(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		first func(tx *writeTx) error // the write that begins the held transaction
		ends  func(tx *writeTx) error // the write whose failure ends it
		cause string                  // in the error of the write that ends it
	}{
		"full disk": {
			first: func(tx *writeTx) error {
				var pages int
				if err := tx.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
					return err
				}
				if _, err := tx.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2)); err != nil {
					return err
				}
				return putObject("first")(tx)
			},
			ends: func(tx *writeTx) error {
				_, err := tx.Exec(`INSERT INTO objects (kind, id, body, updated_at) VALUES ('test', 'big', ?, 0)`, make([]byte, 1<<20))
				return err
			},
			cause: "full",
		},
		"INSERT OR ROLLBACK": {
			first: putObject("first"),
			ends: func(tx *writeTx) error {
				_, err := tx.Exec(`INSERT OR ROLLBACK INTO objects (kind, id, body, updated_at) VALUES ('test', 'first', x'00', 0)`)
				return err
			},
			cause: "UNIQUE",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, busy := heldStore(t)
			batch := store.WithLane(context.Background(), job.LaneBatch)
			first := heldBatchWrite(t, s, c.first)
			ended := joinHeld(batch, s, c.ends)
			after := s.write(context.Background(), putObject("after"))
			endErr := <-ended
			if endErr == nil {
				t.Fatal("the write meant to end the transaction succeeded: no fault was injected")
			}
			if !strings.Contains(endErr.Error(), c.cause) || strings.Contains(endErr.Error(), "transaction failed") {
				t.Errorf("the write that ended the transaction answered %q, want its own error (%s)", endErr, c.cause)
			}
			if err := <-first; err == nil {
				t.Errorf("the write whose transaction was rolled back under it answered nil")
			} else if !strings.Contains(err.Error(), "transaction failed") || !strings.Contains(err.Error(), c.cause) {
				t.Errorf("the write whose transaction was rolled back under it answered %q, want \"transaction failed\" and the cause (%s)", err, c.cause)
			}
			if hasObject(t, s, "first") {
				t.Errorf("object first is committed although its transaction was rolled back")
			}
			if got := hasObject(t, s, "after"); (after == nil) != got {
				t.Errorf("the write after the rollback answered %v and is committed = %v: its answer must say what happened", after, got)
			}
			if after != nil {
				t.Errorf("the write after the rollback answered %v, want it run in a transaction of its own and committed", after)
			}
			// The writer goes on: a later write commits as ever (nothing in
			// flight: no hold).
			busy.Store(false)
			if err := s.write(batch, putObject("later")); err != nil || !hasObject(t, s, "later") {
				t.Fatalf("a write after the rolled-back transaction: %v", err)
			}
		})
	}
}

// TestCloseDuringHold: Close while the writer holds a transaction open
// for interactive work that never ends returns at once, not at the
// hold's bound, and the held write is committed and durable (a reopened
// store has it) and answered nil, not lost with the process's exit.
func TestCloseDuringHold(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/us.db"
	// Not OpenTest: its cleanup's Close would wait for this test's Close,
	// which, should the test fail, never returns.
	s, err := Open(context.Background(), Config{Path: path, Region: "us", BatchHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var closing atomic.Bool
	t.Cleanup(func() {
		if !closing.Load() {
			s.Close()
		}
	})
	s.WatchInteractive(func() bool { return true })
	held := heldBatchWrite(t, s, putObject("held"))
	time.Sleep(20 * time.Millisecond) // the writer is in its hold
	select {
	case err := <-held:
		t.Fatalf("the batch-lane write was answered (%v) before Close: the writer was not holding, no fault injected", err)
	default:
	}
	closed := make(chan error, 1)
	t0 := time.Now()
	closing.Store(true)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30 s while the writer held a transaction")
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Close took %v: it waited for the hold", d)
	}
	if err := <-held; err != nil {
		t.Fatalf("the held write answered %v at Close, want it committed", err)
	}
	again := OpenTest(t, Config{Path: path})
	if !hasObject(t, again, "held") {
		t.Fatal("the held write, answered nil, is not in the reopened store")
	}
}
