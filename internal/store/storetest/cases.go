package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// contend runs attempt n times at once, as n racers for one guarded write,
// and returns how many succeeded. A loser must get store.ErrConflict; any
// other error fails the test, naming what raced.
func contend(t *testing.T, what string, n int, attempt func(i int) error) (won int) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = attempt(i) })
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("%s %d of %d: %v, want success or ErrConflict", what, i, n, err)
		}
	}
	return won
}

func testInsertGet(t *testing.T, open Opener) {
	s := open(t)
	j := NewJob("acme", job.LaneInteractive, "a", "b")
	j.Priority, j.Deadline, j.Depth = 5, T0.Add(time.Hour), "degraded"
	res := insert(t, s, j)
	if res[0].Existing {
		t.Fatal("a new job was reported as existing")
	}
	got := get(t, s, j.ID)
	if got.State != job.StateWaiting || got.Tenant != "acme" || got.Priority != 5 || got.Depth != "degraded" ||
		!got.Deadline.Equal(j.Deadline) || !got.EligibleAt.Equal(T0) || string(got.Payload) != `{"n":1}` ||
		len(got.LimitKeys) != 2 || got.LimitKeys[1] != "b" || got.Budgets != job.DefaultBudgets {
		t.Fatalf("round trip lost data: %+v", got)
	}
	if _, err := s.Get(context.Background(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: %v, want ErrNotFound", err)
	}
	if _, err := s.GetLimit(context.Background(), "a"); err != nil {
		t.Fatalf("insert did not create limit key a: %v", err)
	}
}

func testIdempotentInsert(t *testing.T, open Opener) {
	s := open(t)
	a := NewJob("acme", job.LaneBatch, "k")
	a.IdempotencyKey = "evt-1:sub-1:1"
	insert(t, s, a)
	b := NewJob("acme", job.LaneBatch, "k")
	b.IdempotencyKey = a.IdempotencyKey
	res := insert(t, s, b)
	if !res[0].Existing || res[0].Job.ID != a.ID {
		t.Fatalf("second insert = %+v, want the existing job %s", res[0], a.ID)
	}
	other := NewJob("globex", job.LaneBatch, "k")
	other.IdempotencyKey = a.IdempotencyKey
	if res := insert(t, s, other); res[0].Existing {
		t.Fatal("idempotency keys must be scoped to the tenant")
	}
	if _, err := s.Get(context.Background(), b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("duplicate was stored: %v", err)
	}
}

func testConcurrentIdempotency(t *testing.T, open Opener) {
	s := open(t)
	var wg sync.WaitGroup
	created := make(chan string, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := NewJob("acme", job.LaneBatch, "k")
			j.IdempotencyKey = "same"
			res, err := s.Insert(context.Background(), []*job.Job{j}, Unpaced)
			if err != nil {
				t.Errorf("insert: %v", err)
				return
			}
			created <- res[0].Job.ID
		}()
	}
	wg.Wait()
	close(created)
	distinct := map[string]bool{}
	for id := range created {
		distinct[id] = true
	}
	if len(distinct) != 1 {
		t.Fatalf("20 concurrent inserts with one idempotency key created %d jobs", len(distinct))
	}
}

// testLeaseReturnsStored: a lease returns each job as the store then holds
// it, every field (a driver may take some from the job's group rather than
// read them back), over groups of different lanes, tenants and kinds.
func testLeaseReturnsStored(t *testing.T, open Opener) {
	s := open(t)
	a, b := NewJob("acme", job.LaneInteractive, "k", "k2"), NewJob("globex", job.LaneBatch, "k")
	c := NewJob("acme", job.LaneBatch, "k2")
	c.Kind, c.Priority, c.Cost, c.IdempotencyKey, c.Deadline = "report", 3, 2, "idem-c", T0.Add(time.Hour)
	insert(t, s, a, b, c)
	got := lease(t, s, T0, 10)
	if len(got) != 3 {
		t.Fatalf("leased %d jobs, want 3", len(got))
	}
	for _, j := range got {
		stored := get(t, s, j.ID)
		stored.History = j.History // none yet; Get decodes it, a lease does not
		if !reflect.DeepEqual(j, stored) {
			t.Errorf("leased job\n%+v\nstored as\n%+v", j, stored)
		}
	}
}

func testLeaseBasics(t *testing.T, open Opener) {
	s := open(t)
	a, b := NewJob("acme", job.LaneInteractive, "k"), NewJob("acme", job.LaneInteractive, "k")
	insert(t, s, a, b)
	got := lease(t, s, T0, 10)
	if len(got) != 2 {
		t.Fatalf("leased %d jobs, want 2", len(got))
	}
	for _, j := range got {
		if j.State != job.StateRunning || j.LeaseToken == "" || !j.LeaseExpiresAt.Equal(T0.Add(30*time.Second)) || j.Attempt != 1 {
			t.Fatalf("leased job %+v lacks running state, token, expiry or attempt", j)
		}
	}
	if again := lease(t, s, T0, 10); len(again) != 0 {
		t.Fatalf("a running job was leased again: %d", len(again))
	}
	if k, _ := s.GetLimit(context.Background(), "k"); k.InFlight != 2 {
		t.Fatalf("in flight = %d, want 2", k.InFlight)
	}
	mustOK(t, finish(t, s, success(got[0], T0), success(got[1], T0)))
	if k, _ := s.GetLimit(context.Background(), "k"); k.InFlight != 0 {
		t.Fatalf("in flight after finish = %d, want 0", k.InFlight)
	}
	done := get(t, s, a.ID)
	if done.State != job.StatePublished || done.FinishedAt.IsZero() || len(done.History) != 1 || done.History[0].Outcome != job.ClassSuccess {
		t.Fatalf("finished job = %+v", done)
	}
}

func testLeaseRespectsEligible(t *testing.T, open Opener) {
	s := open(t)
	later := NewJob("acme", job.LaneBatch, "k")
	later.EligibleAt = T0.Add(time.Minute)
	insert(t, s, later)
	if got := lease(t, s, T0, 5); len(got) != 0 {
		t.Fatal("a job was leased before its eligible_at")
	}
	if got := lease(t, s, T0.Add(time.Minute), 5); len(got) != 1 {
		t.Fatalf("job not leased at its eligible_at: %d", len(got))
	}
}

func testGuardedFinish(t *testing.T, open Opener) {
	s := open(t)
	insert(t, s, NewJob("acme", job.LaneBatch, "k"))
	j := lease(t, s, T0, 1)[0]
	stale := success(j, T0)
	stale.LeaseToken = "not-the-token"
	if errs := finish(t, s, stale); !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("finish with a wrong token = %v, want ErrConflict", errs[0])
	}
	mustOK(t, finish(t, s, success(j, T0)))
	if errs := finish(t, s, success(j, T0)); !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("second finish = %v, want ErrConflict", errs[0])
	}
	if err := s.Heartbeat(context.Background(), j.ID, j.LeaseToken, T0.Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("heartbeat of a finished job = %v, want ErrConflict", err)
	}
}

// testFinishBatch checks one Finish call mixing a success with a result, a
// stale token, the same job twice and an illegal transition: each gets its
// own answer, the result is kept byte for byte, the history has one record
// per ended attempt, and a retry's job is back in line.
func testFinishBatch(t *testing.T, open Opener) {
	s := open(t)
	insert(t, s, NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneBatch, "k"))
	js := lease(t, s, T0, 3)
	if len(js) != 3 {
		t.Fatalf("leased %d of 3", len(js))
	}
	a, b, c := js[0], js[1], js[2]
	ok := success(a, T0)
	ok.Result = []byte(`{"findings": [1, 2],  "note": "kept as is"}`)
	stale := success(b, T0)
	stale.LeaseToken = "not-the-token"
	retry := success(c, T0)
	retry.To, retry.EligibleAt = job.StateRetryScheduled, T0.Add(time.Second)
	retry.Record.Outcome = job.ClassTransient
	retry.Attempts.Transient++
	illegal := success(b, T0)
	illegal.To = job.StateAccepted
	errs := finish(t, s, ok, stale, success(a, T0), illegal, retry)
	if errs[0] != nil || !errors.Is(errs[1], store.ErrConflict) || !errors.Is(errs[2], store.ErrConflict) ||
		errs[3] == nil || errors.Is(errs[3], store.ErrConflict) || errs[4] != nil {
		t.Fatalf("errors = %v; want nil, conflict, conflict (same job twice), illegal transition, nil", errs)
	}
	got := get(t, s, a.ID)
	if got.State != job.StatePublished || string(got.Result) != string(ok.Result) {
		t.Fatalf("a: state %s result %s; want published with the result byte for byte", got.State, got.Result)
	}
	if len(got.History) != 1 {
		t.Fatalf("a: %d history records, want 1", len(got.History))
	}
	if got := get(t, s, b.ID); got.State != job.StateRunning {
		t.Fatalf("b: state %s after a stale finish, want still running", got.State)
	}
	got = get(t, s, c.ID)
	if got.State != job.StateRetryScheduled || !got.EligibleAt.Equal(T0.Add(time.Second)) || got.Attempts.Transient != 1 {
		t.Fatalf("c: %s eligible %v attempts %+v; want retry_scheduled at T0+1s with one transient attempt", got.State, got.EligibleAt, got.Attempts)
	}
	if n := len(lease(t, s, T0.Add(2*time.Second), 3)); n != 1 {
		t.Fatalf("leased %d after the retry's time, want c again", n)
	}
}

