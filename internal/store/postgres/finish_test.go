package postgres

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// successOf is the transition of a successful attempt of the leased j.
func successOf(j *job.Job, now time.Time) store.Transition {
	return store.Transition{
		ID: j.ID, LeaseToken: j.LeaseToken, To: job.StatePublished, Attempts: j.Attempts,
		Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassSuccess},
		Keys:   store.KeyEffect{Now: now, Success: true},
	}
}

// A finish on unpaced keys is four statements in one round trip whatever
// its size: BEGIN, the plan mode, the update of the jobs that also locks
// their keys (endAttemptsSQL), and COMMIT. The key lock used to be a
// statement of its own, the plan mode was restored before the commit, and
// COMMIT went out alone once the finish's result was in: six statements,
// two round trips.
func TestFinishStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rt := tracedStore(t)
	insertN(t, s, 64, 4, "a", "b")
	leased := leaseN(t, s, t0, 64)
	stale := successOf(leased[1], t0)
	stale.LeaseToken = "not-the-token"
	batches := map[string][]store.Transition{
		"one job":              {successOf(leased[0], t0)},
		"a job that conflicts": {stale},
	}
	for _, j := range leased[1:64] {
		batches["63 jobs and one conflict"] = append(batches["63 jobs and one conflict"], successOf(j, t0))
	}
	batches["63 jobs and one conflict"] = append(batches["63 jobs and one conflict"], successOf(leased[0], t0))
	for _, name := range []string{"one job", "a job that conflicts", "63 jobs and one conflict"} {
		t0s, s0 := rt.trips.Load(), rt.statements.Load()
		if _, err := s.Finish(ctx, batches[name]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if trips, stmts := rt.trips.Load()-t0s, rt.statements.Load()-s0; trips != 1 || stmts != 4 {
			t.Errorf("finish of %s: %d round trips, %d statements; want 1 and 4", name, trips, stmts)
		}
	}
}

// The finish's key lock returns what it locked: the keys of the jobs it
// ended, not those of a job that conflicted (before, the keys of every
// job named were locked).
func TestFinishLocksEndedJobsKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	insertN(t, s, 1, 1, "ended")
	insertN(t, s, 1, 1, "stale")
	upsert(t, s, admission.Config{Name: "ended", Concurrency: 5})
	leased := leaseN(t, s, t0, 2)
	if leased[0].LimitKeys[0] != "ended" {
		leased[0], leased[1] = leased[1], leased[0]
	}
	stale := successOf(leased[1], t0)
	stale.LeaseToken = "not-the-token"
	var ended []store.Ended
	var locked []string
	err := s.inPipe(ctx, false, func(tx *pipeTx) error {
		f := &finishTx{ctx: ctx, tx: tx}
		var err error
		ended, err = f.EndAttempts([]store.Transition{successOf(leased[0], t0), stale})
		locked = slices.Sorted(maps.Keys(f.keys))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if ended[0].Conflict || !slices.Equal(ended[0].Keys, []string{"ended"}) || !ended[1].Conflict {
		t.Fatalf("ended %+v, want the first ended with key \"ended\" and the second a conflict", ended)
	}
	if !slices.Equal(locked, []string{"ended"}) {
		t.Fatalf("locked keys %q, want [ended]", locked)
	}
}

// EndAttempts leaves the transaction on generic plans, and restores the
// mode only before another statement: a finish that commits right after
// it does not pay for the restore, a finish that leases afterwards (or
// saves keys, or readies groups) plans them as before.
func TestFinishRestoresPlanModeLazily(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	insertN(t, s, 1, 1, "k")
	leased := leaseN(t, s, t0, 1)
	var during, after string
	err := s.inPipe(ctx, false, func(tx *pipeTx) error {
		f := &finishTx{ctx: ctx, tx: tx}
		if _, err := f.EndAttempts([]store.Transition{successOf(leased[0], t0)}); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&during); err != nil {
			return err
		}
		f.planAsBefore()
		return tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&after)
	})
	if err != nil {
		t.Fatal(err)
	}
	if during != "force_generic_plan" || after != "auto" {
		t.Fatalf("plan_cache_mode after the finish %q, after planAsBefore %q; want force_generic_plan and auto", during, after)
	}
}

// A finish that needs more than its statement (here a paced key, whose
// in-flight count is saved) does not commit with it: the statement fails
// and the finish runs again in two round trips, and the store's next
// finishes take that way at once (finishCommits). Either way the key's
// count is released exactly once per job.
func TestFinishPacedKeyDoesNotCommitEarly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rt := tracedStore(t)
	insertN(t, s, 2, 1, "paced")
	upsert(t, s, admission.Config{Name: "paced", Concurrency: 5})
	leased := leaseN(t, s, t0, 2)
	for i, want := range []struct {
		inFlight int
		trips    int64
	}{{1, 4}, {0, 2}} { // 4: the failed statement, ROLLBACK, the finish again
		t0s := rt.trips.Load()
		if errs, err := s.Finish(ctx, []store.Transition{successOf(leased[i], t0)}); err != nil || errs[0] != nil {
			t.Fatalf("finish %d: %v, %v", i, errs, err)
		}
		if trips := rt.trips.Load() - t0s; trips != want.trips {
			t.Errorf("finish %d: %d round trips, want %d", i, trips, want.trips)
		}
		k, err := s.GetLimit(ctx, "paced")
		if err != nil || k.InFlight != want.inFlight {
			t.Fatalf("after finish %d: in flight %d (%v), want %d", i, k.InFlight, err, want.inFlight)
		}
	}
	if got := s.finishes.slow.Load(); got != slowAfterMiss-1 {
		t.Errorf("finishes left the usual way: %d, want %d", got, slowAfterMiss-1)
	}
}
