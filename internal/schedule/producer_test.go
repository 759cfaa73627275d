package schedule_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/schedule"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/postgres/pgtest"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// node is one ratelane node's view of a region: its own store handle (its
// own connections) and writer, and a producer.
type node struct {
	st   store.Store
	prod *schedule.Producer
}

func newNode(t *testing.T, st store.Store) node {
	t.Helper()
	jobs, err := engine.NewJobs(engine.JobsConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	p, err := schedule.New(schedule.Config{Store: st, Jobs: jobs, Regions: []string{"us"}})
	if err != nil {
		t.Fatal(err)
	}
	return node{st: st, prod: p}
}

// twoSQLiteNodes opens one SQLite file twice, as two processes would.
func twoSQLiteNodes(t *testing.T) (node, node) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "us.db")
	var nodes []node
	for range 2 {
		st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Region: "us"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		nodes = append(nodes, newNode(t, st))
	}
	return nodes[0], nodes[1]
}

// twoPostgresNodes opens two stores with their own pools on one fresh
// schema of RATELANE_TEST_POSTGRES_URL, dropped when the test ends.
func twoPostgresNodes(t *testing.T) (node, node) {
	t.Helper()
	url, schema := testkit.PostgresSchema(t, "rl_sched_")
	var nodes []node
	for range 2 {
		nodes = append(nodes, newNode(t, pgtest.Open(t, url, schema, 4)))
	}
	return nodes[0], nodes[1]
}

var t0 = storetest.T0