// testFinishLeaseCallOneLost finishes, in one Finish, every job of one
// lease call as the same success (one time, one attempt: the engine's
// finish of a batch), after one of them was cancelled: that one answers
// ErrConflict and stays as the cancel left it, the others end with one
// record each; a second Finish of them all answers ErrConflict for each.
// A driver that ends such a run in one statement (SQLite's endRuns) must
// still tell which job's guard failed.
func testFinishLeaseCallOneLost(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	insert(t, s, NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneBatch, "k"),
		NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneBatch, "k"))
	js := lease(t, s, T0, 4)
	if len(js) != 4 {
		t.Fatalf("leased %d of 4", len(js))
	}
	lost := js[2]
	if _, err := s.Cancel(ctx, lost.ID, T0); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	at := T0.Add(time.Second)
	ts := make([]store.Transition, len(js))
	for i, j := range js {
		ts[i] = success(j, at)
	}
	errs := finish(t, s, ts...)
	for i, j := range js {
		if j.ID == lost.ID {
			if !errors.Is(errs[i], store.ErrConflict) {
				t.Fatalf("the cancelled job's finish = %v, want ErrConflict", errs[i])
			}
			if got := get(t, s, j.ID); got.State != job.StateTerminal || got.Reason != job.ReasonCancelled || len(got.History) != 1 {
				t.Fatalf("cancelled job: %s/%s with %d records, want terminal/cancelled with 1", got.State, got.Reason, len(got.History))
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("finish %d = %v, want nil", i, errs[i])
		}
		got := get(t, s, j.ID)
		if got.State != job.StatePublished || !got.FinishedAt.Equal(at) || len(got.History) != 1 ||
			!got.History[0].At.Equal(at) || got.History[0].Attempt != j.Attempt || got.History[0].Outcome != job.ClassSuccess {
			t.Fatalf("job %d: %s finished %v history %+v; want published at %v with its one success", i, got.State, got.FinishedAt, got.History, at)
		}
	}
	for i, e := range finish(t, s, ts...) {
		if !errors.Is(e, store.ErrConflict) {
			t.Fatalf("second finish %d = %v, want ErrConflict", i, e)
		}
	}
}

// testSuccessHistory: whatever a driver stores for a success, Get answers
// with the attempt records the finishes were given — a first-attempt
// success straight to published, alone or with others of its lease call,
// included (the SQLite driver leaves that record implied by the row) —
// and a later cancel or redrive of the published job neither changes nor
// loses them.
func testSuccessHistory(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	insert(t, s, newJobs(6, "acme", job.LaneBatch, "k")...)
	js := lease(t, s, T0, 6)
	if len(js) != 6 {
		t.Fatalf("leased %d of 6", len(js))
	}
	at := T0.Add(time.Second)
	// js[4]: its lease expires and it is leased again, so its success is
	// its second attempt. js[5]: ends later, alone.
	mustOK(t, finish(t, s, Recovery(js[4], T0.Add(time.Minute))))
	withStatus := success(js[2], at)
	withStatus.Record.Status = 200
	otherTime := success(js[3], at)
	otherTime.Record.At = at.Add(-time.Millisecond)
	mustOK(t, finish(t, s, success(js[0], at), success(js[1], at), withStatus, otherTime))
	again := lease(t, s, T0.Add(time.Minute), 1)
	if len(again) != 1 || again[0].ID != js[4].ID || again[0].Attempt != 2 {
		t.Fatalf("leased again %+v, want %s at attempt 2", again, js[4].ID)
	}
	mustOK(t, finish(t, s, success(again[0], at.Add(time.Minute)), success(js[5], at.Add(time.Minute))))
	want := map[string][]job.AttemptRecord{
		js[0].ID: {{At: at, Attempt: 1, Outcome: job.ClassSuccess}},
		js[1].ID: {{At: at, Attempt: 1, Outcome: job.ClassSuccess}},
		js[2].ID: {{At: at, Attempt: 1, Outcome: job.ClassSuccess, Status: 200}},
		js[3].ID: {{At: at.Add(-time.Millisecond), Attempt: 1, Outcome: job.ClassSuccess}},
		js[4].ID: {Recovery(js[4], T0.Add(time.Minute)).Record, {At: at.Add(time.Minute), Attempt: 2, Outcome: job.ClassSuccess}},
		js[5].ID: {{At: at.Add(time.Minute), Attempt: 1, Outcome: job.ClassSuccess}},
	}
	check := func(when string) {
		t.Helper()
		for id, w := range want {
			got := get(t, s, id)
			if got.State != job.StatePublished || !sameRecords(got.History, w) {
				t.Fatalf("%s: job %s %s with history %+v, want published with %+v", when, id, got.State, got.History, w)
			}
		}
	}
	check("finished")
	for _, j := range js {
		if _, err := s.Cancel(ctx, j.ID, at.Add(time.Hour)); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("cancel of published %s = %v, want ErrConflict", j.ID, err)
		}
		if _, err := s.Redrive(ctx, j.ID, at.Add(time.Hour)); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("redrive of published %s = %v, want ErrConflict", j.ID, err)
		}
	}
	check("after a cancel and a redrive refused")
}

// sameRecords reports whether two histories hold the same records, times
// compared as instants.
func sameRecords(a, b []job.AttemptRecord) bool {
	return slices.EqualFunc(a, b, func(x, y job.AttemptRecord) bool {
		x.At, y.At, x.FirstAt, y.FirstAt = x.At.UTC(), y.At.UTC(), x.FirstAt.UTC(), y.FirstAt.UTC()
		return x == y
	})
}

func testPublishOnce(t *testing.T, open Opener) {
	s := open(t)
	insert(t, s, NewJob("acme", job.LaneBatch, "k"))
	j := lease(t, s, T0, 1)[0]
	tr := success(j, T0)
	tr.To, tr.Result = job.StateValidated, []byte(`{"findings":[]}`)
	mustOK(t, finish(t, s, tr))
	if wins := contend(t, "publish", 10, func(int) error { return s.Publish(context.Background(), j.ID, T0) }); wins != 1 {
		t.Fatalf("%d publishes succeeded, want exactly 1", wins)
	}
	if got := get(t, s, j.ID); got.State != job.StatePublished || string(got.Result) != `{"findings":[]}` {
		t.Fatalf("published job = %+v", got)
	}
}

// testPublishClaim checks the publication claim behind invariant 2 among
// live publishers: of concurrent claimants exactly one holds a validated
// job's publication until its claim runs out or is released, its holder
// may extend it, and a published (or not yet validated) job cannot be
// claimed.
func testPublishClaim(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	insert(t, s, NewJob("acme", job.LaneBatch, "k"))
	j := lease(t, s, T0, 1)[0]
	tr := success(j, T0)
	tr.To, tr.Result = job.StateValidated, []byte(`{"ok":true}`)
	mustOK(t, finish(t, s, tr))
	other := NewJob("acme", job.LaneBatch, "k")
	insert(t, s, other)

	until := T0.Add(10 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var winners []string
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			token := fmt.Sprintf("node-%d", i)
			err := s.ClaimPublish(ctx, j.ID, token, T0, until)
			if err == nil {
				mu.Lock()
				winners = append(winners, token)
				mu.Unlock()
			} else if !errors.Is(err, store.ErrConflict) {
				t.Errorf("claim: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d concurrent claims succeeded (%v), want exactly 1", len(winners), winners)
	}
	holder := winners[0]
	if err := s.ClaimPublish(ctx, j.ID, holder, T0.Add(time.Second), until.Add(time.Second)); err != nil {
		t.Fatalf("the holder extending its claim: %v", err)
	}
	if err := s.ClaimPublish(ctx, j.ID, "late", until, until.Add(10*time.Second)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a claim at the old expiry after the holder extended it: %v, want ErrConflict", err)
	}
	// A claim that ran out (its holder crashed) is taken over.
	after := until.Add(time.Second)
	if err := s.ClaimPublish(ctx, j.ID, "successor", after, after.Add(10*time.Second)); err != nil {
		t.Fatalf("taking over a claim that ran out: %v", err)
	}
	// The successor releases it (until = now): anyone may claim at once.
	if err := s.ClaimPublish(ctx, j.ID, "successor", after, after); err != nil {
		t.Fatalf("releasing a claim: %v", err)
	}
	if err := s.ClaimPublish(ctx, j.ID, "third", after, after.Add(time.Second)); err != nil {
		t.Fatalf("claiming a released publication: %v", err)
	}
	if err := s.Publish(ctx, j.ID, after); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimPublish(ctx, j.ID, "third", after, after.Add(time.Second)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("claiming a published job: %v, want ErrConflict", err)
	}
	if got := get(t, s, j.ID); got.State != job.StatePublished || string(got.Result) != `{"ok":true}` {
		t.Fatalf("published job = %+v", got)
	}
	if err := s.ClaimPublish(ctx, other.ID, "x", T0, until); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("claiming a waiting job's publication: %v, want ErrConflict", err)
	}
	if err := s.ClaimPublish(ctx, "01900000-0000-7000-8000-000000000000", "x", T0, until); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claiming an unknown job's publication: %v, want ErrNotFound", err)
	}
}

// testTokenBucketPacing checks invariant 6: over any window t, admitted
// starts never exceed rate*t + burst, and a backlogged key reaches its rate.
func testTokenBucketPacing(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "k", Rate: 10, Burst: 3})
	jobs := newJobs(100, "acme", job.LaneBatch, "k")
	insert(t, s, jobs...)
	var starts []time.Time
	for step := 0; step <= 50; step++ { // 5 s in 100 ms steps
		now := T0.Add(time.Duration(step) * 100 * time.Millisecond)
		for _, j := range lease(t, s, now, 100) {
			starts = append(starts, now)
			mustOK(t, finish(t, s, success(j, now)))
		}
	}
	for i := range starts {
		for k := i; k < len(starts); k++ {
			window := starts[k].Sub(starts[i]).Seconds()
			if n := float64(k - i + 1); n > 10*window+3+1e-9 {
				t.Fatalf("%v starts in %.1fs exceeds rate*t+burst = %.1f", n, window, 10*window+3)
			}
		}
	}
	if want := 10*5 + 3; len(starts) < want-1 {
		t.Fatalf("only %d starts in 5s, want about %d", len(starts), want)
	}
}

