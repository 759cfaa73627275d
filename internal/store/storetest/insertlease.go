package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// insertLeaseCases pin store.InsertLeaser: an insert that leases in its
// own write leases exactly what a Lease right after the insert would.
var insertLeaseCases = map[string]func(*testing.T, Opener){
	"InsertLeaseAdmits":     testInsertLeaseAdmits,
	"InsertLeaseTakesReady": testInsertLeaseTakesReady,
}

// insertLease calls s's InsertLease with os and jobs at now for up to max
// jobs, skipping t when the driver has no such capability.
func insertLease(t *testing.T, s store.Store, now time.Time, max int, os []store.Object, jobs ...*job.Job) ([]store.InsertResult, []*job.Job) {
	t.Helper()
	il := optional[store.InsertLeaser](t, s)
	res, leased, err := il.InsertLease(context.Background(), os, jobs, Unpaced, store.LeaseParams{Now: now, Max: max, LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatalf("insert and lease: %v", err)
	}
	if len(res) != len(jobs) {
		t.Fatalf("insert and lease answered %d results for %d jobs", len(res), len(jobs))
	}
	return res, leased
}

// testInsertLeaseAdmits: the lease in an insert's write is the store's
// admission as any lease's. A job on a key at its concurrency cap or on
// a paused key is inserted and left waiting; Max bounds what is leased;
// Max 0 leases nothing; and a job leased so is running under a lease
// that expires, holding its key's slot.
func testInsertLeaseAdmits(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	at := func(ms int) time.Time { return T0.Add(time.Duration(ms) * time.Millisecond) }
	setLimit(t, s, admission.Config{Name: "cap", Concurrency: 1})
	insert(t, s, NewJob("acme", job.LaneInteractive, "cap"))
	if got := lease(t, s, at(1), 5); len(got) != 1 {
		t.Fatalf("leased %d with a cap of 1, want 1", len(got))
	}
	capped := NewJob("acme", job.LaneInteractive, "cap")
	if res, leased := insertLease(t, s, at(2), 5, nil, capped); len(leased) != 0 || res[0].Existing {
		t.Fatalf("an insert on a key at its cap leased %d jobs (existing %v), want it inserted and none leased", len(leased), res[0].Existing)
	}
	if got := get(t, s, capped.ID); got.State != job.StateWaiting {
		t.Fatalf("the job on the capped key is %s, want waiting", got.State)
	}

	// A key paused until 10 s: what an insert leases before then takes
	// none of its jobs.
	insert(t, s, NewJob("acme", job.LaneInteractive, "hot"))
	j := lease(t, s, at(3), 1)[0]
	pause := T0.Add(10 * time.Second)
	mustOK(t, finish(t, s, store.Transition{
		ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled, EligibleAt: pause,
		Attempts: job.Attempts{Congestion: 1},
		Record:   job.AttemptRecord{At: at(4), Attempt: 1, Outcome: job.ClassRateLimited, Status: 429, Delay: 10 * time.Second},
		Keys:     store.KeyEffect{Now: at(4), RateLimited: true, PauseUntil: pause},
	}))
	paused := NewJob("acme", job.LaneInteractive, "hot")
	if _, leased := insertLease(t, s, at(5), 5, nil, paused); len(leased) != 0 {
		t.Fatalf("an insert on a paused key leased %v", ids(leased))
	}

	// Max bounds the lease; Max 0 leases nothing.
	free := newJobs(3, "acme", job.LaneInteractive, "free")
	if _, leased := insertLease(t, s, at(6), 0, nil, free[0]); len(leased) != 0 {
		t.Fatalf("an insert with Max 0 leased %d jobs", len(leased))
	}
	_, leased := insertLease(t, s, at(7), 2, nil, free[1:]...)
	if len(leased) != 2 {
		t.Fatalf("an insert of 2 ready jobs beside 1 with Max 2 leased %d, want 2", len(leased))
	}
	for _, l := range leased {
		got := get(t, s, l.ID)
		if got.State != job.StateRunning || got.LeaseToken != l.LeaseToken || !got.LeaseExpiresAt.Equal(at(7).Add(30*time.Second)) {
			t.Fatalf("leased job %s is %s, token %q (want %q), expiring %v (want %v)", l.ID, got.State, got.LeaseToken, l.LeaseToken, got.LeaseExpiresAt, at(7).Add(30*time.Second))
		}
		if l.LimitKeys[0] != "free" {
			t.Fatalf("leased a job on %v", l.LimitKeys)
		}
	}
	if more := lease(t, s, at(8), 10); len(more) != 1 || more[0].LimitKeys[0] != "free" {
		t.Fatalf("after the insert's lease, a lease took %d jobs, want the third free one alone", len(more))
	}
	if k, err := s.GetLimit(ctx, "cap"); err != nil || k.InFlight != 1 {
		t.Fatalf("cap key in flight = %d (%v), want 1", k.InFlight, err)
	}
	// The capped and paused jobs wait for their keys, as after any lease.
	if got := lease(t, s, pause.Add(time.Millisecond), 10); len(got) != 2 {
		t.Fatalf("after the pause, leased %d, want the paused key's 2 jobs", len(got))
	}
}

// testInsertLeaseTakesReady: the lease is a Lease with the caller's
// parameters, not a lease of the inserted jobs: it takes a job that was
// waiting before the insert (in its group's order) and leaves out the
// lanes and kinds p excludes. The insert's objects are stored, and an
// idempotent replay answers with the existing job, as Insert's.
func testInsertLeaseTakesReady(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	older := NewJob("acme", job.LaneInteractive, "k")
	batch := NewJob("acme", job.LaneBatch, "k")
	insert(t, s, older, batch)
	il := optional[store.InsertLeaser](t, s)
	fresh := NewJob("acme", job.LaneInteractive, "k")
	fresh.IdempotencyKey = "once"
	obj := store.Object{Kind: "doc", ID: "d1", Body: []byte("text"), UpdatedAt: T0}
	res, leased, err := il.InsertLease(ctx, []store.Object{obj}, []*job.Job{fresh}, Unpaced,
		store.LeaseParams{Now: T0, Max: 1, LeaseFor: 30 * time.Second, Lane: job.LaneInteractive})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Existing || len(leased) != 1 || leased[0].ID != older.ID {
		t.Fatalf("insert and lease of 1: existing %v, leased %v; want the older waiting job %s", res[0].Existing, ids(leased), older.ID)
	}
	if o, err := s.GetObject(ctx, "doc", "d1"); err != nil || string(o.Body) != "text" {
		t.Fatalf("the insert's object: %q, %v", o.Body, err)
	}
	again := NewJob("acme", job.LaneInteractive, "k")
	again.IdempotencyKey = "once"
	res, leased, err = il.InsertLease(ctx, nil, []*job.Job{again}, Unpaced,
		store.LeaseParams{Now: T0, Max: 5, LeaseFor: 30 * time.Second, Lane: job.LaneInteractive})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Existing || res[0].Job.ID != fresh.ID {
		t.Fatalf("a replay answered existing %v with job %s, want %s", res[0].Existing, res[0].Job.ID, fresh.ID)
	}
	if len(leased) != 1 || leased[0].ID != fresh.ID {
		t.Fatalf("the replay's lease took %v, want the first insert's job %s alone (no batch-lane job)", ids(leased), fresh.ID)
	}
	if got := get(t, s, batch.ID); got.State != job.StateWaiting {
		t.Fatalf("the batch-lane job is %s, want waiting", got.State)
	}
}

// RunLeaseHalfFaults is the fault of a write whose lease half fails,
// for one driver: failLeases(true) makes the database refuse every lease
// of a job (an update to running), as a trigger can, and
// failLeases(false) lifts that. An insert that leases
// (store.InsertLeaser) and a finish that leases (store.FinishLeaser) are
// each one write whose lease half then fails after their first half ran
// in the same transaction: the call must fail whole, as their contracts
// say. An insert must not leave its jobs stored and waiting while its
// caller was told they were not (a retry without an idempotency key would
// insert them twice), nor a limit key's slot taken by a lease that never
// happened; its idempotency key stays free, and the retry inserts and
// leases as the first call would have. A finish must leave its job
// running under its lease, for the engine to finish it alone, and its
// key's slot held.
func RunLeaseHalfFaults(t *testing.T, s store.Store, failLeases func(on bool)) {
	ctx := context.Background()
	il := optional[store.InsertLeaser](t, s)
	setLimit(t, s, admission.Config{Name: "cap", Concurrency: 2})
	older := NewJob("acme", job.LaneInteractive, "cap")
	insert(t, s, older)
	fresh := NewJob("acme", job.LaneInteractive, "cap")
	fresh.IdempotencyKey = "fault-once"
	p := store.LeaseParams{Now: T0, Max: 2, LeaseFor: 30 * time.Second, Lane: job.LaneInteractive}
	injected := func(err error) bool { return err != nil && strings.Contains(err.Error(), "injected") }
	inFlight := func(want int, when string) {
		t.Helper()
		if k, err := s.GetLimit(ctx, "cap"); err != nil || k.InFlight != want {
			t.Fatalf("%s the key has %d in flight (%v), want %d", when, k.InFlight, err, want)
		}
	}

	failLeases(true)
	res, leased, err := il.InsertLease(ctx, nil, []*job.Job{fresh}, Unpaced, p)
	failLeases(false)
	if !injected(err) {
		t.Fatalf("insert and lease with leases refused answered %d results, leased %v, error %v: no fault injected", len(res), ids(leased), err)
	}
	if j, gerr := s.Get(ctx, fresh.ID); !errors.Is(gerr, store.ErrNotFound) {
		t.Fatalf("after a failed insert and lease (%v) its job reads %+v, %v; want it not stored", err, j, gerr)
	}
	if j := get(t, s, older.ID); j.State != job.StateWaiting || j.Attempt != 0 || j.LeaseToken != "" {
		t.Fatalf("after a failed insert and lease the older job is %s, attempt %d, token %q; want it waiting as before", j.State, j.Attempt, j.LeaseToken)
	}
	inFlight(0, "after a failed insert and lease")

	// The retry: the key is free, and the lease takes both jobs.
	again := NewJob("acme", job.LaneInteractive, "cap")
	again.IdempotencyKey = "fault-once"
	res, leased, err = il.InsertLease(ctx, nil, []*job.Job{again}, Unpaced, p)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Existing || len(leased) != 2 {
		t.Fatalf("the retry answered existing %v and leased %v, want it inserted and both jobs leased", res[0].Existing, ids(leased))
	}
	inFlight(2, "after the retry")

	// A finish that frees a slot of the key, whose lease of the job
	// waiting for it is refused.
	fl := optional[store.FinishLeaser](t, s)
	next := NewJob("acme", job.LaneInteractive, "cap")
	insert(t, s, next)
	done := leased[0]
	fp := store.LeaseParams{Now: T0.Add(time.Second), Max: 5, LeaseFor: 30 * time.Second, Released: func(bool) {}}
	failLeases(true)
	_, took, err := fl.FinishLease(ctx, []store.Transition{success(done, fp.Now)}, fp)
	failLeases(false)
	if !injected(err) {
		t.Fatalf("finish and lease with leases refused leased %v, error %v: no fault injected", ids(took), err)
	}
	if j := get(t, s, done.ID); j.State != job.StateRunning || j.LeaseToken != done.LeaseToken {
		t.Fatalf("after a failed finish and lease its job is %s with token %q, want running under its lease %q", j.State, j.LeaseToken, done.LeaseToken)
	}
	if j := get(t, s, next.ID); j.State != job.StateWaiting {
		t.Fatalf("after a failed finish and lease the next job is %s, want waiting", j.State)
	}
	inFlight(2, "after a failed finish and lease")
	errs, took, err := fl.FinishLease(ctx, []store.Transition{success(done, fp.Now)}, fp)
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, errs)
	if len(took) != 1 || took[0].ID != next.ID || get(t, s, done.ID).State != job.StatePublished {
		t.Fatalf("the finish and lease again leased %v, want the next job %s, and its job published", ids(took), next.ID)
	}
	inFlight(2, "after the finish and lease again")
}