func newSchedule(t *testing.T, st store.Store, name string, mutate func(*store.Schedule)) *store.Schedule {
	t.Helper()
	sc := storetest.NewSchedule("acme", name)
	sc.Template = json.RawMessage(`{"kind":"report.build","limit_keys":["reports"],"payload":{"r":1}}`)
	sc.Kind = "report.build"
	if mutate != nil {
		mutate(sc)
	}
	if err := st.CreateSchedule(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

func producedJobs(t *testing.T, st store.Store) []*job.Job {
	t.Helper()
	jobs, err := st.List(context.Background(), store.ListParams{Tenant: "acme", Limit: store.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// Two nodes poll at the same moments, concurrently: every tick is enqueued
// exactly once, and each job names its tick.
func testExactlyOnceAcrossNodes(t *testing.T, a, b node) {
	sc := newSchedule(t, a.st, "every-minute", func(sc *store.Schedule) {
		sc.Missed, sc.CatchUpMax, sc.MaxLate = store.MissedCatchUp, 5, time.Hour
	})
	ctx := context.Background()
	enqueued := 0
	// 30 polls a minute apart, plus one catch-up after a 3-minute gap.
	var polls []time.Time
	for i := range 30 {
		polls = append(polls, t0.Add(time.Duration(i)*time.Minute+time.Second))
	}
	polls = append(polls, t0.Add(33*time.Minute+time.Second))
	for _, now := range polls {
		var wg sync.WaitGroup
		res := make([]schedule.Result, 2)
		errs := make([]error, 2)
		for i, n := range []node{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = n.prod.RunOnce(ctx, now)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("poll at %s: %v", now, err)
			}
		}
		enqueued += res[0].Enqueued + res[1].Enqueued
	}
	const wantTicks = 34 // t0 .. t0+33m
	jobs := producedJobs(t, a.st)
	if enqueued != wantTicks || len(jobs) != wantTicks {
		t.Fatalf("%d enqueued by the producers and %d jobs stored; want %d of each", enqueued, len(jobs), wantTicks)
	}
	seen := map[string]bool{}
	for _, j := range jobs {
		if seen[j.IdempotencyKey] {
			t.Fatalf("two jobs for tick key %s", j.IdempotencyKey)
		}
		seen[j.IdempotencyKey] = true
		tick, err := a.st.ScheduleTickOf(ctx, j.ID)
		if err != nil || tick.ScheduleID != sc.ID || j.IdempotencyKey != schedule.TickKey(sc.ID, tick.Tick) {
			t.Fatalf("job %s (%s): ledger says %+v, %v", j.ID, j.IdempotencyKey, tick, err)
		}
		if j.Kind != "report.build" || j.Tenant != "acme" || j.Region != "us" || string(j.Payload) != `{"r":1}` {
			t.Fatalf("produced job %+v", j)
		}
	}
	got, _ := b.st.GetSchedule(ctx, sc.ID)
	if got.Produced != wantTicks || got.Skipped != 0 || !got.NextAt.Equal(t0.Add(34*time.Minute)) {
		t.Fatalf("schedule after the polls: produced %d, skipped %d, next %s", got.Produced, got.Skipped, got.NextAt)
	}
}

func TestExactlyOnceAcrossNodesSQLite(t *testing.T) {
	t.Parallel()
	a, b := twoSQLiteNodes(t)
	testExactlyOnceAcrossNodes(t, a, b)
}

func TestExactlyOnceAcrossNodesPostgres(t *testing.T) {
	t.Parallel()
	a, b := twoPostgresNodes(t)
	testExactlyOnceAcrossNodes(t, a, b)
}

// The missed-tick policies through the producer and store, with an
// explicit clock: a node down for an hour.
func TestMissedTicksThroughTheStore(t *testing.T) {
	t.Parallel()
	a, _ := twoSQLiteNodes(t)
	ctx := context.Background()
	skip := newSchedule(t, a.st, "skip", nil) // skip, max late 1m
	catch := newSchedule(t, a.st, "catch-up", func(sc *store.Schedule) {
		sc.Missed, sc.CatchUpMax, sc.MaxLate = store.MissedCatchUp, 4, 24*time.Hour
	})
	now := t0.Add(time.Hour + 10*time.Second) // ticks t0 .. t0+60m are due
	res, err := a.prod.RunOnce(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Enqueued != 1+4 || res.Skipped != 60+57 {
		t.Fatalf("poll after an hour down = %+v; want 5 enqueued (skip: the latest; catch_up: 4), 117 skipped", res)
	}
	s, _ := a.st.GetSchedule(ctx, skip.ID)
	c, _ := a.st.GetSchedule(ctx, catch.ID)
	if s.Produced != 1 || s.Skipped != 60 || !s.LastTickAt.Equal(t0.Add(time.Hour)) || !s.NextAt.Equal(t0.Add(61*time.Minute)) {
		t.Fatalf("skip schedule: %+v", s)
	}
	if c.Produced != 4 || c.Skipped != 57 || !c.LastTickAt.Equal(t0.Add(time.Hour)) || !c.NextAt.Equal(t0.Add(61*time.Minute)) {
		t.Fatalf("catch_up schedule: %+v", c)
	}
	ticks, _ := a.st.ListScheduleTicks(ctx, catch.ID, 10)
	if len(ticks) != 4 || !ticks[3].Tick.Equal(t0.Add(57*time.Minute)) {
		t.Fatalf("catch_up ledger: %+v", ticks)
	}
	// Nothing more is due until the next minute.
	if res, _ := a.prod.RunOnce(ctx, now.Add(time.Second)); res.Enqueued != 0 || res.Skipped != 0 {
		t.Fatalf("a second poll in the same minute did %+v", res)
	}
}

// A producer stopped between claims of a catch-up (or killed before a
// claim commits) resumes where the store says: the claim and the insert
// are one transaction, so the schedule's NextAt and the jobs always agree.
// Here the insert of the second tick fails (its limit key can no longer
// admit the cost), which must cost that tick only, counted as skipped.
func TestInadmissibleTickIsSkippedNotStalled(t *testing.T) {
	t.Parallel()
	a, _ := twoSQLiteNodes(t)
	ctx := context.Background()
	if _, err := a.st.UpsertLimit(ctx, admissionConfig("reports", 1), t0); err != nil {
		t.Fatal(err)
	}
	sc := newSchedule(t, a.st, "costly", func(sc *store.Schedule) {
		sc.Template = json.RawMessage(`{"kind":"report.build","limit_keys":["reports"],"cost":5}`)
	})
	res, err := a.prod.RunOnce(ctx, t0.Add(time.Second))
	if err != nil || res.Enqueued != 0 || res.Skipped != 1 {
		t.Fatalf("poll = %+v, %v; want the tick skipped", res, err)
	}
	got, _ := a.st.GetSchedule(ctx, sc.ID)
	if got.Skipped != 1 || !got.NextAt.Equal(t0.Add(time.Minute)) || len(producedJobs(t, a.st)) != 0 {
		t.Fatalf("schedule after an inadmissible tick: %+v", got)
	}
}

func TestPausedAndResumed(t *testing.T) {
	t.Parallel()
	a, _ := twoSQLiteNodes(t)
	ctx := context.Background()
	sc := newSchedule(t, a.st, "paused", func(sc *store.Schedule) { sc.Missed, sc.CatchUpMax = store.MissedCatchUp, 10 })
	sc.Paused = true
	if err := a.st.UpdateSchedule(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if res, _ := a.prod.RunOnce(ctx, t0.Add(5*time.Minute)); res.Enqueued != 0 {
		t.Fatalf("a paused schedule produced %+v", res)
	}
	got, _ := a.st.GetSchedule(ctx, sc.ID)
	now := t0.Add(5*time.Minute + 30*time.Second)
	if err := schedule.Resume(got, now); err != nil {
		t.Fatal(err)
	}
	if err := a.st.UpdateSchedule(ctx, got); err != nil {
		t.Fatal(err)
	}
	// Resume does not replay the ticks of the pause, even for catch_up.
	if res, _ := a.prod.RunOnce(ctx, now); res.Enqueued != 0 {
		t.Fatalf("resume replayed ticks of the pause: %+v", res)
	}
	if res, _ := a.prod.RunOnce(ctx, t0.Add(6*time.Minute)); res.Enqueued != 1 {
		t.Fatalf("first tick after resume: %+v", res)
	}
}

// Start and Stop run real polls on a clock that stands still mid-minute;
// the schedule (every minute) is made due a second before, so the first
// poll enqueues without waiting and no later tick falls due however long
// the test takes. (On the wall clock a due time a second before a minute
// boundary made the next tick due a second later: two jobs under load.)
func TestStartStop(t *testing.T) {
	t.Parallel()
	a, _ := twoSQLiteNodes(t)
	woke := make(chan struct{}, 1)
	jobs, _ := engine.NewJobs(engine.JobsConfig{Store: a.st})
	clock := testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 30, 0, time.UTC))
	p, err := schedule.New(schedule.Config{Store: a.st, Jobs: jobs, Poll: 10 * time.Millisecond, Now: clock.Now, OnEnqueue: func() {
		select {
		case woke <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	newSchedule(t, a.st, "now", func(sc *store.Schedule) { sc.NextAt = clock.Now().Add(-time.Second) })
	p.Start(context.Background())
	testkit.Recv(t, woke, testkit.Timeout, "the producer to enqueue the due tick")
	p.Stop()
	p.Stop()
	if n := len(producedJobs(t, a.st)); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

func admissionConfig(name string, burst float64) admission.Config {
	return admission.Config{Name: name, Rate: 1, Burst: burst}
}

func engineJobs(st store.Store) (*engine.Jobs, error) {
	return engine.NewJobs(engine.JobsConfig{Store: st})
}