// testReconfigureRepaysDebt checks that UpsertLimit rescales a key's bucket
// debt to the new rate on the driver (the key state written back, TAT
// included): a key at 0.1/s that just admitted a start admits the next one
// at once after being raised to 100/s. UpsertLimit reads the wall clock, so
// this case leases at real time.
func testReconfigureRepaysDebt(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "slow", Rate: 0.1, Burst: 1})
	a, b := NewJob("acme", job.LaneBatch, "slow"), NewJob("acme", job.LaneBatch, "slow")
	insert(t, s, a, b)
	if n := len(lease(t, s, T0, 2)); n != 1 {
		t.Fatalf("leased %d at 0.1/s burst 1, want 1", n)
	}
	// The suite's clock, not the wall clock (a day or more away): the debt
	// is measured at T0, where the lease ran up.
	if _, err := s.UpsertLimit(context.Background(), admission.Config{Name: "slow", Rate: 100, Burst: 1}, T0); err != nil {
		t.Fatal(err)
	}
	if n := len(lease(t, s, T0.Add(50*time.Millisecond), 2)); n != 1 {
		t.Fatalf("after raising the rate to 100/s the second job waited out the old 10 s debt (leased %d)", n)
	}
}

// testNextAdmission checks that a lease call reports when the earliest
// group it skipped for a refusing key may be admitted, so an engine can
// sleep exactly that long.
func testNextAdmission(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "slow", Rate: 2, Burst: 1})
	setLimit(t, s, admission.Config{Name: "slower", Rate: 1, Burst: 1})
	insert(t, s, NewJob("acme", job.LaneBatch, "slow"), NewJob("acme", job.LaneBatch, "slow"),
		NewJob("acme", job.LaneBatch, "slower"), NewJob("acme", job.LaneBatch, "slower"))
	call := func(now time.Time) (int, time.Time, int) {
		var at time.Time
		calls := 0
		got, err := s.Lease(context.Background(), store.LeaseParams{Now: now, Max: 10, LeaseFor: 30 * time.Second,
			NextAdmission: func(t time.Time) { at, calls = t, calls+1 }})
		if err != nil {
			t.Fatal(err)
		}
		return len(got), at, calls
	}
	n, at, calls := call(T0)
	if n != 2 || calls != 1 || !at.Equal(T0.Add(500*time.Millisecond)) {
		t.Fatalf("first lease: %d jobs, next admission %v (%d calls); want 2 jobs and T0+500ms once", n, at.Sub(T0), calls)
	}
	// The slower group is known to be blocked until T0+1s and is not
	// examined again (it was reported once, above).
	if n, _, calls := call(T0.Add(600 * time.Millisecond)); n != 1 || calls != 0 {
		t.Fatalf("at T0+600ms: %d jobs, %d calls; want slow's second job and nothing skipped", n, calls)
	}
	if n, _, calls := call(T0.Add(1100 * time.Millisecond)); n != 1 || calls != 0 {
		t.Fatalf("at T0+1.1s: %d jobs, %d calls; want slower's second job and nothing skipped", n, calls)
	}
}

// testMayLease checks store.LeaseProber where a store has it: MayLease
// says false only when a Lease at the same now takes nothing and promotes
// nothing. A job not yet eligible, of another lane or kind, or already
// leased (its group's ready_at then a stale lower bound, until a lease
// reads the group empty) is nothing to lease; a waiting job eligible now
// and a retry come due are.
func testMayLease(t *testing.T, open Opener) {
	s := open(t)
	pr := optional[store.LeaseProber](t, s)
	may := func(now time.Time, lane job.Lane, kinds ...string) bool {
		t.Helper()
		m, err := pr.MayLease(context.Background(), store.LeaseParams{Now: now, Max: 10, Lane: lane, Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if may(T0, "") {
		t.Fatal("an empty store: MayLease true")
	}
	later := NewJob("acme", job.LaneInteractive, "k")
	later.EligibleAt = T0.Add(time.Second)
	insert(t, s, later)
	if may(T0, "") {
		t.Fatal("a job eligible at T0+1s: MayLease true at T0")
	}
	at := T0.Add(time.Second)
	if !may(at, "") || !may(at, job.LaneInteractive) || !may(at, job.LaneInteractive, "noop") {
		t.Fatal("a job eligible now: MayLease false")
	}
	if may(at, job.LaneBatch) || may(at, "", "other") {
		t.Fatal("MayLease true for another lane or another kind")
	}
	js := lease(t, s, at, 10)
	if len(js) != 1 {
		t.Fatalf("leased %d, want 1", len(js))
	}
	if may(at, "") || may(at.Add(time.Minute), "") {
		t.Fatal("the group's one job leased: MayLease true")
	}
	retry := success(js[0], at)
	retry.To, retry.EligibleAt = job.StateRetryScheduled, at.Add(time.Second)
	retry.Record.Outcome = job.ClassTransient
	retry.Attempts.Transient++
	if errs := finish(t, s, retry); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if may(at, "") {
		t.Fatal("a retry due at T0+2s: MayLease true at T0+1s")
	}
	if !may(at.Add(time.Second), "") {
		t.Fatal("a retry due now: MayLease false")
	}
	if n := len(lease(t, s, at.Add(time.Second), 10)); n != 1 {
		t.Fatalf("leased %d when MayLease said true, want the retry", n)
	}
}

func testConcurrencyCap(t *testing.T, open Opener) {
	s := openKeyed(t, open, admission.Config{Name: "k", Concurrency: 3}, 10, job.LaneBatch)
	first := lease(t, s, T0, 10)
	if len(first) != 3 {
		t.Fatalf("leased %d with a cap of 3", len(first))
	}
	if more := lease(t, s, T0.Add(time.Second), 10); len(more) != 0 {
		t.Fatalf("leased %d more beyond the cap", len(more))
	}
	mustOK(t, finish(t, s, success(first[0], T0.Add(time.Second))))
	if more := lease(t, s, T0.Add(2*time.Second), 10); len(more) != 1 {
		t.Fatalf("after one finished, leased %d, want 1", len(more))
	}
}

// testCapOnUnpacedKey checks the in-flight count of a key that was unpaced
// while its jobs were leased: lease and finish keep no count in an unpaced
// key's row (admission.Config.Unpaced), so reading the key derives it from
// the running jobs, and configuring a cap counts them then, so the cap
// holds for the jobs already running and each finish releases one.
func testCapOnUnpacedKey(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	for range 5 {
		insert(t, s, NewJob("acme", job.LaneBatch, "u"))
	}
	first := lease(t, s, T0, 3)
	if len(first) != 3 {
		t.Fatalf("leased %d of 5 on an unpaced key, want 3", len(first))
	}
	if k, _ := s.GetLimit(ctx, "u"); k.InFlight != 3 {
		t.Fatalf("unpaced key: in flight = %d, want 3 (the running jobs)", k.InFlight)
	}
	if all, err := s.ListLimits(ctx); err != nil || len(all) != 1 || all[0].InFlight != 3 {
		t.Fatalf("ListLimits = %+v, %v; want u with 3 in flight", all, err)
	}
	mustOK(t, finish(t, s, success(first[0], T0)))
	if k, _ := s.GetLimit(ctx, "u"); k.InFlight != 2 {
		t.Fatalf("unpaced key after a finish: in flight = %d, want 2", k.InFlight)
	}
	st, err := s.UpsertLimit(ctx, admission.Config{Name: "u", Concurrency: 2}, T0)
	if err != nil {
		t.Fatal(err)
	}
	if st.InFlight != 2 {
		t.Fatalf("capping a key with 2 running jobs: in flight = %d, want 2", st.InFlight)
	}
	if more := lease(t, s, T0.Add(time.Second), 10); len(more) != 0 {
		t.Fatalf("leased %d beyond a cap of 2 already reached by jobs leased while unpaced", len(more))
	}
	mustOK(t, finish(t, s, success(first[1], T0.Add(time.Second))))
	if k, _ := s.GetLimit(ctx, "u"); k.InFlight != 1 {
		t.Fatalf("capped key after a finish: in flight = %d, want 1", k.InFlight)
	}
	if more := lease(t, s, T0.Add(2*time.Second), 10); len(more) != 1 {
		t.Fatalf("after one finished under the cap, leased %d, want 1", len(more))
	}
	// Back to unpaced: the count is derived again, and a pause from a
	// refusal is still recorded and shared.
	if _, err := s.UpsertLimit(ctx, admission.Config{Name: "u"}, T0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if k, _ := s.GetLimit(ctx, "u"); k.InFlight != 2 {
		t.Fatalf("unpaced again: in flight = %d, want 2", k.InFlight)
	}
	tr := success(first[2], T0.Add(2*time.Second))
	tr.To, tr.EligibleAt = job.StateWaiting, T0.Add(2*time.Second)
	tr.Record.Outcome = job.ClassRateLimited
	tr.Keys = store.KeyEffect{Now: T0.Add(2 * time.Second), RateLimited: true, PauseUntil: T0.Add(10 * time.Second)}
	mustOK(t, finish(t, s, tr))
	if k, _ := s.GetLimit(ctx, "u"); !k.PausedUntil.Equal(T0.Add(10*time.Second)) || k.InFlight != 1 {
		t.Fatalf("a refusal on an unpaced key: paused until %v, in flight %d; want %v, 1", k.PausedUntil, k.InFlight, T0.Add(10*time.Second))
	}
	if more := lease(t, s, T0.Add(3*time.Second), 10); len(more) != 0 {
		t.Fatalf("leased %d on a paused unpaced key", len(more))
	}
}

// testAllKeysAdmit checks that a job is leased only when all of its keys
// admit it, and that a blocked key does not block other keys' jobs.
func testAllKeysAdmit(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "tight", Rate: 1, Burst: 1})
	setLimit(t, s, admission.Config{Name: "shared", Rate: 1000, Burst: 1000})
	both1, both2 := NewJob("acme", job.LaneBatch, "shared", "tight"), NewJob("acme", job.LaneBatch, "shared", "tight")
	both2.EligibleAt = T0.Add(time.Millisecond) // behind both1 in its group
	free := NewJob("acme", job.LaneBatch, "shared", "other")
	insert(t, s, both1, both2, free)
	got := ids(lease(t, s, T0.Add(time.Millisecond), 10))
	if len(got) != 2 || !got[both1.ID] || !got[free.ID] {
		t.Fatalf("leased %v, want both1 and free (tight has one token)", got)
	}
	shared, _ := s.GetLimit(context.Background(), "shared")
	if shared.InFlight != 2 {
		t.Fatalf("shared in flight = %d, want 2: a refused job must not spend other keys", shared.InFlight)
	}
	if got := lease(t, s, T0.Add(time.Second+time.Millisecond), 10); len(got) != 1 || got[0].ID != both2.ID {
		t.Fatalf("after a second, leased %v, want both2", ids(got))
	}
}

// testPauseIsShared checks invariant 5: a rate-limited outcome pauses the
// key in the store, so no lease call (any node) admits it before
// paused_until, while other keys keep flowing.
func testPauseIsShared(t *testing.T, open Opener) {
	s := open(t)
	jobs := newJobs(5, "acme", job.LaneInteractive, "hot")
	insert(t, s, jobs...)
	j := lease(t, s, T0, 1)[0]
	pause := T0.Add(2 * time.Second)
	tr := store.Transition{
		ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled, EligibleAt: pause,
		Attempts: job.Attempts{Congestion: 1},
		Record:   job.AttemptRecord{At: T0, Attempt: 1, Outcome: job.ClassRateLimited, Status: 429, Delay: 2 * time.Second, Why: "retry-after"},
		Keys:     store.KeyEffect{Now: T0, RateLimited: true, PauseUntil: pause},
	}
	mustOK(t, finish(t, s, tr))
	insert(t, s, NewJob("acme", job.LaneInteractive, "cold"))
	for _, at := range []time.Duration{0, time.Second, 1999 * time.Millisecond} {
		for _, l := range lease(t, s, T0.Add(at), 10) {
			if l.LimitKeys[0] == "hot" {
				t.Fatalf("job on paused key leased at +%v", at)
			}
		}
	}
	if k, _ := s.GetLimit(context.Background(), "hot"); !k.PausedUntil.Equal(pause) {
		t.Fatalf("paused_until = %v, want %v", k.PausedUntil, pause)
	}
	if got := lease(t, s, pause, 10); len(got) == 0 {
		t.Fatal("nothing leased once the pause ended")
	}
	if h := get(t, s, j.ID).History; len(h) == 0 || h[0].Status != 429 || h[0].Why != "retry-after" {
		t.Fatalf("history = %+v, want the 429 recorded", h)
	}
}

func testRetryScheduled(t *testing.T, open Opener) {
	s := open(t)
	insert(t, s, NewJob("acme", job.LaneBatch, "k"))
	j := lease(t, s, T0, 1)[0]
	tr := store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled, EligibleAt: T0.Add(5 * time.Second),
		Attempts: job.Attempts{Transient: 1}, Record: job.AttemptRecord{At: T0, Attempt: 1, Outcome: job.ClassTransient, Status: 503},
		Keys: store.KeyEffect{Now: T0}}
	mustOK(t, finish(t, s, tr))
	if got := get(t, s, j.ID); got.State != job.StateRetryScheduled || got.Attempts.Transient != 1 || got.LeaseToken != "" {
		t.Fatalf("scheduled job = %+v", got)
	}
	if got := lease(t, s, T0.Add(4*time.Second), 1); len(got) != 0 {
		t.Fatal("leased before its retry time")
	}
	got := lease(t, s, T0.Add(5*time.Second), 1)
	if len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("retry lease = %+v, want attempt 2", got)
	}
}

