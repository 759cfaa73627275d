package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// Most tests here run an engine on a real SQLite file inside a
// testing/synctest bubble: the store's file I/O runs for real, while the
// engine's timers, the handlers' sleeps and the tests' waits run on the
// bubble's fake clock, which moves only when every goroutine waits. A slow
// machine takes longer in real time but cannot change what a test sees.
// Tests that also run on PostgreSQL stay on the real clock, with
// internal/testkit's waits: a bubble cannot wait through network I/O.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t testing.TB) store.Store { return newSQLite(t, sqlite.Config{}) }

// newSQLite opens a SQLite store of region us in t's temporary
// directory, with cfg's other settings, and closes it in t's cleanup:
// registered before a test's engine starts, that runs after the engine
// stops. A store closed first (a defer inside a synctest bubble runs
// before the bubble's cleanups) left the engine's last write to a
// stopped writer.
func newSQLite(t testing.TB, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	cfg.Path, cfg.Region = filepath.Join(t.TempDir(), "us.db"), "us"
	s, err := sqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// writerOn is a job writer on s outside any engine: a test's set-up, or
// another process whose writes no engine here was told of.
func writerOn(t *testing.T, s store.Store) *engine.Jobs {
	t.Helper()
	w, err := engine.NewJobs(engine.JobsConfig{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func start(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	return startWith(t, cfg, nil)
}

// startWith is start with before called on the engine between New and
// Start (nil: nothing), for what must be set before Start.
func startWith(t *testing.T, cfg engine.Config, before func(*engine.Engine)) *engine.Engine {
	t.Helper()
	cfg.Region = "us"
	if cfg.Backoff.Base == 0 {
		cfg.Backoff.Base = 10 * time.Millisecond
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(e)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
	})
	return e
}

func insertNow(t *testing.T, s store.Store, jobs ...*job.Job) {
	t.Helper()
	now := time.Now()
	for _, j := range jobs {
		j.EligibleAt, j.CreatedAt = now, now
	}
	if _, err := s.Insert(context.Background(), jobs, admission.Config{}); err != nil {
		t.Fatal(err)
	}
}

// waitFinal waits until no job is left unfinished or the timeout passes.
func waitFinal(t *testing.T, s store.Store, timeout time.Duration) store.Stats {
	t.Helper()
	var st store.Stats
	testkit.Eventually(t, timeout, "every job to finish", func() error {
		var err error
		if st, err = s.Stats(context.Background(), time.Now()); err != nil {
			t.Fatal(err)
		}
		open := int64(0)
		for _, byState := range st.Counts {
			for state, n := range byState {
				if !state.Final() {
					open += n
				}
			}
		}
		if open > 0 {
			return fmt.Errorf("%d jobs still unfinished: %+v", open, st.Counts)
		}
		return nil
	})
	return st
}

// pacedBacklog sets key k to rate per second, burst 1, and inserts n
// batch jobs on it.
func pacedBacklog(t *testing.T, s store.Store, rate float64, n int) {
	t.Helper()
	if _, err := s.UpsertLimit(context.Background(), admission.Config{Name: "k", Rate: rate, Burst: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var jobs []*job.Job
	for range n {
		jobs = append(jobs, storetest.NewJob("acme", job.LaneBatch, "k"))
	}
	insertNow(t, s, jobs...)
}

func noop() engine.Kind {
	return engine.Kind{Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
		return job.Outcome{Class: job.ClassSuccess}
	})}
}

func TestRunsEveryJobOnce(t *testing.T) {
	t.Parallel()
	for _, inFlight := range []int{1, 2} {
		t.Run(fmt.Sprintf("inflight=%d", inFlight), func(t *testing.T) { runsEveryJobOnce(t, inFlight) })
	}
}

// runsEveryJobOnce runs 500 jobs on 8 workers with inFlight finish calls
// outstanding at once (Config.InFlight).
func runsEveryJobOnce(t *testing.T, inFlight int) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		var mu sync.Mutex
		seen := map[string]int{}
		kind := engine.Kind{Handler: engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
			mu.Lock()
			seen[j.ID]++
			mu.Unlock()
			return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{"ok":true}`)}
		})}
		var jobs []*job.Job
		for range 500 {
			jobs = append(jobs, storetest.NewJob("acme", job.LaneBatch, "k"))
		}
		insertNow(t, s, jobs...)
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": kind}, Workers: 8, InFlight: inFlight})
		st := waitFinal(t, s, 90*time.Second)
		if st.Counts[job.LaneBatch][job.StatePublished] != 500 {
			t.Fatalf("published %d of 500", st.Counts[job.LaneBatch][job.StatePublished])
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("job %s ran %d times", id, n)
			}
		}
	})
}

// TestRateLimitPausesKeyForEveryWorker is invariants 4 and 5: a 429 with
// Retry-After 2s pauses the key for every engine on the store (no start of
// it before paused_until) while other keys keep flowing.
//
// Both engines run on one clock that stands still inside the pause until
// every job of the other key has run, however long the machine takes, and
// only then moves to the end of the pause: the test cannot fail because the
// machine is slow (issue 11 item 6), and a pause that let a start through,
// or blocked the other key, fails it whatever the speed. The hot key has
// no rate and no cap, so only the pause can hold its jobs back. In a
// synctest bubble, so the waits' deadlines are on the fake clock too: a
// slow machine takes longer in real time, not in the test's.
func TestRateLimitPausesKeyForEveryWorker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		clk := testkit.NewClock(time.Now())
		t0 := clk.Now()
		var mu sync.Mutex
		var hotStarts []time.Time
		var coldStarts testkit.Counter
		h := engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
			if j.LimitKeys[0] == "cold" {
				coldStarts.Add(1)
				return job.Outcome{Class: job.ClassSuccess}
			}
			mu.Lock()
			defer mu.Unlock()
			hotStarts = append(hotStarts, clk.Now())
			if len(hotStarts) == 1 {
				return job.Outcome{Class: job.ClassRateLimited, RetryAfter: 2 * time.Second, Status: 429}
			}
			return job.Outcome{Class: job.ClassSuccess}
		})
		insertAt := func(jobs ...*job.Job) {
			t.Helper()
			for _, j := range jobs {
				j.EligibleAt, j.CreatedAt = t0, t0
			}
			if _, err := s.Insert(context.Background(), jobs, admission.Config{}); err != nil {
				t.Fatal(err)
			}
		}
		first := storetest.NewJob("acme", job.LaneInteractive, "hot")
		insertAt(first)
		kinds := map[string]engine.Kind{"noop": {Handler: h}}
		start(t, engine.Config{Store: s, Kinds: kinds, Workers: 4, Now: clk.Now})
		start(t, engine.Config{Store: s, Kinds: kinds, Workers: 4, Now: clk.Now}) // a second node on the same store

		// The 429 is recorded once the attempt is scheduled for retry; the
		// pause was written in the same transition.
		testkit.WaitFor(t, testkit.Timeout, "the 429 to be recorded", func() bool {
			got, err := s.Get(context.Background(), first.ID)
			if err != nil {
				t.Fatal(err)
			}
			return got.State == job.StateRetryScheduled
		})
		// Hot jobs first, so nothing but the pause keeps them behind the cold ones.
		var more []*job.Job
		for range 19 {
			more = append(more, storetest.NewJob("acme", job.LaneInteractive, "hot"))
		}
		for range 300 {
			more = append(more, storetest.NewJob("acme", job.LaneInteractive, "cold"))
		}
		insertAt(more...)
		testkit.Recv(t, coldStarts.Reached(300), testkit.Timeout, "every cold job to start during the pause")
		if n := coldStarts.Load(); n != 300 {
			t.Fatalf("%d starts of the 300 cold jobs", n)
		}
		mu.Lock()
		if len(hotStarts) != 1 {
			t.Fatalf("%d starts of the paused key while the clock stood inside the pause", len(hotStarts)-1)
		}
		mu.Unlock()

		clk.Set(t0.Add(2 * time.Second))
		clk.Run()
		waitFinal(t, s, 90*time.Second)
		mu.Lock()
		defer mu.Unlock()
		if len(hotStarts) != 21 {
			t.Fatalf("hot starts = %d, want 21 (20 jobs + 1 retry)", len(hotStarts))
		}
		for _, at := range hotStarts[1:] {
			if at.Before(t0.Add(2 * time.Second)) {
				t.Fatalf("a job on the paused key started %v after the 429", at.Sub(t0))
			}
		}
	})
}

// TestCancelRunningJobWithinASecond: a job cancelled while its handler
// runs has the handler's context cancelled within a second (the engine
// sees the cancel at its next heartbeat), and the late outcome changes
// nothing. In a synctest bubble, the second is measured on the fake clock,
// which moves only when every goroutine waits: the bound tests the
// engine's heartbeat, not this machine's speed.
func TestCancelRunningJobWithinASecond(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		started := make(chan struct{})
		stopped := make(chan time.Time, 1)
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			close(started)
			<-ctx.Done()
			stopped <- time.Now()
			return job.Outcome{Class: job.ClassTransient, Err: "cancelled"}
		})
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		insertNow(t, s, j)
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}})
		testkit.Recv(t, started, testkit.Timeout, "the handler to start")
		time.Sleep(600 * time.Millisecond) // running longer than a heartbeat tick
		at := time.Now()
		if _, err := s.Cancel(context.Background(), j.ID, at); err != nil {
			t.Fatal(err)
		}
		if d := testkit.Recv(t, stopped, 3*time.Second, "the running handler to be cancelled").Sub(at); d > time.Second {
			t.Fatalf("handler context cancelled %v after the cancel, want within 1s", d)
		}
		synctest.Wait() // the late outcome refused
		got, _ := s.Get(context.Background(), j.ID)
		if got.State != job.StateTerminal || got.Reason != job.ReasonCancelled {
			t.Fatalf("job after cancel = %s/%s; the late outcome must not overwrite it", got.State, got.Reason)
		}
	})
}

// TestBudgetsAreIndependent is invariant 7: congestion, transient and schema
// attempts are counted separately, and permanent errors are never retried.
func TestBudgetsAreIndependent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		script := []job.Outcome{
			{Class: job.ClassRateLimited, RetryAfter: 20 * time.Millisecond, Status: 429},
			{Class: job.ClassTransient, Status: 502},
			{Class: job.ClassInvalidOutput, Err: "schema"},
			{Class: job.ClassRateLimited, Status: 429},
			{Class: job.ClassSuccess},
		}
		var calls atomic.Int32
		var permCalls atomic.Int32
		kinds := map[string]engine.Kind{
			"noop": {Handler: engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
				return script[calls.Add(1)-1]
			})},
			"perm": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
				permCalls.Add(1)
				return job.Outcome{Class: job.ClassPermanent, Status: 401, Err: "unauthorized"}
			})},
		}
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		j.Budgets = job.Budgets{Congestion: 2, Transient: 1, Schema: 1}
		p := storetest.NewJob("acme", job.LaneInteractive, "k2")
		p.Kind = "perm"
		insertNow(t, s, j, p)
		start(t, engine.Config{Store: s, Kinds: kinds})
		waitFinal(t, s, 90*time.Second)
		got, _ := s.Get(context.Background(), j.ID)
		if got.State != job.StatePublished || got.Attempts != (job.Attempts{Congestion: 2, Transient: 1, Schema: 1}) {
			t.Fatalf("job = %s, attempts %+v; want published after 2 congestion, 1 transient, 1 schema", got.State, got.Attempts)
		}
		if len(got.History) != 5 || got.History[1].Status != 502 {
			t.Fatalf("history has %d records: %+v", len(got.History), got.History)
		}
		pj, _ := s.Get(context.Background(), p.ID)
		if pj.State != job.StateTerminal || pj.Reason != job.ReasonPermanentError || permCalls.Load() != 1 {
			t.Fatalf("permanent job = %s/%s after %d calls; want terminal after exactly 1", pj.State, pj.Reason, permCalls.Load())
		}
	})
}

// TestAbandonedLeaseRecovered is invariant 3: a lease taken by a worker that
// then vanished is recovered within one lease period (plus a reap tick),
// and the lost worker's late outcome is refused. In a synctest bubble, so
// the bound is exact on the fake clock.
func TestAbandonedLeaseRecovered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		j := storetest.NewJob("acme", job.LaneBatch, "k")
		insertNow(t, s, j)
		leased, err := s.Lease(context.Background(), store.LeaseParams{Now: time.Now(), Max: 1, LeaseFor: time.Second})
		if err != nil || len(leased) != 1 {
			t.Fatalf("lease: %v %v", leased, err)
		}
		lost := leased[0]
		at := time.Now()
		const reapEvery = 50 * time.Millisecond
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": noop()}, LeaseFor: time.Second, ReapEvery: reapEvery, HeartbeatEvery: 200 * time.Millisecond})
		var recoveredAt time.Time
		testkit.WaitFor(t, time.Minute, "the lease to be recovered", func() bool {
			if getJob(t, s, j.ID).Attempts.Transient == 0 {
				return false
			}
			recoveredAt = time.Now()
			return true
		})
		// The lease expires 1 s after it was taken, the reaper runs every
		// 50 ms, and the wait above polls at most every 50 ms.
		if d := recoveredAt.Sub(at); d < time.Second || d > time.Second+2*reapEvery {
			t.Fatalf("recovery seen %v after the lease was taken, want from 1s (the lease) to 1s + a reap tick + a poll", d)
		}
		waitFinal(t, s, time.Minute)
		got := getJob(t, s, j.ID)
		if got.State != job.StatePublished || got.Attempts.Transient != 1 || got.History[0].Outcome != job.ClassLeaseExpired {
			t.Fatalf("recovered job = %s attempts %+v history %+v", got.State, got.Attempts, got.History)
		}
		late := engine.Decide(lost, job.Outcome{Class: job.ClassSuccess}, time.Now(), false, engine.Backoff{}, 0)
		errs, err := s.Finish(context.Background(), []store.Transition{late})
		if err != nil || errs[0] == nil {
			t.Fatalf("the lost worker's late outcome was accepted: %v %v", errs, err)
		}
	})
}

// TestInteractiveOvertakesBatchBacklog: an interactive job inserted behind a
// 10,000-job batch backlog on the same key starts within one scheduling
// round. In a synctest bubble: the handlers' millisecond of work is on the
// fake clock, so batch starts cannot run ahead while the test inserts.
func TestInteractiveOvertakesBatchBacklog(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		var batchStarts, interactiveStarts testkit.Counter
		var interactiveAfter atomic.Int64
		interactiveAfter.Store(-1)
		var insertedAt atomic.Int64
		h := engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
			if j.Lane == job.LaneInteractive {
				interactiveAfter.Store(batchStarts.Load() - insertedAt.Load())
				interactiveStarts.Add(1)
			} else {
				batchStarts.Add(1)
			}
			time.Sleep(time.Millisecond)
			return job.Outcome{Class: job.ClassSuccess}
		})
		var batch []*job.Job
		for range 10000 {
			batch = append(batch, storetest.NewJob("acme", job.LaneBatch, "k"))
		}
		insertNow(t, s, batch...)
		const workers = 4
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: workers})
		testkit.Recv(t, batchStarts.Reached(200), testkit.Timeout, "200 batch starts")
		insertedAt.Store(batchStarts.Load())
		insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
		e.Notify()
		testkit.Recv(t, interactiveStarts.Reached(1), testkit.Timeout, "the interactive job to start")
		if n := interactiveAfter.Load(); n < 0 || n > 2*workers {
			t.Fatalf("interactive job started after %d more batch starts, want within one round (<= %d)", n, 2*workers)
		}
	})
}

func TestCrossRegionWiringFails(t *testing.T) {
	t.Parallel()
	s := newStore(t) // region us
	_, err := engine.New(engine.Config{Store: s, Region: "eu", Kinds: map[string]engine.Kind{"noop": noop()}})
	if err == nil || !contains(err.Error(), `"eu"`) || !contains(err.Error(), `"us"`) {
		t.Fatalf("cross-region wiring error = %v, want one naming both regions", err)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

// TestBatchShareDoesNotStarveInteractive: on a paced key with a batch
// backlog, batch's minimum share is earned per start, so interactive jobs
// still take most of the key's tokens instead of waiting out their budget.
// (When the share was earned per lease call, every call let batch go
// first and interactive jobs waited the whole 5 s budget here.) In a
// synctest bubble, so the key's 40/s and the waits are on the fake clock:
// the machine's speed cannot starve the interactive jobs, only the policy.
func TestBatchShareDoesNotStarveInteractive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		pacedBacklog(t, s, 40, 1000)
		var mu sync.Mutex
		started := map[string]time.Time{}
		h := engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
			mu.Lock()
			started[j.ID] = time.Now()
			mu.Unlock()
			return job.Outcome{Class: job.ClassSuccess}
		})
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 8, InteractiveBudget: 5 * time.Second})
		// The batch backlog is flowing: a dozen starts at 40/s.
		testkit.WaitFor(t, testkit.Timeout, "the batch backlog to flow", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(started) >= 12
		})
		inserted := map[string]time.Time{}
		for range 10 {
			j := storetest.NewJob("acme", job.LaneInteractive, "k")
			insertNow(t, s, j)
			inserted[j.ID] = time.Now()
			time.Sleep(100 * time.Millisecond)
		}
		var worst time.Duration
		testkit.Eventually(t, 10*time.Second, "every interactive job to start", func() error {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for id, at := range inserted {
				if st, ok := started[id]; ok {
					n++
					worst = max(worst, st.Sub(at))
				}
			}
			if n < len(inserted) {
				return fmt.Errorf("%d of %d started", n, len(inserted))
			}
			return nil
		})
		// At 40/s with batch's minimum share, ten interactive jobs 100 ms
		// apart each start within a few tokens; the budget is 5 s.
		if worst > 2500*time.Millisecond {
			t.Fatalf("an interactive job waited %v behind the batch backlog (budget 5s); batch must not go first on every call", worst)
		}
		t.Logf("worst interactive wait %v (fake clock)", worst)
	})
}

// TestWakesWhenAKeyAdmits checks that an idle engine sleeps until the next
// admission of a key that refused it, not a whole poll interval: with a
// 10 s poll and a key at 10/s, burst 1, five jobs take 0.4 s, not 40 s. In
// a synctest bubble, so the bound is on the fake clock and can be tight.
func TestWakesWhenAKeyAdmits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		pacedBacklog(t, s, 10, 5)
		at := time.Now()
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": noop()}, Workers: 4, PollInterval: 10 * time.Second})
		st := waitFinal(t, s, 5*time.Second)
		if n := st.Counts[job.LaneBatch][job.StatePublished]; n != 5 {
			t.Fatalf("published %d of 5", n)
		}
		// Four refills of 100 ms, and the wait's last poll of at most 50 ms.
		if d := time.Since(at); d > 500*time.Millisecond {
			t.Fatalf("five jobs at 10/s took %v, want about 0.4s: the engine slept through the key's admissions", d)
		}
	})
}

// TestLeaseWaitsForFreeingSlots: when the last lease returned jobs, the
// fetch loop gives the workers a moment to free their slots before the
// next lease, so each lease asks for every slot. Without it, a lease
// asked only for the slots its predecessor's jobs had not taken: those
// jobs were started but had not yet run, so two cohorts alternated and
// every lease of a PostgreSQL drain of no-op jobs asked for about half the
// workers (docs/benchmarks.md, "Session 13 (s13h4)").
func TestLeaseWaitsForFreeingSlots(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := drainOverlap(t, 1)
		s.mu.Lock()
		asked := slices.Clone(s.asked)
		s.mu.Unlock()
		short := 0
		for _, n := range asked {
			if n < 8 {
				short++
			}
		}
		if short > 0 {
			t.Fatalf("%d of %d lease calls asked for fewer than the 8 workers: %v", short, len(asked), asked)
		}
	})
}

// heldFinishes is a store whose first two Finish calls, once written,
// wait until open is closed to return (so that both return at once), and
// which records every call's batch size.
type heldFinishes struct {
	store.Store
	entered chan struct{} // one send per held call, as it starts waiting
	open    chan struct{}
	mu      sync.Mutex
	sizes   []int
}

func (s *heldFinishes) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(ts))
	held := len(s.sizes) <= 2
	s.mu.Unlock()
	errs, err := s.Store.Finish(ctx, ts)
	if held {
		s.entered <- struct{}{}
		<-s.open
	}
	return errs, err
}

// TestOutcomesQueuedTogetherFinishTogether: with InFlight 2, outcomes that
// queued while both finish calls were in flight are written by one finish
// call when those return, not split between the two finish loops (two
// transactions and commits where one does; docs/benchmarks.md, "Session 21
// (s21h3)"). Both loops are held in the store while six outcomes queue;
// then both return at once, and the next call must carry all six.
func TestOutcomesQueuedTogetherFinishTogether(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &heldFinishes{Store: newStore(t), entered: make(chan struct{}), open: make(chan struct{})}
		second, rest := make(chan struct{}), make(chan struct{})
		var started atomic.Int64
		h := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			switch started.Add(1) {
			case 1:
			case 2:
				<-second
			default:
				<-rest
			}
			return job.Outcome{Class: job.ClassSuccess}
		})
		var jobs []*job.Job
		for range 8 {
			jobs = append(jobs, storetest.NewJob("acme", job.LaneInteractive, "k"))
		}
		insertNow(t, s, jobs...)
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 8, InFlight: 2})
		<-s.entered // the first outcome's finish, held
		close(second)
		<-s.entered // the second's, on the other loop, held
		close(rest)
		synctest.Wait() // the six outcomes are queued; both loops are in Finish
		close(s.open)
		if st := waitFinal(t, s, time.Minute); st.Counts[job.LaneInteractive][job.StatePublished] != 8 {
			t.Fatalf("published %d of 8", st.Counts[job.LaneInteractive][job.StatePublished])
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.sizes) != 3 || s.sizes[0] != 1 || s.sizes[1] != 1 || s.sizes[2] != 6 {
			t.Fatalf("finish calls of %v jobs, want [1 1 6]", s.sizes)
		}
	})
}

// drainOverlap runs 200 no-op jobs on four keys through an engine of 8
// workers and inFlight finish calls, on a leaseOverlap store inside the
// caller's bubble, checks that all were published, and returns the store.
func drainOverlap(t *testing.T, inFlight int) *leaseOverlap {
	t.Helper()
	s := &leaseOverlap{Store: newStore(t)}
	var jobs []*job.Job
	for i := range 200 {
		jobs = append(jobs, storetest.NewJob("acme", job.LaneInteractive, "k"+fmt.Sprint(i%4)))
	}
	insertNow(t, s, jobs...)
	start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": noop()}, Workers: 8, InFlight: inFlight})
	st := waitFinal(t, s, 90*time.Second)
	if st.Counts[job.LaneInteractive][job.StatePublished] != 200 {
		t.Fatalf("published %d of 200", st.Counts[job.LaneInteractive][job.StatePublished])
	}
	return s
}

// leaseOverlap is a store whose Lease takes a millisecond of the bubble's
// clock and remembers the most calls it saw in flight at once.
type leaseOverlap struct {
	store.Store
	mu        sync.Mutex
	now, most int
	asked     []int // each call's p.Max
}

func (s *leaseOverlap) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	s.mu.Lock()
	s.now++
	s.most = max(s.most, s.now)
	s.asked = append(s.asked, p.Max)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}()
	time.Sleep(time.Millisecond) // a lease's round trips: the other loops run meanwhile
	return s.Store.Lease(ctx, p)
}

// TestOneLeaseAtATime: with InFlight 2 (two finish calls at once) an
// engine still has one lease call in flight at a time. On PostgreSQL a
// second one beside it found every ready group locked by the first and
// came back empty (docs/benchmarks.md, "Session 12 (s12h3)"). With two
// fetch loops the calls overlapped here: while one waits in Lease the
// other, woken by a finish, leases too.
func TestOneLeaseAtATime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := drainOverlap(t, 2)
		s.mu.Lock()
		most := s.most
		s.mu.Unlock()
		if most != 1 {
			t.Fatalf("%d lease calls were in flight at once, want 1", most)
		}
	})
}

// TestNoSlotWaitAfterAShortLease: a lease that found fewer ready jobs
// than it asked for is not followed by moreSlots' wait (up to 1 ms for
// running jobs to free slots): no backlog is left for the slots to serve,
// and the wait would only delay the start of a job that becomes ready
// just after, such as a paced key's next, which a window counts from.
// Here one job holds its slot; a job inserted after the lease that started
// it (and the engine told) must be leased at the same instant of the
// bubble's clock, not a millisecond later as it was after any lease that
// returned jobs. (The fetch loop no longer leases again unwoken after a
// short lease: TestSteadyLoadLeasesNoEmpty.)
func TestNoSlotWaitAfterAShortLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &leaseTimes{Store: newStore(t)}
		release := make(chan struct{})
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return job.Outcome{Class: job.ClassSuccess}
		})
		insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 8, PollInterval: time.Hour})
		time.Sleep(10 * time.Millisecond) // past any wait for slots
		synctest.Wait()
		ready := time.Now()
		insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k2"))
		e.Notify()
		time.Sleep(10 * time.Millisecond) // a late lease is recorded too
		synctest.Wait()
		s.mu.Lock()
		calls := slices.Clone(s.calls)
		s.mu.Unlock()
		close(release)
		i := slices.IndexFunc(calls, func(c leaseCall) bool { return c.got > 0 })
		if i < 0 || i+1 >= len(calls) {
			t.Fatalf("lease calls %+v: want one that started the job and one after it", calls)
		}
		if c := calls[i]; c.got >= c.asked {
			t.Fatalf("the lease asked for %d and got %d: the test needs a short one", c.asked, c.got)
		}
		if gap := calls[i+1].at.Sub(ready); gap != 0 {
			t.Fatalf("the lease after a short one came %v after a job was ready, want at once", gap)
		}
	})
}

// leaseTimes is a store that records each Lease call's start and end on
// the bubble's clock, what it asked for and how many jobs it returned.
type leaseTimes struct {
	store.Store
	mu    sync.Mutex
	calls []leaseCall
}

type leaseCall struct {
	at, end    time.Time
	asked, got int
}

func (s *leaseTimes) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	at := time.Now()
	jobs, err := s.Store.Lease(ctx, p)
	s.mu.Lock()
	s.calls = append(s.calls, leaseCall{at: at, end: time.Now(), asked: p.Max, got: len(jobs)})
	s.mu.Unlock()
	return jobs, err
}

// TestHandlerContextCarriesItsLane: a handler's context is marked with its
// job's lane for the store (a batch handler's writes yield at a
// single-writer store) and ends with the engine. The two lanes' contexts
// are made once in Start and shared (docs/benchmarks.md, "Session 15
// (s15h5)"); this pins which is whose.
func TestHandlerContextCarriesItsLane(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	type seen struct {
		lane job.Lane
		ctx  context.Context
	}
	got := make(chan seen, 2)
	e := start(t, engine.Config{Store: s, Workers: 2, Kinds: map[string]engine.Kind{"noop": {
		Handler: engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			got <- seen{store.LaneOf(ctx), ctx}
			if j.Lane != store.LaneOf(ctx) {
				return job.Outcome{Class: job.ClassPermanent, Err: "lane " + string(store.LaneOf(ctx))}
			}
			return job.Outcome{Class: job.ClassSuccess}
		})}}})
	insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k1"), storetest.NewJob("acme", job.LaneInteractive, "k2"))
	lanes := map[job.Lane]bool{}
	var ctxs []context.Context
	for range 2 {
		g := testkit.Recv(t, got, testkit.Timeout, "both handlers to run")
		lanes[g.lane] = true
		ctxs = append(ctxs, g.ctx)
	}
	if !lanes[job.LaneBatch] || !lanes[job.LaneInteractive] {
		t.Fatalf("lanes seen by handlers = %v; want both", lanes)
	}
	st := waitFinal(t, s, testkit.Timeout)
	for lane, byState := range st.Counts {
		if byState[job.StatePublished] != 1 {
			t.Fatalf("lane %s: %+v; want 1 published (the handler saw its own lane)", lane, byState)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range ctxs {
		if c.Err() == nil {
			t.Fatal("a handler's context outlived the engine")
		}
	}
}
