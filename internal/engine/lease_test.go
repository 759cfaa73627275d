package engine_test

import (
	"context"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/postgres/pgtest"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// The lease tests of RELIABILITY.md T3 and T4 at the engine: the reaper
// racing completions, heartbeats keeping long handlers, handlers that
// ignore their context, and the counters that prove each fault happened.

// faults records what the engine reports to an Observer and LeaseObserver.
// faults counts the engine's lease faults as its LeaseObserver hears them;
// a test waits on a count with Reached (a signal), not by polling it.
type faults struct {
	recovered, refusedFinish, abandoned, returned testkit.Counter
	refusedHeartbeat                              atomic.Int64
}

func (f *faults) Finished(*job.Job, job.Outcome, store.Transition) {}
func (f *faults) Leased(int)                                       {}
func (f *faults) LeasesRecovered(n int)                            { f.recovered.Add(int64(n)) }
func (f *faults) HandlerAbandoned(string)                          { f.abandoned.Add(1) }
func (f *faults) StuckReturned(string)                             { f.returned.Add(1) }
func (f *faults) OutcomeRefused(op string) {
	switch op {
	case engine.OpFinish:
		f.refusedFinish.Add(1)
	case engine.OpHeartbeat:
		f.refusedHeartbeat.Add(1)
	}
}

var _ engine.LeaseObserver = (*faults)(nil)

// drivers returns the stores a test runs on: SQLite always, PostgreSQL
// when RATELANE_TEST_POSTGRES_URL names one (a schema per test).
func drivers() []string {
	if os.Getenv("RATELANE_TEST_POSTGRES_URL") != "" {
		return []string{"sqlite", "postgres"}
	}
	return []string{"sqlite"}
}

func openDriver(t *testing.T, name string) store.Store {
	t.Helper()
	if name == "sqlite" {
		return newStore(t)
	}
	url, schema := testkit.PostgresSchema(t, "rl_engine_")
	return pgtest.Open(t, url, schema, 4)
}

func getJob(t *testing.T, s store.Store, id string) *job.Job {
	t.Helper()
	j, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// reaperOnly returns an engine, not started, whose kinds match no job of
// the tests: only its Reap is used, on the clock c.
func reaperOnly(t *testing.T, s store.Store, c *testkit.Clock, obs engine.Observer) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Store: s, Region: "us", Kinds: map[string]engine.Kind{"other": noop()},
		LeaseFor: time.Second, Now: c.Now, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// vanished leases one job for a worker that will not come back (the test
// plays it), at the clock's time, for one second.
func vanished(t *testing.T, s store.Store, c *testkit.Clock) *job.Job {
	t.Helper()
	j := storetest.NewJob("acme", job.LaneBatch, "k")
	j.EligibleAt, j.CreatedAt = c.Now(), c.Now()
	if _, err := s.Insert(context.Background(), []*job.Job{j}, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Lease(context.Background(), store.LeaseParams{Now: c.Now(), Max: 1, LeaseFor: time.Second})
	if err != nil || len(got) != 1 {
		t.Fatalf("lease: %v %v", got, err)
	}
	return got[0]
}

// vanishedOn opens driver drv with a fake clock at storetest.T0, leases
// one job there for a vanished worker (vanished), and moves the clock on
// by after: the start of each of TestReaperRaces' cases.
func vanishedOn(t *testing.T, drv string, after time.Duration) (store.Store, *testkit.Clock, *job.Job) {
	t.Helper()
	s := openDriver(t, drv)
	c := testkit.NewClock(storetest.T0)
	w := vanished(t, s, c)
	c.Add(after)
	return s, c, w
}

// TestReaperRaces is RELIABILITY.md T3 on a live reaper: the hook pauses
// Engine.Reap between selecting the expired lease and recovering it, and
// the test acts in the gap. A completed job stays completed, a fresh
// attempt is not reset, a renewed lease is kept, and each expired lease is
// recovered exactly once; the horizon is exact on the fake clock.
func TestReaperRaces(t *testing.T) {
	t.Parallel()
	for _, drv := range drivers() {
		t.Run(drv+"/completed in the gap", func(t *testing.T) {
			t.Parallel()
			s, c, w := vanishedOn(t, drv, 2*time.Second)
			f := &faults{}
			e := reaperOnly(t, s, c, f)
			var done *job.Job
			engine.SetReapHook(e, func(expired []*job.Job) {
				if len(expired) != 1 || expired[0].ID != w.ID {
					t.Errorf("reaper selected %d jobs", len(expired))
				}
				late := engine.Decide(w, job.Outcome{Class: job.ClassSuccess}, c.Now(), false, engine.Backoff{}, 0)
				if errs, err := s.Finish(context.Background(), []store.Transition{late}); err != nil || errs[0] != nil {
					t.Errorf("the late worker's completion: %v %v", errs, err)
				}
				done = getJob(t, s, w.ID)
			})
			if n, err := e.Reap(context.Background()); err != nil || n != 0 {
				t.Fatalf("reap recovered %d (%v), want 0: the job completed in the gap", n, err)
			}
			if got := getJob(t, s, w.ID); !reflect.DeepEqual(got, done) || got.State != job.StatePublished || got.Attempt != 1 {
				t.Fatalf("the completed job changed:\nbefore %+v\nafter  %+v", done, got)
			}
			if f.recovered.Load() != 0 {
				t.Fatalf("recovered counter = %d, want 0", f.recovered.Load())
			}
		})
		t.Run(drv+"/re-leased in the gap", func(t *testing.T) {
			t.Parallel()
			s, c, w := vanishedOn(t, drv, 2*time.Second)
			f := &faults{}
			slow, fast := reaperOnly(t, s, c, f), reaperOnly(t, s, c, f)
			var fresh *job.Job
			engine.SetReapHook(slow, func([]*job.Job) {
				if n, err := fast.Reap(context.Background()); err != nil || n != 1 {
					t.Errorf("the other reaper recovered %d (%v), want 1", n, err)
				}
				got, err := s.Lease(context.Background(), store.LeaseParams{Now: c.Now(), Max: 1, LeaseFor: time.Second})
				if err != nil || len(got) != 1 {
					t.Errorf("re-lease: %v %v", got, err)
					return
				}
				fresh = got[0]
			})
			if n, err := slow.Reap(context.Background()); err != nil || n != 0 {
				t.Fatalf("the slow reaper recovered %d (%v), want 0", n, err)
			}
			got := getJob(t, s, w.ID)
			if fresh == nil || got.State != job.StateRunning || got.Attempt != 2 || got.LeaseToken != fresh.LeaseToken ||
				!got.LeaseExpiresAt.Equal(fresh.LeaseExpiresAt) || got.Attempts.Transient != 1 || storetest.CountOutcome(got, job.ClassLeaseExpired) != 1 {
				t.Fatalf("job = %s attempt %d transient %d, %d recoveries; want attempt 2 running, recovered once",
					got.State, got.Attempt, got.Attempts.Transient, storetest.CountOutcome(got, job.ClassLeaseExpired))
			}
			if f.recovered.Load() != 1 {
				t.Fatalf("recovered counter = %d, want 1", f.recovered.Load())
			}
		})
		t.Run(drv+"/heartbeat in the gap", func(t *testing.T) {
			t.Parallel()
			s, c, w := vanishedOn(t, drv, 2*time.Second)
			e := reaperOnly(t, s, c, nil)
			engine.SetReapHook(e, func([]*job.Job) {
				if err := s.Heartbeat(context.Background(), w.ID, w.LeaseToken, c.Now().Add(time.Second)); err != nil {
					t.Errorf("heartbeat: %v", err)
				}
			})
			if n, err := e.Reap(context.Background()); err != nil || n != 0 {
				t.Fatalf("reap recovered %d (%v) a lease renewed in the gap", n, err)
			}
			if got := getJob(t, s, w.ID); got.State != job.StateRunning || got.LeaseToken != w.LeaseToken || got.Attempts.Transient != 0 {
				t.Fatalf("job = %s transient %d; the live worker must keep its lease", got.State, got.Attempts.Transient)
			}
		})
		t.Run(drv+"/horizon", func(t *testing.T) {
			t.Parallel()
			s, c, w := vanishedOn(t, drv, 0)
			f := &faults{}
			e := reaperOnly(t, s, c, f)
			// One lease period after the worker vanished, less a
			// millisecond: still its lease.
			c.Add(time.Second - time.Millisecond)
			if n, err := e.Reap(context.Background()); err != nil || n != 0 {
				t.Fatalf("reap at expiry-1ms recovered %d (%v)", n, err)
			}
			// At exactly one lease period it is recovered (I3: within one
			// lease period, on the fake clock), once.
			c.Add(time.Millisecond)
			if n, err := e.Reap(context.Background()); err != nil || n != 1 {
				t.Fatalf("reap at expiry recovered %d (%v), want 1", n, err)
			}
			c.Add(time.Millisecond)
			if n, err := e.Reap(context.Background()); err != nil || n != 0 {
				t.Fatalf("reap at expiry+1ms recovered %d (%v) again", n, err)
			}
			got := getJob(t, s, w.ID)
			if got.State != job.StateWaiting || got.Attempts.Transient != 1 || f.recovered.Load() != 1 ||
				!got.History[0].At.Equal(w.LeaseExpiresAt) {
				t.Fatalf("job = %s transient %d, recovered %d at %v; want recovered once at %v", got.State,
					got.Attempts.Transient, f.recovered.Load(), got.History[0].At, w.LeaseExpiresAt)
			}
			if k, _ := s.GetLimit(context.Background(), "k"); k.InFlight != 0 {
				t.Fatalf("in flight = %d after recovery, want 0", k.InFlight)
			}
		})
	}
}

// TestHeartbeatKeepsLongHandler is T4(a): a handler running three lease
// periods while the engine heartbeats every lease/6 keeps its lease: it
// runs once and is never recovered, though the reaper sweeps every 10 ms
// all along. It runs in a synctest bubble: time moves only when every
// goroutine waits, so however slow this machine is, the lease can expire
// only if a renewal is missing.
func TestHeartbeatKeepsLongHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		const lease = time.Second
		var runs atomic.Int32
		f := &faults{}
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			runs.Add(1)
			time.Sleep(3 * lease)
			return job.Outcome{Class: job.ClassSuccess}
		})
		j := storetest.NewJob("acme", job.LaneBatch, "k")
		insertNow(t, s, j)
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, LeaseFor: lease,
			HeartbeatEvery: lease / 6, ReapEvery: 10 * time.Millisecond, Observer: f})
		testkit.WaitFor(t, time.Minute, "the job to finish", func() bool { return getJob(t, s, j.ID).State.Final() })
		got := getJob(t, s, j.ID)
		if got.State != job.StatePublished || runs.Load() != 1 || got.Attempt != 1 || len(got.History) != 1 {
			t.Fatalf("job = %s after %d runs, attempt %d, history %+v; want published after one run", got.State, runs.Load(), got.Attempt, got.History)
		}
		if f.recovered.Load() != 0 || storetest.CountOutcome(got, job.ClassLeaseExpired) != 0 {
			t.Fatalf("the heartbeated lease was recovered %d times", f.recovered.Load())
		}
	})
}