// testExpiredLease checks invariant 3: an abandoned lease is found once it
// expires, and the lost worker's late outcome is refused.
func testExpiredLease(t *testing.T, open Opener) {
	s := open(t)
	insert(t, s, NewJob("acme", job.LaneBatch, "k"))
	j := lease(t, s, T0, 1)[0]
	if err := s.Heartbeat(context.Background(), j.ID, j.LeaseToken, T0.Add(40*time.Second)); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if exp, _ := s.Expired(context.Background(), T0.Add(35*time.Second), 10); len(exp) != 0 {
		t.Fatal("a heartbeated lease was reported expired")
	}
	exp, err := s.Expired(context.Background(), T0.Add(41*time.Second), 10)
	if err != nil || len(exp) != 1 || exp[0].LeaseToken != j.LeaseToken {
		t.Fatalf("expired = %v, %v", exp, err)
	}
	reap := store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateWaiting, EligibleAt: T0.Add(41 * time.Second),
		Attempts: job.Attempts{Transient: 1}, Record: job.AttemptRecord{At: T0.Add(41 * time.Second), Attempt: 1, Outcome: job.ClassLeaseExpired},
		Keys: store.KeyEffect{Now: T0.Add(41 * time.Second)}}
	mustOK(t, finish(t, s, reap))
	if errs := finish(t, s, success(j, T0.Add(42*time.Second))); !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("late outcome of the lost worker = %v, want ErrConflict", errs[0])
	}
	again := lease(t, s, T0.Add(42*time.Second), 1)
	if len(again) != 1 || again[0].LeaseToken == j.LeaseToken {
		t.Fatalf("recovered job not leased with a new token: %+v", again)
	}
}

func testInteractiveFirst(t *testing.T, open Opener) {
	s := open(t)
	batch := newJobs(50, "acme", job.LaneBatch, "k")
	insert(t, s, batch...)
	inter := NewJob("acme", job.LaneInteractive, "k")
	inter.EligibleAt = T0.Add(time.Second) // newer than every batch job
	insert(t, s, inter)
	got := lease(t, s, T0.Add(time.Second), 1)
	if len(got) != 1 || got[0].ID != inter.ID {
		t.Fatalf("leased %v, want the interactive job first", ids(got))
	}
}

