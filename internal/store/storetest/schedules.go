package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// scheduleCases pin the schedule contract: the guarded claim of a tick is
// what makes a periodic producer enqueue each tick exactly once across
// nodes, so each guard is tested on every driver.
var scheduleCases = map[string]func(*testing.T, Opener){
	"ScheduleCRUD":              testScheduleCRUD,
	"ScheduleDue":               testScheduleDue,
	"ClaimTickOnce":             testClaimTickOnce,
	"ClaimTickConcurrent":       testClaimTickConcurrent,
	"ClaimTickAtomic":           testClaimTickAtomic,
	"ClaimTickLedgerGuard":      testClaimTickLedgerGuard,
	"ClaimTickSkipOnlyOrPaused": testClaimTickSkipOnlyOrPaused,
}

// NewSchedule returns a schedule of tenant ready to create: every minute,
// due at T0, producing "report" jobs in region "us".
func NewSchedule(tenant, name string) *store.Schedule {
	id, _ := uuid.NewV7()
	return &store.Schedule{
		ID: id.String(), Tenant: tenant, Region: "us", Name: name, Cron: "* * * * *", TimeZone: "UTC",
		Missed: store.MissedSkip, MaxLate: time.Minute, Template: json.RawMessage(`{"kind":"report"}`), Kind: "report",
		NextAt: T0, Version: 1, CreatedAt: T0, UpdatedAt: T0,
	}
}

// tickJob is the job a tick of sc enqueues.
func tickJob(sc *store.Schedule, tick time.Time) *job.Job {
	j := NewJob(sc.Tenant, job.LaneBatch, "k")
	j.Kind = sc.Kind
	j.IdempotencyKey = "schedule:" + sc.ID + ":" + tick.Format(time.RFC3339Nano)
	return j
}

func createSchedule(t *testing.T, s store.Store, sc *store.Schedule) {
	t.Helper()
	if err := s.CreateSchedule(context.Background(), sc); err != nil {
		t.Fatalf("create schedule %s: %v", sc.Name, err)
	}
}

func getSchedule(t *testing.T, s store.Store, id string) *store.Schedule {
	t.Helper()
	return read(t, "schedule", id, s.GetSchedule)
}

func claim(s store.Store, sc *store.Schedule, expect, tick, next time.Time, j *job.Job) (store.ClaimTickResult, error) {
	return s.ClaimTick(context.Background(), store.ClaimTickParams{
		ScheduleID: sc.ID, Expect: expect, Tick: tick, Job: j, Def: Unpaced, Next: next, Now: tick,
	})
}

