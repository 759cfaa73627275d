package engine_test

import (
	"context"
	"sync"
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

// slowFetchKind is fetchKind whose handler first runs for d of the
// bubble's clock, longer than a lease lasts unless heartbeats extend it.
func slowFetchKind(d time.Duration) engine.Kind {
	return engine.Kind{Handler: engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return job.Outcome{Class: job.ClassTransient, Err: "cancelled"}
		}
		return fetchKind.Handler.Handle(ctx, j)
	})}
}

// TestInsertLeaseRuns: an interactive review's insert through an idle
// engine leases its part in its own write (the part is running when
// InsertParts returns, before any Notify), and the part runs as any
// leased job: its lease is extended by heartbeats past LeaseFor, it
// finishes once, its parent publishes. With one worker and many reviews,
// sequential and concurrent (the inserts that find the slot taken insert
// alone and are leased by the fetch loop), every review publishes and
// the worker slot is free at the end: no insert's lease leaks it. After
// Stop an insert leases nothing.
func TestInsertLeaseRuns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		run := 3 * time.Second // past LeaseFor: only heartbeats keep the lease
		e := start(t, engine.Config{Store: s, Workers: 1, LeaseFor: 2 * time.Second, HeartbeatEvery: 200 * time.Millisecond,
			MaxRunTime: time.Minute, PollInterval: time.Hour, Kinds: map[string]engine.Kind{
				"fetch":  slowFetchKind(run),
				"report": {Aggregate: sumParts(new(atomic.Int64)), PartKinds: []string{"fetch"}, Publisher: &nowherePublisher{}, SweepEvery: time.Hour},
			}})
		synctest.Wait() // past the start sweep and the first, empty, lease
		ctx := context.Background()
		review := func() (parent, part *job.Job) {
			p, parts := interactiveParent(1)
			if _, err := e.Jobs().InsertParts(ctx, p, parts, admission.Config{}); err != nil {
				t.Error(err)
			}
			return p, parts[0]
		}

		for i := range 5 {
			parent, part := review()
			got, err := s.Get(ctx, part.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != job.StateRunning {
				t.Fatalf("review %d: its part is %s when the insert returns, want running (leased in the insert's write)", i, got.State)
			}
			first := got.LeaseExpiresAt
			e.Notify()
			time.Sleep(run / 2)
			if got, _ := s.Get(ctx, part.ID); got.State != job.StateRunning || !got.LeaseExpiresAt.After(first) {
				t.Fatalf("review %d: mid-run its part is %s, lease until %v (from %v): want running, extended by heartbeats", i, got.State, got.LeaseExpiresAt, first)
			}
			waitState(t, s, parent.ID, job.StatePublished)
			if got, _ := s.Get(ctx, part.ID); got.State != job.StatePublished || len(got.History) != 1 {
				t.Fatalf("review %d: its part is %s after %d attempts, want published after 1", i, got.State, len(got.History))
			}
		}

		var wg sync.WaitGroup
		parents := make(chan *job.Job, 10)
		for range 10 {
			wg.Go(func() {
				p, _ := review()
				e.Notify()
				parents <- p
			})
		}
		wg.Wait()
		close(parents)
		for p := range parents {
			waitState(t, s, p.ID, job.StatePublished)
		}
		synctest.Wait()
		if n := engine.FreeSlots(e); n != 1 {
			t.Fatalf("%d of 1 worker slots free once every review published", n)
		}

		// A part its key refuses (at its cap, held by another worker) is
		// inserted and not leased, and the slot reserved for it is given
		// back as the insert returns; an insert that fails gives it back
		// too.
		if _, err := s.UpsertLimit(ctx, admission.Config{Name: "held", Concurrency: 1}, time.Now()); err != nil {
			t.Fatal(err)
		}
		other := writerOn(t, s)
		_, held := interactiveParent(1)
		held[0].ParentID, held[0].LimitKeys = "", []string{"held"}
		if _, err := other.Insert(ctx, held, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		if got, err := other.Lease(ctx, engine.LeaseParams{Max: 1, LeaseFor: time.Hour, Kinds: []string{"fetch"}}); err != nil || len(got) != 1 {
			t.Fatalf("another worker leased %d (%v), want the job holding the key", len(got), err)
		}
		p, parts := interactiveParent(1)
		parts[0].LimitKeys = []string{"held"}
		if _, err := e.Jobs().InsertParts(ctx, p, parts, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get(ctx, parts[0].ID); got.State != job.StateWaiting {
			t.Fatalf("a part its key refuses is %s, want waiting", got.State)
		}
		if n := engine.FreeSlots(e); n != 1 {
			t.Fatalf("%d of 1 worker slots free after an insert whose lease took nothing", n)
		}
		p, parts = interactiveParent(1)
		parts[0].LimitKeys = nil // refused by the store's check
		if _, err := e.Jobs().InsertParts(ctx, p, parts, admission.Config{}); err == nil {
			t.Fatal("a part with no limit key was inserted")
		}
		if n := engine.FreeSlots(e); n != 1 {
			t.Fatalf("%d of 1 worker slots free after an insert that failed", n)
		}

		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := e.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		_, part := review()
		if got, _ := s.Get(ctx, part.ID); got.State != job.StateWaiting {
			t.Fatalf("a part inserted after Stop is %s, want waiting", got.State)
		}
	})
}