func testBatchMinShare(t *testing.T, open Opener) {
	s := open(t)
	// Only batch work: the batch lane is visited twice in one call (its
	// minimum share, then the rest) and must not take a job twice.
	for range 5 {
		insert(t, s, NewJob("solo", job.LaneBatch, "solo"))
	}
	only, err := s.Lease(context.Background(), store.LeaseParams{Now: T0, Max: 10, LeaseFor: time.Minute, BatchMin: 1, InteractiveBudget: time.Minute})
	if err != nil || len(only) != 5 || len(ids(only)) != 5 {
		t.Fatalf("batch-only lease = %d jobs (%v), want the 5 distinct batch jobs", len(only), err)
	}
	for range 20 {
		insert(t, s, NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneInteractive, "k"))
	}
	p := store.LeaseParams{Now: T0.Add(time.Second), Max: 10, LeaseFor: time.Minute, BatchMin: 1, InteractiveBudget: 30 * time.Second}
	got, err := s.Lease(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if n := countLane(got, job.LaneBatch); n != 1 {
		t.Fatalf("batch got %d of 10 slots, want its minimum share of 1", n)
	}
	// Once interactive work is over its budget, batch yields entirely.
	p.Now = T0.Add(time.Minute)
	got, err = s.Lease(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if n := countLane(got, job.LaneBatch); n != 0 || len(got) != 10 {
		t.Fatalf("over budget: batch got %d of %d, want 0 of 10", n, len(got))
	}
	// Over budget with one interactive job left: batch fills the rest of
	// the call (a second look at the batch lane, with another limit than
	// a first look would have had).
	got, err = s.Lease(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if n := countLane(got, job.LaneBatch); n != 9 || len(got) != 10 || len(ids(got)) != 10 {
		t.Fatalf("over budget, 1 interactive job left: batch got %d of %d, want 9 of 10 distinct", n, len(got))
	}
}

// testBatchMax: a lease's BatchMax bounds the batch-lane jobs it takes
// (an engine's free batch turns) without touching the interactive lane or
// batch's minimum share within the bound; negative takes none; zero, no
// bound.
func testBatchMax(t *testing.T, open Opener) {
	s := open(t)
	for range 10 {
		insert(t, s, NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneInteractive, "k"))
	}
	p := store.LeaseParams{Now: T0, Max: 6, LeaseFor: time.Minute, BatchMin: 3, BatchMax: 2, InteractiveBudget: time.Minute}
	got, err := s.Lease(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if b, i := countLane(got, job.LaneBatch), countLane(got, job.LaneInteractive); b != 2 || i != 4 {
		t.Fatalf("BatchMax 2, BatchMin 3: leased %d batch and %d interactive, want 2 and 4", b, i)
	}
	p.BatchMax = -1
	if got, err = s.Lease(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if b, i := countLane(got, job.LaneBatch), countLane(got, job.LaneInteractive); b != 0 || i != 6 {
		t.Fatalf("BatchMax -1: leased %d batch and %d interactive, want 0 and 6", b, i)
	}
	// Interactive drained: a bound still holds with nothing else to take,
	// through the batch lane's second look.
	p.BatchMin, p.BatchMax = 0, 3
	if got, err = s.Lease(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if b := countLane(got, job.LaneBatch); b != 3 || len(got) != 3 {
		t.Fatalf("BatchMax 3, no interactive left: leased %d (%d batch), want 3 batch", len(got), b)
	}
	p.BatchMax = 0
	if got, err = s.Lease(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if b := countLane(got, job.LaneBatch); b != 5 || len(ids(got)) != 5 {
		t.Fatalf("BatchMax 0: leased %d batch, want the 5 left", b)
	}
}

// testBatchMaxKinds: with BatchMaxKinds, BatchMax bounds only the
// batch-lane jobs of those kinds (an engine's computing kinds); the other
// batch kinds (a webhook delivery, which waits) are leased up to Max, also
// when the bound is reached, and ready groups of the counted kinds listed
// first in the round do not hide them (more of them than one look at the
// lane's groups reads).
func testBatchMaxKinds(t *testing.T, open Opener) {
	s := open(t)
	const computing, waiting = "compute", "wait"
	var js []*job.Job
	for i := range 40 { // 40 groups, made first: first in the round
		j := NewJob("acme", job.LaneBatch, fmt.Sprintf("c%d", i))
		j.Kind = computing
		js = append(js, j)
	}
	insert(t, s, js...)
	for range 10 {
		j := NewJob("acme", job.LaneBatch, "w")
		j.Kind = waiting
		insert(t, s, j)
	}
	kinds := func(jobs []*job.Job) (c, w int) {
		for _, j := range jobs {
			switch {
			case j.Lane != job.LaneBatch:
			case j.Kind == computing:
				c++
			case j.Kind == waiting:
				w++
			}
		}
		return c, w
	}
	p := store.LeaseParams{Now: T0, Max: 4, LeaseFor: time.Minute, Kinds: []string{computing, waiting},
		BatchMax: -1, BatchMaxKinds: []string{computing}, InteractiveBudget: time.Minute}
	got, err := s.Lease(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if c, w := kinds(got); c != 0 || w != 4 {
		t.Fatalf("BatchMax -1 counting %q: leased %d %s and %d %s, want 0 and 4", computing, c, computing, w, waiting)
	}
	p.BatchMax, p.BatchMin = 1, 2
	if got, err = s.Lease(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if c, w := kinds(got); c != 1 || w != 3 {
		t.Fatalf("BatchMax 1 counting %q: leased %d %s and %d %s, want 1 and 3", computing, c, computing, w, waiting)
	}
	// Only counted kinds asked for: the bound holds as without BatchMaxKinds.
	p.Kinds, p.BatchMax, p.BatchMin = []string{computing}, 2, 0
	if got, err = s.Lease(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if c, w := kinds(got); c != 2 || w != 0 {
		t.Fatalf("BatchMax 2, only %q asked for: leased %d and %d %s, want 2 and 0", computing, c, w, waiting)
	}
	// Every kind (Kinds empty): the counted kinds' groups are passed over.
	p.Kinds, p.BatchMax = nil, -1
	if got, err = s.Lease(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if c, _ := kinds(got); c != 0 {
		t.Fatalf("BatchMax -1, every kind: leased %d %s, want none", c, computing)
	}
}

func countLane(jobs []*job.Job, lane job.Lane) int {
	n := 0
	for _, j := range jobs {
		if j.Lane == lane {
			n++
		}
	}
	return n
}

// testTenantFairness: one tenant's large backlog must not delay another
// tenant's single job by more than one scheduling round.
func testTenantFairness(t *testing.T, open Opener) {
	s := open(t)
	big := newJobs(500, "big", job.LaneBatch, "k")
	insert(t, s, big...)
	small := NewJob("small", job.LaneBatch, "k")
	small.EligibleAt = T0.Add(time.Second)
	insert(t, s, small)
	got := lease(t, s, T0.Add(time.Second), 2)
	if !ids(got)[small.ID] {
		t.Fatalf("the small tenant's job waited behind the big tenant's backlog: leased %v", ids(got))
	}
}

// testFairnessOnPacedKey checks the round when a key admits one start per
// call: tenants sharing the key take turns, whoever was served first.
func testFairnessOnPacedKey(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "shared", Rate: 10, Burst: 1})
	tenants := []string{"heavy", "a", "b", "c"}
	var jobs []*job.Job
	for _, tn := range tenants {
		n := 5
		if tn == "heavy" {
			n = 100
		}
		for range n {
			jobs = append(jobs, NewJob(tn, job.LaneBatch, "shared"))
		}
	}
	insert(t, s, jobs...)
	served := map[string]int{}
	for step := range 8 { // one token every 100 ms
		got := lease(t, s, T0.Add(time.Duration(step)*100*time.Millisecond), 10)
		if len(got) != 1 {
			t.Fatalf("step %d: leased %d, want the one start the key admits", step, len(got))
		}
		served[got[0].Tenant]++
	}
	for _, tn := range tenants {
		if served[tn] != 2 {
			t.Fatalf("starts per tenant over 8 tokens = %v, want 2 each", served)
		}
	}
}

func testKindsFilter(t *testing.T, open Opener) {
	s := open(t)
	a := NewJob("acme", job.LaneBatch, "k")
	b := NewJob("acme", job.LaneBatch, "k")
	b.Kind = "webhook"
	insert(t, s, a, b)
	got, err := s.Lease(context.Background(), store.LeaseParams{Now: T0, Max: 10, LeaseFor: time.Minute, Kinds: []string{"webhook"}})
	if err != nil || len(got) != 1 || got[0].ID != b.ID {
		t.Fatalf("kinds filter leased %v (%v), want only the webhook job", ids(got), err)
	}
	other := NewJob("globex", job.LaneBatch, "k")
	insert(t, s, other)
	got, err = s.Lease(context.Background(), store.LeaseParams{Now: T0, Max: 10, LeaseFor: time.Minute, Tenant: "globex"})
	if err != nil || len(got) != 1 || got[0].ID != other.ID {
		t.Fatalf("tenant filter leased %v (%v), want only globex's job", ids(got), err)
	}
}

func testCancelRedriveDelete(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	waiting, running := NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneBatch, "k")
	insert(t, s, running)
	r := lease(t, s, T0, 1)[0]
	insert(t, s, waiting)
	for _, id := range []string{waiting.ID, r.ID} {
		c, err := s.Cancel(ctx, id, T0)
		if err != nil || c.State != job.StateTerminal || c.Reason != job.ReasonCancelled {
			t.Fatalf("cancel %s = %+v, %v", id, c, err)
		}
	}
	if k, _ := s.GetLimit(ctx, "k"); k.InFlight != 0 {
		t.Fatalf("cancelling a running job left in_flight = %d", k.InFlight)
	}
	if errs := finish(t, s, success(r, T0)); !errors.Is(errs[0], store.ErrConflict) {
		t.Fatal("a cancelled job accepted its worker's outcome")
	}
	if _, err := s.Cancel(ctx, waiting.ID, T0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("cancel of a final job = %v, want ErrConflict", err)
	}
	red, err := s.Redrive(ctx, waiting.ID, T0.Add(time.Second))
	if err != nil || red.State != job.StateWaiting || red.Reason != "" || !red.FinishedAt.IsZero() {
		t.Fatalf("redrive = %+v, %v", red, err)
	}
	// Every driver records a redrive alike: the job's attempt and the
	// reason it had ended with (store.RedriveRecord).
	want := store.RedriveRecord(T0.Add(time.Second), red.Attempt, job.ReasonCancelled)
	if h := get(t, s, waiting.ID).History; len(h) < 2 || h[len(h)-1].Outcome != want.Outcome ||
		h[len(h)-1].Attempt != want.Attempt || h[len(h)-1].Why != want.Why || !h[len(h)-1].At.Equal(want.At) {
		t.Fatalf("redrive recorded as %+v, want last %+v", h, want)
	}
	if got := lease(t, s, T0.Add(time.Second), 10); !ids(got)[waiting.ID] {
		t.Fatal("redriven job was not leased")
	}
	if err := s.Delete(ctx, waiting.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete of a running job = %v, want ErrConflict", err)
	}
	if err := s.Delete(ctx, r.ID); err != nil {
		t.Fatalf("delete dead letter: %v", err)
	}
	if _, err := s.Get(ctx, r.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted job still there: %v", err)
	}
}

func testDeadlines(t *testing.T, open Opener) {
	s := open(t)
	j := NewJob("acme", job.LaneBatch, "k")
	j.Deadline = T0.Add(time.Minute)
	j.EligibleAt = T0.Add(2 * time.Minute)
	insert(t, s, j)
	n, err := s.ExpireDeadlines(context.Background(), T0.Add(61*time.Second))
	if err != nil || n != 1 {
		t.Fatalf("expire deadlines = %d, %v", n, err)
	}
	if got := get(t, s, j.ID); got.State != job.StateTerminal || got.Reason != job.ReasonDeadlineExceeded {
		t.Fatalf("job past its deadline = %s/%s", got.State, got.Reason)
	}
}

func testPrune(t *testing.T, open Opener) {
	s := open(t)
	old, fresh := NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneBatch, "k")
	insert(t, s, old)
	j := lease(t, s, T0, 1)[0]
	mustOK(t, finish(t, s, success(j, T0)))
	insert(t, s, fresh)
	n, err := s.Prune(context.Background(), T0.Add(time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want 1", n, err)
	}
	if _, err := s.Get(context.Background(), old.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("pruned job still there")
	}
	get(t, s, fresh.ID) // a waiting job is never pruned
}

// testPrunedGroupTakesJobs: a group whose every job was pruned still
// takes new jobs, and a lease finds them. Nothing deletes a group today;
// a cleanup that did, or an insert that remembered a group's id across
// calls, would have to keep this true (on PostgreSQL no foreign key
// checks jobs.group_id since migration 0033).
func testPrunedGroupTakesJobs(t *testing.T, open Opener) {
	s := open(t)
	first := NewJob("acme", job.LaneBatch, "k")
	insert(t, s, first)
	j := lease(t, s, T0, 1)[0]
	mustOK(t, finish(t, s, success(j, T0)))
	if n, err := s.Prune(context.Background(), T0.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want 1", n, err)
	}
	second := NewJob("acme", job.LaneBatch, "k") // the same group
	insert(t, s, second)
	got := lease(t, s, T0, 2)
	if len(got) != 1 || got[0].ID != second.ID {
		t.Fatalf("lease after the group's jobs were pruned = %v; want %s", got, second.ID)
	}
}

func testLimits(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	setLimit(t, s, admission.Config{Name: "b", Rate: 5, Burst: 2, Concurrency: 4, Adaptive: true})
	setLimit(t, s, admission.Config{Name: "a", Rate: 1})
	got, err := s.GetLimit(ctx, "b")
	if err != nil || got.Rate != 5 || got.Burst != 2 || got.Concurrency != 4 || !got.Adaptive || got.LearnedRate != 5 {
		t.Fatalf("get limit = %+v, %v", got, err)
	}
	all, err := s.ListLimits(ctx)
	if err != nil || len(all) != 2 || all[0].Name != "a" {
		t.Fatalf("list limits = %+v, %v", all, err)
	}
	if _, err := s.GetLimit(ctx, "zzz"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
}

// testLimitConfigs: LimitConfigs returns the configuration GetLimit
// reads, of every named key that exists, in one call; an unknown name is
// absent; and CheckCosts, which reads through it, checks a key not created
// yet against the default it is given.
func testLimitConfigs(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	cfgs := []admission.Config{
		{Name: "paced", Rate: 5, Burst: 2, Concurrency: 4, Adaptive: true, MinRate: 1},
		{Name: "window", Windows: []admission.Window{{Limit: 10, Period: time.Minute}, {Limit: 3, Period: time.Second, Fixed: true}}},
		{Name: "rpm", Rate: 1, Burst: 1, PerStart: true},
	}
	for _, c := range cfgs {
		setLimit(t, s, c)
	}
	insert(t, s, NewJob("acme", job.LaneInteractive, "unpaced"))
	if got := lease(t, s, T0, 1); len(got) != 1 {
		t.Fatalf("leased %d, want 1", len(got))
	}
	got, err := s.LimitConfigs(ctx, []string{"paced", "window", "rpm", "unpaced", "paced", "nokey"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("LimitConfigs = %+v, want the 4 keys that exist", got)
	}
	if _, ok := got["nokey"]; ok {
		t.Fatal("LimitConfigs returned a key that does not exist")
	}
	for _, name := range []string{"paced", "window", "rpm", "unpaced"} {
		k, err := s.GetLimit(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[name], k.Config) {
			t.Fatalf("LimitConfigs[%s] = %+v, GetLimit's configuration %+v", name, got[name], k.Config)
		}
	}
	if none, err := s.LimitConfigs(ctx, []string{"nokey"}); err != nil || len(none) != 0 {
		t.Fatalf("LimitConfigs of an unknown key = %+v, %v", none, err)
	}

	over := NewJob("acme", job.LaneInteractive, "unpaced", "window")
	over.Cost = 4 // above the fixed window's 3
	var ve *job.ValidationError
	if err := store.CheckCosts(ctx, s, []*job.Job{NewJob("acme", job.LaneInteractive, "paced"), over}, admission.Config{}); !errors.As(err, &ve) {
		t.Fatalf("CheckCosts of cost 4 on a window of 3 = %v, want a validation error", err)
	}
	fresh := NewJob("acme", job.LaneInteractive, "fresh")
	fresh.Cost = 3
	if err := store.CheckCosts(ctx, s, []*job.Job{fresh}, admission.Config{Rate: 1, Burst: 2}); !errors.As(err, &ve) {
		t.Fatalf("CheckCosts of cost 3 on a key to be created with burst 2 = %v, want a validation error", err)
	}
	if err := store.CheckCosts(ctx, s, []*job.Job{fresh}, admission.Config{}); err != nil {
		t.Fatalf("CheckCosts of cost 3 on a key to be created unpaced = %v", err)
	}
}

func testStatsAndBacklog(t *testing.T, open Opener) {
	s := open(t)
	// Every lane is in Counts, empty while it has no jobs, on every
	// driver (SQLite's used to leave an empty lane out).
	empty, err := s.Stats(context.Background(), T0)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range job.Lanes {
		if c, ok := empty.Counts[l]; !ok || len(c) != 0 {
			t.Fatalf("Stats of an empty store: lane %s counts %v (present %v), want present and empty", l, c, ok)
		}
	}
	for range 3 {
		insert(t, s, NewJob("acme", job.LaneInteractive, "k"))
	}
	b := NewJob("acme", job.LaneBatch, "k", "other")
	b.Cost = 7
	insert(t, s, b)
	lease(t, s, T0, 1)
	st, err := s.Stats(context.Background(), T0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[job.LaneInteractive][job.StateWaiting] != 2 || st.Running != 1 || st.Counts[job.LaneBatch][job.StateWaiting] != 1 {
		t.Fatalf("stats counts = %+v", st)
	}
	if st.OldestReady[job.LaneInteractive] != 10*time.Second {
		t.Fatalf("oldest ready = %v, want 10s", st.OldestReady[job.LaneInteractive])
	}
	// OldestReady alone agrees with Stats, and a lane whose jobs are not
	// eligible yet (now before T0) is absent.
	for _, now := range []time.Time{T0.Add(10 * time.Second), T0.Add(-time.Second)} {
		st, err := s.Stats(context.Background(), now)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.OldestReady(context.Background(), now)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(st.OldestReady) {
			t.Fatalf("OldestReady at %v = %v, %v; Stats says %v", now, got, err, st.OldestReady)
		}
	}
	if got, _ := s.OldestReady(context.Background(), T0.Add(-time.Second)); len(got) != 0 {
		t.Fatalf("OldestReady before any job is eligible = %v, want none", got)
	}
	bl, err := s.Backlog(context.Background(), job.LaneInteractive, []string{"k", "other"})
	if err != nil || bl["k"] != 2 || bl["other"] != 0 {
		t.Fatalf("interactive backlog = %v, %v", bl, err)
	}
	bl, err = s.Backlog(context.Background(), job.LaneBatch, []string{"k", "other"})
	if err != nil || bl["k"] != 9 || bl["other"] != 7 {
		t.Fatalf("batch backlog = %v, %v", bl, err)
	}
}

func testList(t *testing.T, open Opener) {
	s := open(t)
	var all []*job.Job
	for i := range 5 {
		j := NewJob(fmt.Sprintf("t%d", i%2), job.LaneBatch, "k")
		all = append(all, j)
		insert(t, s, j)
	}
	page, err := s.List(context.Background(), store.ListParams{Tenant: "t0", Limit: 2})
	if err != nil || len(page) != 2 || page[0].ID != all[4].ID || page[1].ID != all[2].ID {
		t.Fatalf("first page = %v, %v", ids(page), err)
	}
	next, err := s.List(context.Background(), store.ListParams{Tenant: "t0", Limit: 2, After: page[1].ID})
	if err != nil || len(next) != 1 || next[0].ID != all[0].ID {
		t.Fatalf("second page = %v, %v", ids(next), err)
	}
	testListLimitKey(t, s)
}

// testListLimitKey lists by one of a job's limit keys, whichever position
// it has among them, and never matches a key's prefix.
func testListLimitKey(t *testing.T, s store.Store) {
	a := NewJob("t0", job.LaneBatch, "subscriber:a", "tenant:x")
	b := NewJob("t0", job.LaneBatch, "tenant:x", "subscriber:b")
	ab := NewJob("t0", job.LaneBatch, "subscriber:ab")
	insert(t, s, a, b, ab)
	for key, want := range map[string][]string{
		"subscriber:a": {a.ID}, "subscriber:b": {b.ID}, "tenant:x": {b.ID, a.ID}, "subscriber:": nil,
	} {
		if got := listIDs(t, s, store.ListParams{LimitKey: key}); !slices.Equal(got, want) {
			t.Errorf("list by limit key %q = %v, want %v (newest first)", key, got, want)
		}
	}
}

func testAdaptiveKey(t *testing.T, open Opener) {
	s := openKeyed(t, open, admission.Config{Name: "ad", Rate: 100, Burst: 1, Adaptive: true}, 3, job.LaneBatch)
	j := lease(t, s, T0, 1)[0]
	mustOK(t, finish(t, s, store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled,
		EligibleAt: T0.Add(time.Second), Attempts: job.Attempts{Congestion: 1},
		Record: job.AttemptRecord{At: T0, Attempt: 1, Outcome: job.ClassRateLimited, Status: 429},
		Keys:   store.KeyEffect{Now: T0, RateLimited: true, PauseUntil: T0.Add(time.Second)}}))
	k, _ := s.GetLimit(context.Background(), "ad")
	if k.LearnedRate >= 100 || k.LearnedRate <= 0 {
		t.Fatalf("learned rate after a 429 = %v, want below the ceiling", k.LearnedRate)
	}
	j = lease(t, s, T0.Add(2*time.Second), 1)[0]
	mustOK(t, finish(t, s, success(j, T0.Add(2*time.Second))))
	k2, _ := s.GetLimit(context.Background(), "ad")
	if k2.LearnedRate <= k.LearnedRate {
		t.Fatalf("learned rate after a success = %v, want above %v", k2.LearnedRate, k.LearnedRate)
	}
}

// A refusal met while another lease of an adaptive key was in flight, at
// the key's rate and after its first refusal, teaches the key an in-flight cap (admission's
// concurrency discovery): the store keeps it across transactions, leases
// no more than it allows, and leaves the rate alone.
func testLearnedConcurrency(t *testing.T, open Opener) {
	s := openKeyed(t, open, admission.Config{Name: "cc", Rate: 100, Burst: 10, Adaptive: true}, 4, job.LaneBatch)
	refuse := func(j *job.Job, at time.Time) {
		t.Helper()
		mustOK(t, finish(t, s, store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled,
			EligibleAt: at, Attempts: job.Attempts{Congestion: 1},
			Record: job.AttemptRecord{At: at, Attempt: 1, Outcome: job.ClassRateLimited, Status: 429},
			Keys:   store.KeyEffect{Now: at, RateLimited: true, Backoff: true, PauseUntil: at.Add(time.Second)}}))
	}
	// A key's first refusal is its rate's (admission: a first refusal is
	// at a ceiling that may not hold).
	refuse(lease(t, s, T0, 1)[0], T0.Add(10*time.Millisecond))
	k, _ := s.GetLimit(context.Background(), "cc")
	if k.LearnedConcurrency != 0 || k.LearnedRate >= 100 {
		t.Fatalf("after a first 429: learned cap %d, rate %v; want no cap and a cut rate", k.LearnedConcurrency, k.LearnedRate)
	}
	rate := k.LearnedRate
	t1 := T0.Add(2 * time.Second)
	got := lease(t, s, t1, 2)
	if len(got) != 2 {
		t.Fatalf("leased %d, want 2", len(got))
	}
	at := t1.Add(30 * time.Millisecond)
	refuse(got[0], at)
	k, _ = s.GetLimit(context.Background(), "cc")
	if k.LearnedConcurrency != 1 || k.LearnedRate != rate || k.PausedUntil.After(at) {
		t.Fatalf("after a 429 with another lease in flight: learned cap %d, rate %v, paused until %v; want cap 1, rate %v, no pause",
			k.LearnedConcurrency, k.LearnedRate, k.PausedUntil, rate)
	}
	if more := lease(t, s, at.Add(time.Millisecond), 2); len(more) != 0 {
		t.Fatalf("leased %d with 1 in flight of a learned cap of 1, want 0", len(more))
	}
	mustOK(t, finish(t, s, success(got[1], at.Add(10*time.Millisecond))))
	if more := lease(t, s, at.Add(time.Second), 2); len(more) != 1 { // past the CapRetry the refused lease set
		t.Fatalf("leased %d with nothing in flight of a learned cap of 1, want 1", len(more))
	}
}

// A fixed key with a sliding window that its upstream refused paces
// strictly (admission's strict counting): after the pause it leases one
// start at a time, evenly, where before the refusal its bucket's burst
// admitted several at once; the store keeps that across transactions.
func testStrictCounting(t *testing.T, open Opener) {
	s := openKeyed(t, open, admission.UpstreamWindow("sc", 20, time.Second, 20, admission.DefaultHeadroom), 30, job.LaneBatch)
	got := lease(t, s, T0, 30)
	if len(got) != 10 { // half the declared burst of 20
		t.Fatalf("leased %d from a fresh key, want its burst of 10", len(got))
	}
	at := T0.Add(10 * time.Millisecond)
	for _, j := range got[1:] {
		mustOK(t, finish(t, s, success(j, at)))
	}
	j := got[0]
	mustOK(t, finish(t, s, store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled,
		EligibleAt: at.Add(time.Second), Attempts: job.Attempts{Congestion: 1},
		Record: job.AttemptRecord{At: at, Attempt: 1, Outcome: job.ClassRateLimited, Status: 429},
		Keys:   store.KeyEffect{Now: at, RateLimited: true, PauseUntil: at.Add(time.Second)}}))
	// Two seconds on, the declared bucket would be full again (10 at
	// once); strict, the key admits one, then the next a strict
	// interval (1.03 s / 19) later.
	later := T0.Add(3 * time.Second)
	if n := len(lease(t, s, later, 30)); n != 1 {
		t.Fatalf("leased %d at once after a refusal, want 1 (strict pacing: a burst of one)", n)
	}
	if n := len(lease(t, s, later.Add(20*time.Millisecond), 30)); n != 0 {
		t.Fatalf("leased %d 20 ms later, want 0 (strict pacing: 19 per 1.03 s, evenly)", n)
	}
	if n := len(lease(t, s, later.Add(60*time.Millisecond), 30)); n != 1 {
		t.Fatalf("leased %d 60 ms later, want 1", n)
	}
}

func testObjects(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	for _, id := range []string{"b", "a", "c"} {
		if err := s.PutObject(ctx, store.Object{Kind: "subscriber", ID: id, Body: []byte(`{"id":"` + id + `"}`), UpdatedAt: T0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutObject(ctx, store.Object{Kind: "subscriber", ID: "a", Body: []byte(`{"v":2}`), UpdatedAt: T0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutObject(ctx, store.Object{Kind: "diff", ID: "a", Body: []byte("diff"), UpdatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetObject(ctx, "subscriber", "a")
	if err != nil || string(got.Body) != `{"v":2}` || !got.UpdatedAt.Equal(T0.Add(time.Second)) {
		t.Fatalf("get = %+v, %v", got, err)
	}
	page, err := s.ListObjects(ctx, "subscriber", "a", 10)
	if err != nil || len(page) != 2 || page[0].ID != "b" || page[1].ID != "c" {
		t.Fatalf("list after a = %+v, %v", page, err)
	}
	if err := s.DeleteObject(ctx, "subscriber", "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteObject(ctx, "subscriber", "b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	if _, err := s.GetObject(ctx, "subscriber", "b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get deleted = %v", err)
	}
	if _, err := s.GetObject(ctx, "diff", "a"); err != nil {
		t.Fatalf("kinds are separate namespaces: %v", err)
	}
}

// testGetObjects: GetObjects reads the documents of one kind among many
// ids (more than one statement's page, some named twice, some absent, one
// of another kind only) and returns each present one once, as GetObject
// would.
func testGetObjects(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	var os []store.Object
	for i := range 600 {
		os = append(os, store.Object{Kind: "part", ID: fmt.Sprintf("p%03d", i), Body: []byte(fmt.Sprintf("body %d", i)), UpdatedAt: T0.Add(time.Duration(i) * time.Second)})
	}
	if err := s.PutObjects(ctx, os); err != nil {
		t.Fatal(err)
	}
	if err := s.PutObject(ctx, store.Object{Kind: "diff", ID: "d-only", Body: []byte("x"), UpdatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 600; i += 2 {
		ids = append(ids, fmt.Sprintf("p%03d", i))
	}
	ids = append(ids, "p000", "p598", "absent", "d-only") // twice, twice, none, another kind's
	got, err := s.GetObjects(ctx, "part", ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 {
		t.Fatalf("GetObjects returned %d documents, want 300", len(got))
	}
	for i := 0; i < 600; i += 2 {
		id := fmt.Sprintf("p%03d", i)
		o, ok := got[id]
		if !ok || o.Kind != "part" || o.ID != id || string(o.Body) != fmt.Sprintf("body %d", i) || !o.UpdatedAt.Equal(T0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("GetObjects[%s] = %+v, %v", id, o, ok)
		}
	}
	for _, id := range []string{"absent", "d-only", "p001"} {
		if _, ok := got[id]; ok {
			t.Fatalf("GetObjects returned %s, which is not a part among the ids", id)
		}
	}
	if got, err := s.GetObjects(ctx, "part", nil); err != nil || len(got) != 0 {
		t.Fatalf("GetObjects of no ids = %v, %v", got, err)
	}
	if got, err := s.GetObjects(ctx, "part", []string{"p007"}); err != nil || string(got["p007"].Body) != "body 7" {
		t.Fatalf("GetObjects of one id = %v, %v", got, err)
	}
}

func testAdvance(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	parent := NewJob("acme", job.LaneInteractive, "k")
	parent.State = job.StateAccepted
	insert(t, s, parent)
	if got := lease(t, s, T0, 10); len(got) != 0 {
		t.Fatal("an accepted job was leased")
	}
	adv := store.AdvanceParams{ID: parent.ID, From: job.StateAccepted, To: job.StateValidated, Result: []byte(`{"findings":[]}`),
		Record: job.AttemptRecord{At: T0, Outcome: job.ClassSuccess, Why: "parts aggregated"}, Now: T0}
	got, err := s.Advance(ctx, adv)
	if err != nil || got.State != job.StateValidated || string(got.Result) != `{"findings":[]}` {
		t.Fatalf("advance = %+v, %v", got, err)
	}
	if _, err := s.Advance(ctx, adv); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second advance = %v, want ErrConflict", err)
	}
	if _, err := s.Advance(ctx, store.AdvanceParams{ID: parent.ID, From: job.StateRunning, To: job.StatePublished, Now: T0}); err == nil {
		t.Fatal("advance out of running must go through Finish")
	}
	if err := s.Publish(ctx, parent.ID, T0); err != nil {
		t.Fatalf("publish the aggregated parent: %v", err)
	}
	held := NewJob("acme", job.LaneBatch, "k")
	held.State = job.StateAccepted
	insert(t, s, held)
	if _, err := s.Advance(ctx, store.AdvanceParams{ID: held.ID, From: job.StateAccepted, To: job.StateWaiting, Now: T0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := lease(t, s, T0.Add(time.Second), 10); len(got) != 1 || got[0].ID != held.ID {
		t.Fatalf("released job not leased: %v", ids(got))
	}
}

// testPartsParent is what the engine's parts capability (engine/parts.go)
// relies on, on every driver: a parent inserted accepted with its parts in
// one Insert is never leased; List by Parent pages through every child
// and no other job; and of many concurrent advances of the parent out of
// accepted exactly one is written (the others ErrConflict), with one
// history record, so two nodes aggregating one parent advance it once.
func testPartsParent(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	parent := NewJob("acme", job.LaneBatch, "k")
	parent.State = job.StateAccepted
	batch := []*job.Job{parent}
	for range 7 {
		p := NewJob("acme", job.LaneBatch, "k")
		p.ParentID = parent.ID
		batch = append(batch, p)
	}
	insert(t, s, append(batch, NewJob("acme", job.LaneBatch, "k"))...) // and one job that is no part
	seen := map[string]bool{}
	after := ""
	for {
		page, err := s.List(ctx, store.ListParams{Parent: parent.ID, After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			if j.ParentID != parent.ID || seen[j.ID] {
				t.Fatalf("List(Parent) returned %s (parent %q, seen %v)", j.ID, j.ParentID, seen[j.ID])
			}
			seen[j.ID] = true
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	if len(seen) != 7 {
		t.Fatalf("List(Parent) paged through %d children, want 7", len(seen))
	}
	if got := lease(t, s, T0, 100); len(got) != 8 {
		t.Fatalf("leased %d jobs, want the 8 waiting ones (not the accepted parent)", len(got))
	}
	won := contend(t, "advance", 8, func(i int) error {
		_, err := s.Advance(ctx, store.AdvanceParams{ID: parent.ID, From: job.StateAccepted, To: job.StateValidated,
			Result: fmt.Appendf(nil, `{"by":%d}`, i), Now: T0,
			Record: job.AttemptRecord{At: T0, Outcome: job.ClassSuccess, Why: "aggregated 7 parts (0 failed)"}})
		return err
	})
	got, err := s.Get(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	if won != 1 || got.State != job.StateValidated || len(got.History) != 1 {
		t.Fatalf("%d advances won, parent %s with %d history records; want exactly one", won, got.State, len(got.History))
	}
}

// testShapesBoundStarts is invariant 6 from a start log: many lease calls
// on a fake clock, at irregular steps, over a bucket key, a window key, a
// key with two windows and a bucket, a fixed window (guarded) beside a
// sliding one, and jobs naming two keys at once;
// every window of the recorded starts is checked against each key's
// declared shapes, on every driver (the window logs round-trip through the
// store on every call). The keys must also not under-admit.
func testShapesBoundStarts(t *testing.T, open Opener) {
	s := open(t)
	keys := []admission.Config{
		{Name: "bucket", Rate: 20, Burst: 5},
		{Name: "window", Windows: []admission.Window{{Limit: 10, Period: time.Second}}},
		{Name: "multi", Rate: 8, Burst: 4, Windows: []admission.Window{
			{Limit: 6, Period: 500 * time.Millisecond}, {Limit: 25, Period: 4 * time.Second}}},
		{Name: "adaptive", Rate: 15, Burst: 3, Adaptive: true, Windows: []admission.Window{{Limit: 12, Period: time.Second}}},
		{Name: "fixed", Windows: []admission.Window{{Limit: 10, Period: time.Second, Fixed: true, Guard: 30 * time.Millisecond},
			{Limit: 35, Period: 3 * time.Second}}},
	}
	for _, c := range keys {
		setLimit(t, s, c)
	}
	var jobs []*job.Job
	for i := range 150 {
		jobs = append(jobs, NewJob("acme", job.LaneBatch, "bucket"), NewJob("acme", job.LaneBatch, "window"),
			NewJob("acme", job.LaneBatch, "multi"), NewJob("acme", job.LaneBatch, "adaptive"), NewJob("acme", job.LaneBatch, "fixed"))
		if i%3 == 0 {
			two := NewJob("beta", job.LaneBatch, "window", "multi")
			two.Cost = 2
			jobs = append(jobs, two)
		}
	}
	insert(t, s, jobs...)
	type start struct {
		at   time.Time
		cost int64
	}
	starts := map[string][]start{}
	now := T0
	end := T0.Add(12 * time.Second)
	for step := 0; now.Before(end); step++ {
		now = now.Add(time.Duration(1+(step*7919)%37) * time.Millisecond) // 1-37 ms, irregular
		for _, j := range lease(t, s, now, 8) {
			for _, k := range j.LimitKeys {
				starts[k] = append(starts[k], start{now, j.Cost})
			}
			mustOK(t, finish(t, s, success(j, now)))
		}
	}
	for _, c := range keys {
		got := starts[c.Name]
		if len(got) == 0 {
			t.Fatalf("key %s admitted nothing", c.Name)
		}
		c = c.WithDefaults()
		for i := range got {
			var in int64
			for k := i; k < len(got); k++ {
				in += got[k].cost
				span := got[k].at.Sub(got[i].at)
				if c.Rate > 0 && float64(in) > c.Rate*span.Seconds()+c.Burst+1e-9 {
					t.Fatalf("key %s: %d units started in %v, over rate*t+burst = %.2f", c.Name, in, span, c.Rate*span.Seconds()+c.Burst)
				}
				for _, w := range c.Windows {
					if !w.Fixed && span < w.Period && float64(in) > w.Limit {
						t.Fatalf("key %s: %d units started within %v, over the window's %v per %v", c.Name, in, span, w.Limit, w.Period)
					}
				}
			}
		}
	}
	// A fixed window: each aligned window [kW, (k+1)W), widened back by
	// its guard, holds at most the limit (its log round-trips through
	// the driver's windows column and shapes on every call).
	for _, c := range keys {
		for _, w := range c.Windows {
			if !w.Fixed {
				continue
			}
			p := int64(w.Period)
			perWindow := map[int64]int64{}
			for _, st := range starts[c.Name] {
				ts := st.at.UnixNano()
				perWindow[ts/p*p] += st.cost
				if next := (ts + int64(w.Guard)) / p * p; next != ts/p*p {
					perWindow[next] += st.cost // within the guard of the next window
				}
			}
			for ws, in := range perWindow {
				if float64(in) > w.Limit {
					t.Fatalf("key %s: %d units in the aligned window at %v (guard %v), over its %v per %v",
						c.Name, in, time.Unix(0, ws).UTC(), w.Guard, w.Limit, w.Period)
				}
			}
		}
	}
	// Not under-admitting: the window key admits about its 10/s over the
	// 12 s (jobs of cost 2 included), the bucket about its 20/s, the fixed
	// key its 10 per aligned second within 35 per sliding 3 s.
	units := func(k string) (n int64) {
		for _, st := range starts[k] {
			n += st.cost
		}
		return n
	}
	if n := units("fixed"); n < 100 {
		t.Fatalf("fixed key admitted %d units in 12 s at 10 per aligned second and 35 per 3 s, want at least 100", n)
	}
	if got, err := s.GetLimit(context.Background(), "fixed"); err != nil || len(got.Windows) != 2 || !got.Windows[0].Fixed ||
		got.Windows[0].Guard != 30*time.Millisecond || got.Windows[1].Fixed {
		t.Fatalf("fixed key read back as %+v, %v; want its fixed window (guard 30ms) and its sliding one", got.Windows, err)
	}
	if n := units("window"); n < 100 {
		t.Fatalf("window key admitted %d units in 12 s at 10 per second, want at least 100", n)
	}
	if n := units("bucket"); n < 150 {
		t.Fatalf("bucket key admitted %d units in 12 s at 20/s, want at least 150 (all 150 of its jobs)", n)
	}
}

// testPauseToTheNanosecond checks that a pause from a Retry-After of
// 1.234567 s holds the key exactly that long through the driver: nothing
// is leased a microsecond before it ends, and the next job is at its end.
func testPauseToTheNanosecond(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "k", Rate: 1000, Burst: 10})
	a, b := NewJob("acme", job.LaneBatch, "k"), NewJob("acme", job.LaneBatch, "k")
	insert(t, s, a, b)
	got := lease(t, s, T0, 1)
	if len(got) != 1 {
		t.Fatalf("leased %d, want 1", len(got))
	}
	until := T0.Add(1234567 * time.Microsecond)
	tr := store.Transition{ID: got[0].ID, LeaseToken: got[0].LeaseToken, To: job.StateRetryScheduled, EligibleAt: until.Add(time.Hour),
		Attempts: job.Attempts{Congestion: 1}, Record: job.AttemptRecord{At: T0, Outcome: job.ClassRateLimited},
		Keys: store.KeyEffect{Now: T0, RateLimited: true, PauseUntil: until, Estimated: 1}}
	mustOK(t, finish(t, s, tr))
	if n := len(lease(t, s, until.Add(-time.Microsecond), 1)); n != 0 {
		t.Fatalf("leased %d a microsecond before the pause ends", n)
	}
	if n := len(lease(t, s, until, 1)); n != 1 {
		t.Fatalf("leased %d at the end of the pause, want 1", n)
	}
}

// testPerStartKey checks a PerStart key on the driver: the flag is stored
// and read back (and kept by a reconfiguration that still sets it), a job
// costing 5000 on a tokens key starts on a per-start key of burst 1 taking
// one unit from it (the next waits a second), the reported usage is
// reconciled on the tokens key only, and the per-start key's backlog counts
// jobs, not their cost.
func testPerStartKey(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	setLimit(t, s, admission.Config{Name: "rpm", Rate: 1, Burst: 1, PerStart: true})
	setLimit(t, s, admission.Config{Name: "tpm", Rate: 1000, Burst: 20000})
	if k, err := s.GetLimit(ctx, "rpm"); err != nil || !k.PerStart {
		t.Fatalf("rpm read back as %+v, %v: per_start lost", k.Config, err)
	}
	if ls, err := s.ListLimits(ctx); err != nil || len(ls) != 2 || !ls[0].PerStart || ls[1].PerStart {
		t.Fatalf("ListLimits = %+v, %v", ls, err)
	}
	var jobs []*job.Job
	for range 3 {
		j := NewJob("acme", job.LaneInteractive, "rpm", "tpm")
		j.Cost = 5000
		jobs = append(jobs, j)
	}
	if err := store.CheckCosts(ctx, s, jobs, admission.Config{}); err != nil {
		t.Fatalf("CheckCosts refused cost 5000 on a per-start key of burst 1: %v", err)
	}
	insert(t, s, jobs...)
	if bl, err := s.Backlog(ctx, job.LaneInteractive, []string{"rpm", "tpm"}); err != nil || bl["rpm"] != 3 || bl["tpm"] != 15000 {
		t.Fatalf("backlog = %v, %v; want 3 jobs on rpm and 15000 units on tpm", bl, err)
	}
	got := lease(t, s, T0, 10)
	if len(got) != 1 {
		t.Fatalf("leased %d, want 1: the per-start key has one unit", len(got))
	}
	o := success(got[0], T0)
	o.Keys.Estimated, o.Keys.Actual = 5000, 1000
	mustOK(t, finish(t, s, o))
	tpm, _ := s.GetLimit(ctx, "tpm")
	if free := tpm.Tokens(T0); free < 18999 || free > 19001 {
		t.Fatalf("tpm holds %v units after a start of 5000 reconciled to 1000, want 19000", free)
	}
	if got := lease(t, s, T0.Add(500*time.Millisecond), 10); len(got) != 0 {
		t.Fatalf("leased %d half a second later: one start per second on rpm", len(got))
	}
	if got := lease(t, s, T0.Add(time.Second), 10); len(got) != 1 {
		t.Fatalf("leased %d a second later, want 1", len(got))
	}
	setLimit(t, s, admission.Config{Name: "rpm", Rate: 2, Burst: 1, PerStart: true})
	if k, _ := s.GetLimit(ctx, "rpm"); !k.PerStart || k.Rate != 2 {
		t.Fatalf("reconfigured rpm = %+v", k.Config)
	}
	setLimit(t, s, admission.Config{Name: "rpm", Rate: 2, Burst: 1})
	if k, _ := s.GetLimit(ctx, "rpm"); k.PerStart {
		t.Fatal("a reconfiguration without per_start kept it")
	}
}
