package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
)

// arrivalStore is a real SQLite store that keeps the engine's watcher
// (store.InteractiveWatcher), so a test can ask what the writer's
// interactiveAbout asks, and can fail its inserts.
type arrivalStore struct {
	*sqlite.Store
	busy func() bool
	fail bool
}

func (s *arrivalStore) WatchInteractive(busy func() bool) {
	s.busy = busy
	s.Store.WatchInteractive(busy)
}

var errInsertFailed = errors.New("insert failed")

func (s *arrivalStore) InsertLease(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config, p store.LeaseParams) ([]store.InsertResult, []*job.Job, error) {
	if s.fail {
		return nil, nil, errInsertFailed
	}
	return s.Store.InsertLease(ctx, os, jobs, def, p)
}

func (s *arrivalStore) InsertWithObjects(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	if s.fail {
		return nil, errInsertFailed
	}
	return s.Store.InsertWithObjects(ctx, os, jobs, def)
}

func (s *arrivalStore) Insert(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	if s.fail {
		return nil, errInsertFailed
	}
	return s.Store.Insert(ctx, jobs, def)
}

// TestArrivingInFlightUntilInsert: a request that will insert interactive
// work (Engine.Arriving) is interactive work in flight from its start, in
// the engine's one count and so to the store's watcher, before any write
// of it is queued; nested raises count one piece; its insert ends it once
// what it inserted is counted (the count never falls between them), and
// the caller's end after that does nothing (a second leave would panic).
// A request that fails before its insert, one whose insert is refused by
// the engine, and one whose store insert fails all end it through end:
// nothing stays in flight.
func TestArrivingInFlightUntilInsert(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &arrivalStore{Store: newSQLite(t, sqlite.Config{})}
		e := start(t, engine.Config{Store: s, Workers: 4, BatchCPUs: 1, PollInterval: time.Hour, Kinds: map[string]engine.Kind{
			"fetch":  fetchKind,
			"crunch": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome { return job.Outcome{Class: job.ClassSuccess} }), Computes: true},
			"report": {Aggregate: sumParts(new(atomic.Int64)), PartKinds: []string{"fetch"}, SweepEvery: time.Hour},
		}})
		synctest.Wait()
		if s.busy == nil {
			t.Fatal("the engine set no watcher on the store")
		}
		inFlight := func() int { _, _, n := engine.BudgetState(e); return n }
		idle := func(what string) {
			t.Helper()
			synctest.Wait()
			time.Sleep(time.Second) // past the watcher's grace, on the bubble's clock
			if n := inFlight(); n != 0 || s.busy() {
				t.Fatalf("%s: %d in flight, watcher busy %v; want 0, false: the arrival leaked", what, n, s.busy())
			}
		}
		idle("before any request")

		ctx, end := e.Arriving(context.Background())
		if n := inFlight(); n != 1 || !s.busy() {
			t.Fatalf("arriving: %d in flight, watcher busy %v; want 1, true", n, s.busy())
		}
		inner, endInner := e.Arriving(ctx) // the plug-in under the API route
		if n := inFlight(); n != 1 {
			t.Fatalf("nested arrival: %d in flight, want 1 (one piece)", n)
		}
		parent, parts := interactiveParent(1)
		if _, err := e.Jobs().InsertParts(inner, parent, parts, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		endInner()
		e.Notify()
		waitState(t, s, parent.ID, job.StatePublished)
		idle("inserted and published")
		end() // after the insert ended it: nothing (a second leave panics)
		idle("the caller's end after the insert")

		_, end = e.Arriving(context.Background())
		end() // a request refused before its insert (a bad diff)
		idle("a request that failed before its insert")

		ctx, end = e.Arriving(context.Background())
		bad, badParts := interactiveParent(1)
		badParts[0].ParentID = "another"
		if _, err := e.Jobs().InsertParts(ctx, bad, badParts, admission.Config{}); err == nil {
			t.Fatal("a part naming another parent was inserted")
		}
		end()
		idle("an insert the engine refused")

		s.fail = true
		ctx, end = e.Arriving(context.Background())
		p2, parts2 := interactiveParent(1)
		if _, err := e.Jobs().InsertParts(ctx, p2, parts2, admission.Config{}); !errors.Is(err, errInsertFailed) {
			t.Fatalf("insert: %v, want the store's failure", err)
		}
		end()
		s.fail = false
		idle("an insert the store failed")
	})
}
