package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// unpacedSetup opens a store with two waiting jobs on the unpaced key k
// and leases one of them at T0, which leaves k's state in s.unpaced.
func unpacedSetup(t *testing.T) (*Store, context.Context) {
	t.Helper()
	ctx := context.Background()
	s := OpenTest(t, Config{Synchronous: SyncNormal})
	a, b := storetest.NewJob("acme", job.LaneBatch, "k"), storetest.NewJob("acme", job.LaneBatch, "k")
	if _, err := s.Insert(ctx, []*job.Job{a, b}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lease(ctx, store.LeaseParams{Now: storetest.T0, Max: 1, LeaseFor: time.Minute}); err != nil || len(got) != 1 {
		t.Fatalf("first lease: %d jobs, %v; want 1", len(got), err)
	}
	var held bool
	if err := s.write(ctx, func(*writeTx) error {
		_, held = s.unpaced["k"]
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the lease did not keep the unpaced key's state")
	}
	return s, ctx
}

// TestUnpacedKeysSeeOtherConnections: a key's row changed by another
// connection (another process: a second store on the file, a manual fix)
// is read again, not answered from the writer's copy. The other
// connection pauses k for an hour; the next lease must not take its job.
func TestUnpacedKeysSeeOtherConnections(t *testing.T) {
	t.Parallel()
	s, ctx := unpacedSetup(t)
	other, err := sql.Open(driverName, dsn(s.Path(), SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pause := storetest.T0.Add(time.Hour)
	if _, err := other.ExecContext(ctx, `UPDATE limit_keys SET paused_until = ? WHERE name = 'k'`, ns(pause)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Lease(ctx, store.LeaseParams{Now: storetest.T0.Add(time.Second), Max: 1, LeaseFor: time.Minute})
	if err != nil || len(got) != 0 {
		t.Fatalf("lease of a key paused by another connection: %d jobs, %v; want none", len(got), err)
	}
	got, err = s.Lease(ctx, store.LeaseParams{Now: pause, Max: 1, LeaseFor: time.Minute})
	if err != nil || len(got) != 1 {
		t.Fatalf("lease at the pause's end: %d jobs, %v; want 1", len(got), err)
	}
}

// TestUnpacedKeysForgetRolledBackWrites: a write that read a key state it
// had itself written, then failed, leaves no trace of that state: the row
// is as before, and so is what the next lease decides on.
func TestUnpacedKeysForgetRolledBackWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range failingWrites {
		shared := tc.shared
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ctx := unpacedSetup(t)
			failed := errors.New("the write fails after pausing k")
			fail := func(tx *writeTx) error {
				keys, err := s.loadKeys(tx, []string{"k"})
				if err != nil {
					return err
				}
				keys["k"].PausedUntil = storetest.T0.Add(time.Hour)
				if err := s.saveKeys(tx, []*admission.State{keys["k"]}); err != nil {
					return err
				}
				if _, err := s.loadKeys(tx, []string{"k"}); err != nil { // reads the paused state back
					return err
				}
				if tc.panics {
					panic("the write panics after pausing k")
				}
				return failed
			}
			err := runFailingWrite(t, s, fail, shared)
			if tc.panics && (err == nil || !strings.Contains(err.Error(), "panicked")) {
				t.Fatalf("the panicking write: %v; want a panic reported as an error", err)
			} else if !tc.panics && !errors.Is(err, failed) {
				t.Fatalf("the failing write: %v; want %v", err, failed)
			}
			got, err := s.Lease(ctx, store.LeaseParams{Now: storetest.T0.Add(time.Second), Max: 1, LeaseFor: time.Minute})
			if err != nil || len(got) != 1 {
				t.Fatalf("lease after the rolled-back pause: %d jobs, %v; want 1", len(got), err)
			}
		})
	}
}

// failingWrites are the ways a test's write fails under runFailingWrite:
// returning an error alone in its transaction, returning one inside a
// savepoint of a shared transaction, and panicking there. A test of what
// a failed write leaves behind runs each.
var failingWrites = []struct {
	name           string
	shared, panics bool
}{{"alone", false, false}, {"in a shared transaction", true, false}, {"panicking in a shared transaction", true, true}}

// runFailingWrite runs fail as a write of s and returns its result. Alone
// (shared false), it is one write in its own transaction, run without a
// savepoint; shared, the writer is held in a first write while fail and
// another write are queued, so that it then drains both into one
// transaction and fail runs inside a savepoint.
func runFailingWrite(t *testing.T, s *Store, fail func(*writeTx) error, shared bool) error {
	t.Helper()
	ctx := context.Background()
	if !shared {
		return s.write(ctx, fail)
	}
	hold, started, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- s.write(ctx, func(*writeTx) error { close(started); <-hold; return nil })
	}()
	<-started
	a := &writeReq{fn: fail, done: make(chan error, 1)}
	b := &writeReq{fn: func(*writeTx) error { return nil }, done: make(chan error, 1)}
	s.reqs <- a
	s.reqs <- b
	close(hold)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-b.done; err != nil {
		t.Fatal(err)
	}
	return <-a.done
}