func countJobs(t *testing.T, s store.Store, tenant string) int {
	t.Helper()
	got, err := s.List(context.Background(), store.ListParams{Tenant: tenant, Limit: store.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	return len(got)
}

func testScheduleCRUD(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	a := NewSchedule("acme", "nightly")
	a.Cron, a.TimeZone, a.Missed, a.CatchUpMax, a.MaxLate = "30 2 * * *", "Europe/Berlin", store.MissedCatchUp, 5, 6*time.Hour
	createSchedule(t, s, a)
	got := getSchedule(t, s, a.ID)
	if got.Tenant != "acme" || got.Region != "us" || got.Name != "nightly" || got.Cron != "30 2 * * *" || got.TimeZone != "Europe/Berlin" ||
		got.Missed != store.MissedCatchUp || got.CatchUpMax != 5 || got.MaxLate != 6*time.Hour || string(got.Template) != `{"kind":"report"}` ||
		got.Kind != "report" || got.Paused || !got.NextAt.Equal(T0) || got.Version != 1 || !got.CreatedAt.Equal(T0) || !got.LastTickAt.IsZero() {
		t.Fatalf("round trip lost data: %+v", got)
	}
	dup := NewSchedule("acme", "nightly")
	if err := s.CreateSchedule(ctx, dup); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second schedule named nightly in acme: %v, want ErrConflict", err)
	}
	createSchedule(t, s, NewSchedule("globex", "nightly")) // names are per tenant
	every := NewSchedule("acme", "every-30s")
	every.Cron, every.Every, every.Anchor = "", 30*time.Second, T0
	createSchedule(t, s, every)
	if got := getSchedule(t, s, every.ID); got.Every != 30*time.Second || got.Cron != "" || !got.Anchor.Equal(T0) {
		t.Fatalf("interval schedule round trip: %+v", got)
	}
	bad := NewSchedule("acme", "both")
	bad.Every = time.Second
	if err := s.CreateSchedule(ctx, bad); err == nil {
		t.Fatal("a schedule with both cron and every was stored")
	}
	elsewhere := NewSchedule("acme", "elsewhere")
	elsewhere.Region = "eu" // each region has its own store (Schedule.CheckIn)
	if err := s.CreateSchedule(ctx, elsewhere); err == nil {
		t.Fatal("a schedule of another region was stored")
	}

	// Listing: per tenant, in id order, paginated.
	page, err := s.ListSchedules(ctx, store.ScheduleListParams{Tenant: "acme", Limit: 1})
	if err != nil || len(page) != 1 || page[0].ID != a.ID {
		t.Fatalf("first page = %v, %v; want [%s]", page, err, a.ID)
	}
	page, err = s.ListSchedules(ctx, store.ScheduleListParams{Tenant: "acme", After: page[0].ID})
	if err != nil || len(page) != 1 || page[0].ID != every.ID {
		t.Fatalf("second page = %v, %v; want [%s]", page, err, every.ID)
	}
	if all, err := s.ListSchedules(ctx, store.ScheduleListParams{}); err != nil || len(all) != 3 {
		t.Fatalf("all tenants: %d schedules, %v; want 3", len(all), err)
	}

	// Updates are guarded on the version.
	got.Paused, got.UpdatedAt = true, T0.Add(time.Second)
	if err := s.UpdateSchedule(ctx, got); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if now := getSchedule(t, s, a.ID); !now.Paused || now.Version != 2 || !now.UpdatedAt.Equal(T0.Add(time.Second)) {
		t.Fatalf("after pause: %+v", now)
	}
	got.Paused = false // got still holds version 1
	if err := s.UpdateSchedule(ctx, got); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update from a stale version: %v, want ErrConflict", err)
	}
	ghost := NewSchedule("acme", "ghost")
	if err := s.UpdateSchedule(ctx, ghost); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing schedule: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSchedule(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSchedule(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSchedule(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

func testScheduleDue(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	late, early, future, paused := NewSchedule("acme", "late"), NewSchedule("acme", "early"), NewSchedule("acme", "future"), NewSchedule("acme", "paused")
	late.NextAt = T0.Add(-time.Minute)
	future.NextAt = T0.Add(time.Second)
	paused.Paused = true
	for _, sc := range []*store.Schedule{late, early, future, paused} {
		createSchedule(t, s, sc)
	}
	due, err := s.DueSchedules(ctx, T0, 10)
	if err != nil || len(due) != 2 || due[0].ID != late.ID || due[1].ID != early.ID {
		t.Fatalf("due at T0 = %v, %v; want [late early]", due, err)
	}
	if due, _ := s.DueSchedules(ctx, T0.Add(time.Second), 1); len(due) != 1 || due[0].ID != late.ID {
		t.Fatalf("due with limit 1 = %v; want [late]", due)
	}
}

func testClaimTickOnce(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	sc := NewSchedule("acme", "minutely")
	createSchedule(t, s, sc)
	j := tickJob(sc, T0)
	res, err := claim(s, sc, T0, T0, T0.Add(time.Minute), j)
	if err != nil || res.Existing || res.Job == nil || res.Job.ID != j.ID {
		t.Fatalf("first claim = %+v, %v", res, err)
	}
	if got := get(t, s, j.ID); got.State != job.StateWaiting || got.Kind != "report" || got.Tenant != "acme" {
		t.Fatalf("the tick's job: %+v", got)
	}
	after := getSchedule(t, s, sc.ID)
	if !after.NextAt.Equal(T0.Add(time.Minute)) || after.Produced != 1 || after.LastJobID != j.ID || !after.LastTickAt.Equal(T0) || after.Version != 2 {
		t.Fatalf("schedule after the claim: %+v", after)
	}
	// The same tick again (a second node that read the schedule before
	// the claim): refused, nothing inserted.
	if _, err := claim(s, sc, T0, T0, T0.Add(time.Minute), tickJob(sc, T0)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second claim of T0: %v, want ErrConflict", err)
	}
	if n := countJobs(t, s, "acme"); n != 1 {
		t.Fatalf("%d jobs after two claims of one tick, want 1", n)
	}
	tick, err := s.ScheduleTickOf(ctx, j.ID)
	if err != nil || tick.ScheduleID != sc.ID || !tick.Tick.Equal(T0) || tick.JobID != j.ID {
		t.Fatalf("ScheduleTickOf = %+v, %v", tick, err)
	}
	if _, err := s.ScheduleTickOf(ctx, NewJob("acme", job.LaneBatch).ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ScheduleTickOf a job no schedule made: %v, want ErrNotFound", err)
	}
	next := T0.Add(time.Minute)
	j2 := tickJob(sc, next)
	if _, err := claim(s, sc, next, next, next.Add(time.Minute), j2); err != nil {
		t.Fatal(err)
	}
	ticks, err := s.ListScheduleTicks(ctx, sc.ID, 10)
	if err != nil || len(ticks) != 2 || ticks[0].JobID != j2.ID || ticks[1].JobID != j.ID {
		t.Fatalf("ledger = %+v, %v; want the two ticks, newest first", ticks, err)
	}
	if _, err := claim(s, NewSchedule("acme", "ghost"), T0, T0, next, tickJob(sc, T0)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim of a missing schedule: %v, want ErrNotFound", err)
	}
}

// Many claimants of one tick at once (goroutines on one store here; two
// stores on one database in the drivers' and internal/schedule's tests):
// exactly one wins.
func testClaimTickConcurrent(t *testing.T, open Opener) {
	s := open(t)
	sc := NewSchedule("acme", "contended")
	createSchedule(t, s, sc)
	won := contend(t, "claimant", 8, func(int) error {
		_, err := claim(s, sc, T0, T0, T0.Add(time.Minute), tickJob(sc, T0))
		return err
	})
	if won != 1 || countJobs(t, s, "acme") != 1 {
		t.Fatalf("%d claims won and %d jobs, want 1 and 1", won, countJobs(t, s, "acme"))
	}
}

// A claim whose insert fails moves nothing: the claim and the insert are
// one transaction, so a producer that dies between them (or whose insert
// fails) leaves the tick due, to be claimed again.
func testClaimTickAtomic(t *testing.T, open Opener) {
	s := open(t)
	sc := NewSchedule("acme", "atomic")
	createSchedule(t, s, sc)
	taken := NewJob("acme", job.LaneBatch, "k")
	insert(t, s, taken)
	j := tickJob(sc, T0)
	j.ID = taken.ID // the insert fails: the id is taken
	if _, err := claim(s, sc, T0, T0, T0.Add(time.Minute), j); err == nil {
		t.Fatal("a claim whose job id is taken succeeded")
	}
	after := getSchedule(t, s, sc.ID)
	if !after.NextAt.Equal(T0) || after.Produced != 0 || after.Version != 1 {
		t.Fatalf("a failed claim moved the schedule: %+v", after)
	}
	if ticks, _ := s.ListScheduleTicks(context.Background(), sc.ID, 10); len(ticks) != 0 {
		t.Fatalf("a failed claim left a ledger entry: %+v", ticks)
	}
	if _, err := claim(s, sc, T0, T0, T0.Add(time.Minute), tickJob(sc, T0)); err != nil {
		t.Fatalf("the tick could not be claimed after the failed claim: %v", err)
	}
}

// A schedule edited back onto a tick it already produced does not enqueue
// that tick again: the ledger names the earlier job.
func testClaimTickLedgerGuard(t *testing.T, open Opener) {
	s := open(t)
	sc := NewSchedule("acme", "rewound")
	createSchedule(t, s, sc)
	first := tickJob(sc, T0)
	if _, err := claim(s, sc, T0, T0, T0.Add(time.Minute), first); err != nil {
		t.Fatal(err)
	}
	back := getSchedule(t, s, sc.ID)
	back.NextAt = T0
	if err := s.UpdateSchedule(context.Background(), back); err != nil {
		t.Fatal(err)
	}
	again := tickJob(sc, T0)
	again.IdempotencyKey = "" // only the ledger can catch it
	res, err := claim(s, sc, T0, T0, T0.Add(time.Minute), again)
	if err != nil || !res.Existing || res.Job == nil || res.Job.ID != first.ID {
		t.Fatalf("claim of a tick in the ledger = %+v, %v; want the first job, existing", res, err)
	}
	if n := countJobs(t, s, "acme"); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if got := getSchedule(t, s, sc.ID); got.Produced != 1 || !got.NextAt.Equal(T0.Add(time.Minute)) {
		t.Fatalf("schedule after the replayed tick: %+v", got)
	}
}

func testClaimTickSkipOnlyOrPaused(t *testing.T, open Opener) {
	s := open(t)
	sc := NewSchedule("acme", "skipper")
	createSchedule(t, s, sc)
	next := T0.Add(10 * time.Minute)
	_, err := s.ClaimTick(context.Background(), store.ClaimTickParams{ScheduleID: sc.ID, Expect: T0, Next: next, Skipped: 10, Now: next})
	if err != nil {
		t.Fatal(err)
	}
	got := getSchedule(t, s, sc.ID)
	if !got.NextAt.Equal(next) || got.Skipped != 10 || got.Produced != 0 || got.LastJobID != "" {
		t.Fatalf("after skipping ten ticks: %+v", got)
	}
	got.Paused = true
	if err := s.UpdateSchedule(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := claim(s, sc, next, next, next.Add(time.Minute), tickJob(sc, next)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("claim of a paused schedule: %v, want ErrConflict", err)
	}
	if n := countJobs(t, s, "acme"); n != 0 {
		t.Fatalf("%d jobs, want 0", n)
	}
}