// inFlightAtInsert is a SQLite store that records, as each insert that
// leases reaches it, how much interactive work its engine counted in
// flight: the SQLite writer's hold (store.InteractiveWatcher) keeps a
// batch-lane transaction open only while that count is up.
type inFlightAtInsert struct {
	*sqlite.Store
	e    atomic.Pointer[engine.Engine]
	seen []int
	mu   sync.Mutex
}

func (s *inFlightAtInsert) InsertLease(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config, p store.LeaseParams) ([]store.InsertResult, []*job.Job, error) {
	if e := s.e.Load(); e != nil {
		_, _, n := engine.BudgetState(e)
		s.mu.Lock()
		s.seen = append(s.seen, n)
		s.mu.Unlock()
	}
	return s.Store.InsertLease(ctx, os, jobs, def, p)
}

// TestInsertLeaseInFlight: an interactive review's insert that leases in
// its own write is interactive work in flight while the write is queued
// (so the writer's hold covers it), and once its part has run and its
// parent is published nothing of it stays counted in flight. The
// parent, inserted accepted, is not queued work: counted as such, with
// the part leased by the insert, and the wake-up of the insert's Notify
// only reading, its piece stayed in flight and held the batch lane back.
func TestInsertLeaseInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		raw := newSQLite(t, sqlite.Config{})
		s := &inFlightAtInsert{Store: raw}
		var calls atomic.Int64
		e := start(t, engine.Config{Store: s, Workers: 4, BatchCPUs: 1, PollInterval: time.Hour, Kinds: map[string]engine.Kind{
			"fetch":  fetchKind,
			"crunch": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome { return job.Outcome{Class: job.ClassSuccess} }), Computes: true},
			"report": {Aggregate: sumParts(&calls), PartKinds: []string{"fetch"}, SweepEvery: time.Hour},
		}})
		if pacer, queued := engine.Pacing(e); !pacer || !queued {
			t.Fatalf("pacer %v, queued tracking %v: want both on (the engine serves a computing batch kind)", pacer, queued)
		}
		s.e.Store(e)
		synctest.Wait()
		ctx := context.Background()
		for i := range 3 {
			parent, parts := interactiveParent(1)
			if _, err := e.Jobs().InsertParts(ctx, parent, parts, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			e.Notify() // as the review plug-in does after its insert
			waitState(t, s, parent.ID, job.StatePublished)
			synctest.Wait()
			if _, _, n := engine.BudgetState(e); n != 0 {
				t.Fatalf("review %d published, the engine idle: %d pieces of interactive work still in flight, want 0", i, n)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.seen) != 3 {
			t.Fatalf("%d inserts leased in their own write, want 3", len(s.seen))
		}
		for i, n := range s.seen {
			if n < 1 {
				t.Errorf("insert %d reached the store with %d interactive work in flight, want it counted", i, n)
			}
		}
	})
}