// TestMaxRunTimeAbandonsStuckHandler is issue 10 item 7 and T4(c): a
// handler that ignores its cancelled context is abandoned past its kind's
// maximum run time. The attempt is recorded as a transient failure, the
// key's concurrency slot (cap 1) and the only worker slot are freed, so the
// retry runs while the stuck goroutine still blocks; the stuck goroutine is
// counted until it returns, and its late outcome changes nothing. The
// lease is an hour long and the reaper could not have done it.
func TestMaxRunTimeAbandonsStuckHandler(t *testing.T) {
	t.Parallel()
	for _, drv := range drivers() {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			s := openDriver(t, drv)
			if _, err := s.UpsertLimit(context.Background(), admission.Config{Name: "k", Concurrency: 1}, time.Now()); err != nil {
				t.Fatal(err)
			}
			c := testkit.NewRunningClock()
			release := make(chan struct{})
			var once sync.Once
			cause := make(chan error, 1)
			h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
				if j.Attempt > 1 {
					return job.Outcome{Class: job.ClassSuccess}
				}
				c.Add(3 * time.Second) // the handler hangs past its 2 s
				<-release              // ignoring ctx
				cause <- context.Cause(ctx)
				return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{"late":true}`)}
			})
			j := storetest.NewJob("acme", job.LaneInteractive, "k")
			j.Budgets.Transient = 1
			j.EligibleAt, j.CreatedAt = c.Now(), c.Now()
			if _, err := s.Insert(context.Background(), []*job.Job{j}, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			f := &faults{}
			e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h, MaxRunTime: 2 * time.Second}},
				Workers: 1, LeaseFor: time.Hour, HeartbeatEvery: 20 * time.Millisecond, ReapEvery: 10 * time.Millisecond,
				Now: c.Now, Observer: f})
			// Registered after start's Stop, so it runs first: a stuck
			// handler must not hold up the engine's Stop if the test fails.
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			testkit.WaitFor(t, testkit.Timeout, "the retry to publish", func() bool { return getJob(t, s, j.ID).State == job.StatePublished })
			got := getJob(t, s, j.ID)
			if got.Attempt != 2 || got.Attempts.Transient != 1 || len(got.History) != 2 ||
				got.History[0].Outcome != job.ClassTransient || !strings.Contains(got.History[0].Error, "maximum run time 2s exceeded") {
				t.Fatalf("job attempt %d transient %d history %+v; want a timeout then a success", got.Attempt, got.Attempts.Transient, got.History)
			}
			if f.abandoned.Load() != 1 || e.Stuck() != 1 || f.returned.Load() != 0 || f.recovered.Load() != 0 {
				t.Fatalf("abandoned %d, stuck %d, returned %d, recovered %d; want 1 abandoned and still stuck, none recovered",
					f.abandoned.Load(), e.Stuck(), f.returned.Load(), f.recovered.Load())
			}
			if k, _ := s.GetLimit(context.Background(), "k"); k.InFlight != 0 {
				t.Fatalf("in flight = %d, want 0", k.InFlight)
			}
			once.Do(func() { close(release) })
			if err := <-cause; err == nil || !strings.Contains(err.Error(), "maximum run time") {
				t.Fatalf("the stuck handler's context cause = %v, want the maximum run time", err)
			}
			testkit.Recv(t, f.returned.Reached(1), testkit.Timeout, "the stuck goroutine to return")
			if n := e.Stuck(); n != 0 { // counted back before the Observer hears of it
				t.Fatalf("%d stuck after the abandoned handler returned, want 0", n)
			}
			if after := getJob(t, s, j.ID); !reflect.DeepEqual(after, got) {
				t.Fatalf("the abandoned handler's late outcome changed the job:\n%+v\n%+v", got, after)
			}
		})
	}
}

// TestStuckHandlersAreBounded: abandoned goroutines free their worker slot
// only up to Workers of them. Past that a stuck handler keeps its slot, so
// a handler that hangs on every attempt shrinks the pool (visibly: Stuck
// and the gauge) instead of growing goroutines without bound; when the
// handlers return, the pool is whole again and the job finishes. In a
// synctest bubble, so "no third start" is checked after every goroutine
// has settled and a minute has passed, not after a guessed sleep.
func TestStuckHandlersAreBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		release := make(chan struct{})
		var once sync.Once
		var starts atomic.Int32
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			starts.Add(1)
			<-release // ignoring ctx, past the 1 s maximum run time
			return job.Outcome{Class: job.ClassSuccess}
		})
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		j.Budgets.Transient = 5
		insertNow(t, s, j)
		f := &faults{}
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h, MaxRunTime: time.Second}},
			Workers: 1, LeaseFor: time.Hour, HeartbeatEvery: 20 * time.Millisecond, Observer: f})
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		testkit.Recv(t, f.abandoned.Reached(2), time.Minute, "two abandoned attempts")
		testkit.WaitFor(t, time.Minute, "the second timeout to be recorded", func() bool { return getJob(t, s, j.ID).Attempts.Transient == 2 })
		// The second stuck handler keeps the only slot: no third start,
		// however long the job has been eligible (a minute is past any
		// backoff).
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := starts.Load(); n != 2 || e.Stuck() != 2 {
			t.Fatalf("%d starts with %d stuck; want 2 and 2 (the pool of 1 is held by the second)", n, e.Stuck())
		}
		once.Do(func() { close(release) })
		testkit.WaitFor(t, time.Minute, "the job to publish", func() bool { return getJob(t, s, j.ID).State == job.StatePublished })
		testkit.WaitFor(t, time.Minute, "no stuck handler", func() bool { return e.Stuck() == 0 })
		if got := getJob(t, s, j.ID); got.Attempt != 3 || got.Attempts.Transient != 2 {
			t.Fatalf("job attempt %d transient %d; want the third attempt to publish", got.Attempt, got.Attempts.Transient)
		}
	})
}

// TestMaxRunTimeBudgetEndsTerminal: a job whose every attempt hangs ends
// terminal with transient_budget_exhausted, by its budget, like any
// transient failure; in a synctest bubble, so the 1 s maximum run time
// passes on the fake clock.
func TestMaxRunTimeBudgetEndsTerminal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		release := make(chan struct{})
		var once sync.Once
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			<-release
			return job.Outcome{Class: job.ClassSuccess}
		})
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		j.Budgets.Transient = 1
		insertNow(t, s, j)
		f := &faults{}
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, MaxRunTime: time.Second,
			Workers: 4, LeaseFor: time.Hour, HeartbeatEvery: 20 * time.Millisecond, Observer: f})
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		testkit.WaitFor(t, time.Minute, "the job to end", func() bool { return getJob(t, s, j.ID).State.Final() })
		got := getJob(t, s, j.ID)
		if got.State != job.StateTerminal || got.Reason != job.ReasonTransientBudgetExhausted || got.Attempts.Transient != 2 {
			t.Fatalf("job = %s/%s transient %d; want terminal transient_budget_exhausted after 2", got.State, got.Reason, got.Attempts.Transient)
		}
		if e.Stuck() != 2 || f.abandoned.Load() != 2 {
			t.Fatalf("stuck %d abandoned %d, want 2 and 2", e.Stuck(), f.abandoned.Load())
		}
		once.Do(func() { close(release) })
		testkit.WaitFor(t, time.Minute, "no stuck handler", func() bool { return e.Stuck() == 0 })
	})
}

// TestLostLeaseWritesAreRefusedAndCounted: a running job cancelled from
// outside loses its lease; the engine's next heartbeat and the handler's
// late outcome are refused by the store's guard, counted, and change
// nothing.
func TestLostLeaseWritesAreRefusedAndCounted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		started := make(chan struct{})
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			close(started)
			<-ctx.Done()
			return job.Outcome{Class: job.ClassSuccess} // a late success
		})
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		insertNow(t, s, j)
		f := &faults{}
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, HeartbeatEvery: 20 * time.Millisecond, Observer: f})
		testkit.Recv(t, started, testkit.Timeout, "the handler to start")
		if _, err := s.Cancel(context.Background(), j.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
		testkit.Recv(t, f.refusedFinish.Reached(1), testkit.Timeout, "the late outcome to be refused")
		if n := f.refusedFinish.Load(); n != 1 {
			t.Fatalf("refused finishes = %d, want 1", n)
		}
		if f.refusedHeartbeat.Load() < 1 {
			t.Fatalf("refused heartbeats = %d, want at least 1", f.refusedHeartbeat.Load())
		}
		if got := getJob(t, s, j.ID); got.State != job.StateTerminal || got.Reason != job.ReasonCancelled || storetest.CountOutcome(got, job.ClassSuccess) != 0 {
			t.Fatalf("job = %s/%s with %d successes; the late outcome must change nothing", got.State, got.Reason, storetest.CountOutcome(got, job.ClassSuccess))
		}
	})
}

// TestRedriveGivesFreshBudgets is T5's redrive line: a job that spent its
// transient budget ends terminal; redriven, it keeps its id and
// idempotency key, returns to waiting with every counter at zero, and gets
// the whole budget again (as many attempts as the first time, the first
// retry's backoff at the base again) before it ends terminal a second time.
func TestRedriveGivesFreshBudgets(t *testing.T) {
	t.Parallel()
	for _, drv := range drivers() {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			s := openDriver(t, drv)
			var runs atomic.Int32
			h := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
				runs.Add(1)
				return job.Outcome{Class: job.ClassTransient, Status: 503, Err: "upstream down"}
			})
			j := storetest.NewJob("acme", job.LaneInteractive, "k")
			j.IdempotencyKey = "order-17"
			j.Budgets = job.Budgets{Congestion: 1, Transient: 3, Schema: 1}
			insertNow(t, s, j)
			start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}})
			final := func() bool { return getJob(t, s, j.ID).State == job.StateTerminal }
			testkit.WaitFor(t, testkit.Timeout, "the budget to be spent", final)
			first := getJob(t, s, j.ID)
			if first.Reason != job.ReasonTransientBudgetExhausted || first.Attempts.Transient != 4 || runs.Load() != 4 {
				t.Fatalf("first run: %s transient %d after %d runs; want transient_budget_exhausted after 4", first.Reason, first.Attempts.Transient, runs.Load())
			}
			r, err := s.Redrive(context.Background(), j.ID, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if r.ID != j.ID || r.IdempotencyKey != "order-17" || r.State != job.StateWaiting || r.Attempts != (job.Attempts{}) || r.Reason != "" {
				t.Fatalf("redriven job = %s %q %s %+v %q; want the same id and key, waiting, counters at zero", r.ID, r.IdempotencyKey, r.State, r.Attempts, r.Reason)
			}
			testkit.WaitFor(t, testkit.Timeout, "the fresh budget to be spent", final)
			second := getJob(t, s, j.ID)
			if second.Reason != job.ReasonTransientBudgetExhausted || second.Attempts.Transient != 4 || runs.Load() != 8 {
				t.Fatalf("after redrive: %s transient %d after %d runs in all; want 4 more attempts", second.Reason, second.Attempts.Transient, runs.Load())
			}
			// Each budget records four delays (the last one is the
			// exhausting attempt's); the first after the redrive backs off
			// from the base again, the last before it was 8x the base.
			var delays []time.Duration
			for _, rec := range second.History {
				if rec.Outcome == job.ClassTransient && rec.Delay > 0 {
					delays = append(delays, rec.Delay)
				}
			}
			base := 10 * time.Millisecond // start's default Backoff.Base
			if len(delays) != 8 || delays[0] > base*3/2 || delays[3] < 4*base || delays[4] > base*3/2 {
				t.Fatalf("retry delays %v; want 4 per budget, each budget's first within 1.5x the base", delays)
			}
			dup := storetest.NewJob("acme", job.LaneInteractive, "k")
			dup.IdempotencyKey = "order-17"
			if res, err := s.Insert(context.Background(), []*job.Job{dup}, admission.Config{}); err != nil || !res[0].Existing || res[0].Job.ID != j.ID {
				t.Fatalf("the idempotency key no longer names the redriven job: %+v %v", res, err)
			}
		})
	}
}

// TestMaintenanceOnlyEngine: an engine with no kinds leases nothing (an
// empty kind list would mean every kind to the store) but still reaps: a
// lease an external worker abandoned is recovered.
func TestMaintenanceOnlyEngine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		c := testkit.NewRunningClock()
		w := vanished(t, s, c)
		idle := storetest.NewJob("acme", job.LaneBatch, "k2")
		insertNow(t, s, idle)
		f := &faults{}
		start(t, engine.Config{Store: s, LeaseFor: time.Second, ReapEvery: 10 * time.Millisecond, Now: c.Now, Observer: f})
		c.Add(time.Second)
		testkit.Recv(t, f.recovered.Reached(1), testkit.Timeout, "the abandoned lease to be recovered")
		if n := f.recovered.Load(); n != 1 {
			t.Fatalf("recovered %d leases, want 1", n)
		}
		if got := getJob(t, s, w.ID); got.State != job.StateWaiting || got.Attempts.Transient != 1 {
			t.Fatalf("recovered job = %s transient %d", got.State, got.Attempts.Transient)
		}
		if got := getJob(t, s, idle.ID); got.State != job.StateWaiting || got.Attempt != 0 {
			t.Fatalf("a maintenance-only engine leased job %s (attempt %d)", got.State, got.Attempt)
		}
	})
}

// TestMaxRunTimeValidation: the setting is checked at New, naming the field.
func TestMaxRunTimeValidation(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for _, c := range []struct {
		cfg  engine.Config
		want string
	}{
		{engine.Config{MaxRunTime: -time.Second}, "MaxRunTime must be from"},
		{engine.Config{MaxRunTime: 100 * time.Millisecond}, "MaxRunTime must be from HeartbeatEvery (500ms)"},
		{engine.Config{MaxRunTime: 8 * 24 * time.Hour}, "MaxRunTime must be from"},
		{engine.Config{Kinds: map[string]engine.Kind{"slow": {Handler: noop().Handler, MaxRunTime: time.Millisecond}}}, `kind "slow": MaxRunTime`},
	} {
		c.cfg.Store, c.cfg.Region = s, "us"
		if c.cfg.Kinds == nil {
			c.cfg.Kinds = map[string]engine.Kind{"noop": noop()}
		}
		if _, err := engine.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", c.cfg.MaxRunTime, err, c.want)
		}
	}
	if _, err := engine.New(engine.Config{Store: s, Region: "us", Kinds: map[string]engine.Kind{"noop": noop()}}); err != nil {
		t.Fatalf("the default MaxRunTime (%v) was refused: %v", engine.DefaultMaxRunTime, err)
	}
}

// TestStopAbandonsHandlerIgnoringCancel: Stop's deadline passes while a
// handler ignores its cancelled context (its maximum run time an hour
// away). Stop still returns within a few heartbeats: the attempt is
// recorded as a transient failure (the job is retried, on this node's
// restart or elsewhere) and the goroutine counts as stuck.
func TestStopAbandonsHandlerIgnoringCancel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		started, release := make(chan struct{}), make(chan struct{})
		h := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			close(started)
			<-release
			return job.Outcome{Class: job.ClassSuccess}
		})
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		insertNow(t, s, j)
		f := &faults{}
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, MaxRunTime: time.Hour,
			LeaseFor: time.Hour, HeartbeatEvery: 20 * time.Millisecond, Observer: f})
		t.Cleanup(func() { close(release) })
		testkit.Recv(t, started, testkit.Timeout, "the handler to start")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		stopped := make(chan struct{})
		go func() {
			e.Stop(ctx)
			close(stopped)
		}()
		testkit.Recv(t, stopped, 20*time.Second, "Stop to return while a handler ignores its cancelled context")
		got := getJob(t, s, j.ID)
		if got.State != job.StateRetryScheduled || len(got.History) != 1 || !strings.Contains(got.History[0].Error, "engine stopped") {
			t.Fatalf("job = %s, history %+v; want retry_scheduled after a recorded transient attempt", got.State, got.History)
		}
		if e.Stuck() != 1 || f.abandoned.Load() != 1 {
			t.Fatalf("stuck %d abandoned %d, want 1 and 1", e.Stuck(), f.abandoned.Load())
		}
	})
}

// TestStopWithoutStart: a client that never starts (a producer) still
// stops its engines, maintenance-only ones included.
func TestStopWithoutStart(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for _, kinds := range []map[string]engine.Kind{nil, {"noop": noop()}} {
		e, err := engine.New(engine.Config{Store: s, Region: "us", Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.Stop(context.Background()) // idempotent
	}
}
