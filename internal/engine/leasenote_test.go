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
)

// TestQueuedSpanNamesItsLease checks that a traced queued stage says
// which lease ended it (StageSpan.Via, Asked, Woke), the attribution
// bench --trace-tail counts (docs/benchmarks.md, "Session 44 (s44h1)"):
// a review's part leased in its insert's own write is "insert", asked
// within its queued stage, with no fetch-loop wake-up; a part inserted
// without a lease and announced by Notify is leased by the woken fetch
// loop ("wake:notify", woken and asked within the stage); one inserted
// silently waits for the poll ("poll"), which the bubble's clock shows
// as a queued stage of the poll interval.
func TestQueuedSpanNamesItsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		queued := map[string]engine.StageSpan{}
		poll := 50 * time.Millisecond
		e := start(t, engine.Config{Store: newStore(t), Workers: 2, PollInterval: poll,
			StageTrace: func(sp engine.StageSpan) {
				if sp.Stage == engine.StageQueued {
					mu.Lock()
					queued[sp.ID] = sp
					mu.Unlock()
				}
			},
			Kinds: map[string]engine.Kind{
				"fetch":  fetchKind,
				"report": {Aggregate: sumParts(new(atomic.Int64)), PartKinds: []string{"fetch"}, Publisher: &nowherePublisher{}, SweepEvery: time.Hour},
			}})
		synctest.Wait() // past the start sweep and the first, empty, lease
		ctx := context.Background()
		span := func(id string) engine.StageSpan {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			sp, ok := queued[id]
			if !ok {
				t.Fatalf("no queued span of %s", id)
			}
			return sp
		}
		within := func(sp engine.StageSpan, at time.Time) bool { return !at.Before(sp.Start) && !at.After(sp.End) }

		p, parts := interactiveParent(1)
		if _, err := e.Jobs().InsertParts(ctx, p, parts, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify() // as an inserter does: the fetch loop's wake-up leases nothing more
		if sp := span(parts[0].ID); sp.Via != "insert" || !within(sp, sp.Asked) || !sp.Woke.IsZero() {
			t.Errorf("a part leased in its insert's write: via %q, asked %v, woke %v in [%v, %v]; want insert, asked within, no wake-up",
				sp.Via, sp.Asked, sp.Woke, sp.Start, sp.End)
		}
		waitState(t, e.Jobs().Store(), p.ID, job.StatePublished)

		p, parts = interactiveParent(1)
		if _, err := e.Jobs().Insert(ctx, []*job.Job{p, parts[0]}, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		if sp := span(parts[0].ID); sp.Via != "wake:notify" || !within(sp, sp.Woke) || !within(sp, sp.Asked) {
			t.Errorf("a part announced by Notify: via %q, woke %v, asked %v in [%v, %v]; want wake:notify, both within",
				sp.Via, sp.Woke, sp.Asked, sp.Start, sp.End)
		}
		waitState(t, e.Jobs().Store(), p.ID, job.StatePublished)

		p, parts = interactiveParent(1)
		if _, err := e.Jobs().Insert(ctx, []*job.Job{p, parts[0]}, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * poll)
		if sp := span(parts[0].ID); sp.Via != "poll" || sp.End.Sub(sp.Start) <= 0 || sp.End.Sub(sp.Start) > poll {
			t.Errorf("a part inserted silently: via %q, queued %v; want poll, within one poll interval (%v)", sp.Via, sp.End.Sub(sp.Start), poll)
		}
	})
}
