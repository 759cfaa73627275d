package storetest

// The cases of a key's pacing state that the store carries between
// transactions: even pacing and announced credit of adaptive keys, paced
// retries (a refusal's and a first fault's), the pacing a finish applies,
// the cap a finish frees, and a window's starts in flight.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// A refusal an adaptive key's rate did not cause (admission's even
// pacing: a start closer to the one before than its learned rate allows,
// nothing else in flight, at its ceiling, early in a run) keeps the key's
// rate and leaves it pacing evenly, a burst of one instead of two; the
// store keeps that across transactions. Cut instead (as before even
// pacing), the key would still admit two starts 20 ms apart.
func testEvenPacing(t *testing.T, open Opener) {
	s := openKeyed(t, open, admission.AdaptiveUpstreamWindow("ev", 20, time.Second, 20, admission.DefaultHeadroom), 30, job.LaneBatch)
	one := func(at time.Time, max int) *job.Job {
		t.Helper()
		got := lease(t, s, at, max)
		if len(got) != 1 {
			t.Fatalf("leased %d at +%v, want 1", len(got), at.Sub(T0))
		}
		return got[0]
	}
	// Paced one at a time, just over the learned rate's spacing (1/19.4 s).
	at := T0
	for range 12 {
		mustOK(t, finish(t, s, success(one(at, 1), at.Add(10*time.Millisecond))))
		at = at.Add(52 * time.Millisecond)
	}
	// After an idle spell the bucket's burst of two admits a pair 20 ms
	// apart; the upstream refuses the second (no Retry-After).
	a := at.Add(100 * time.Millisecond)
	mustOK(t, finish(t, s, success(one(a, 1), a.Add(10*time.Millisecond))))
	before, _ := s.GetLimit(context.Background(), "ev")
	b := a.Add(20 * time.Millisecond)
	j := one(b, 5)
	r := b.Add(30 * time.Millisecond)
	mustOK(t, finish(t, s, store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled,
		EligibleAt: r.Add(time.Hour), Attempts: job.Attempts{Congestion: 1},
		Record: job.AttemptRecord{At: r, Attempt: 1, Outcome: job.ClassRateLimited, Status: 429},
		Keys:   store.KeyEffect{Now: r, RateLimited: true, Backoff: true, PauseUntil: r.Add(time.Second)}}))
	k, _ := s.GetLimit(context.Background(), "ev")
	if k.LearnedRate != before.LearnedRate || k.LearnedRate <= 0 {
		t.Fatalf("learned rate %v after a refused burst, want %v kept", k.LearnedRate, before.LearnedRate)
	}
	// Idle again: now one start, and the next only a unit later.
	later := r.Add(400 * time.Millisecond)
	one(later, 5)
	if n := len(lease(t, s, later.Add(20*time.Millisecond), 5)); n != 0 {
		t.Fatalf("leased %d 20 ms after the last, want 0 (even pacing: a burst of one)", n)
	}
	one(later.Add(55*time.Millisecond), 5)
}

// An adaptive key whose upstream announces its policy and a remaining
// quota (admission's announced credit) spends that remaining at once, up
// to its window, in the next lease: the store applies the finish's hints
// and keeps the credit in the key's row between transactions. Without it
// the key's bucket admits two starts, not the window's rest.
func testAnnouncedCredit(t *testing.T, open Opener) {
	s := openKeyed(t, open, admission.AdaptiveUpstreamWindow("cr", 30, time.Second, 0, admission.DefaultHeadroom), 40, job.LaneBatch)
	got := lease(t, s, T0, 1)
	if len(got) != 1 {
		t.Fatalf("leased %d, want 1", len(got))
	}
	at := T0.Add(20 * time.Millisecond)
	tr := success(got[0], at)
	tr.Keys.Hints = []job.Hint{{Limit: 30, Remaining: 29, Reset: time.Second, Window: time.Second}}
	mustOK(t, finish(t, s, tr))
	if n := len(lease(t, s, at.Add(time.Millisecond), 40)); n != 29 {
		t.Fatalf("leased %d on a remaining of 29 of 30, want 29 (the window's rest)", n)
	}
}

// A 429 without Retry-After on a job whose every key adapts needs no
// backoff (store.PacedRetry): the store writes the retry eligible at the
// refusal, with a record that says so, and the key's new pacing spaces its
// next start, well before the engine's backoff (1 s here) would have. A
// job with a fixed key, or with an adaptive and a fixed one, keeps its
// backoff, and the fixed key pauses for it as before. Every refusal still
// spends one unit of the congestion budget.
func testPacedRetry(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	setLimit(t, s, admission.Config{Name: "pa", Rate: 10, Burst: 1, Adaptive: true})
	setLimit(t, s, admission.Config{Name: "pb", Rate: 10, Burst: 1, Adaptive: true})
	setLimit(t, s, admission.Config{Name: "fx", Rate: 10, Burst: 1})
	setLimit(t, s, admission.Config{Name: "fy", Rate: 10, Burst: 1})
	paced, fixed, mixed := NewJob("acme", job.LaneBatch, "pa"), NewJob("acme", job.LaneBatch, "fx"), NewJob("acme", job.LaneBatch, "pb", "fy")
	insert(t, s, paced, fixed, mixed)
	got := leaseAll(t, s, 3)
	at := T0.Add(10 * time.Millisecond)
	ts := endAll(t, s, got, job.Outcome{Class: job.ClassRateLimited, Status: 429}, at)
	backoff := at.Add(time.Second)
	for i, j := range got {
		want, why := backoff, "backoff"
		if j.ID == paced.ID {
			want, why = at, store.PacedRetryWhy
		}
		if !ts[i].EligibleAt.Equal(want) || ts[i].Record.Why != why {
			t.Errorf("job on %v: finish reported eligible at %v (%s), want %v (%s)", j.LimitKeys,
				ts[i].EligibleAt.Sub(T0), ts[i].Record.Why, want.Sub(T0), why)
		}
		g := get(t, s, j.ID)
		last := g.History[len(g.History)-1]
		if g.State != job.StateRetryScheduled || !g.EligibleAt.Equal(want) || last.Why != why || g.Attempts.Congestion != 1 {
			t.Errorf("job on %v: %s eligible at %v, record %q, congestion %d; want retry_scheduled at %v, %q, 1",
				j.LimitKeys, g.State, g.EligibleAt.Sub(T0), last.Why, g.Attempts.Congestion, want.Sub(T0), why)
		}
	}
	if k, _ := s.GetLimit(ctx, "fx"); !k.PausedUntil.Equal(backoff) {
		t.Errorf("fixed key paused until %v, want the backoff's %v", k.PausedUntil.Sub(T0), backoff.Sub(T0))
	}
	if k, _ := s.GetLimit(ctx, "pa"); k.PausedUntil.After(at) || k.LearnedRate >= 10 {
		t.Errorf("adaptive key: paused until %v, learned %v; want no pause and a cut rate", k.PausedUntil, k.LearnedRate)
	}
	// The adaptive key's new pacing (a start per 1/5 s after halving) is
	// the only wait: its job is leased again 0.3 s on, the others are not.
	again := lease(t, s, at.Add(300*time.Millisecond), 3)
	if len(again) != 1 || again[0].ID != paced.ID {
		t.Fatalf("leased %v 0.3 s after the refusals, want only the job on the adaptive key", ids(again))
	}
	if again := lease(t, s, backoff, 3); len(again) != 2 {
		t.Fatalf("leased %d at the backoff's end, want the other 2", len(again))
	}
}

// A job's first transient failures (a 503 without Retry-After; the first
// engine.PacedFaults of them) on a job whose every key spaces its starts
// need no backoff (store.PacedFault): the store writes the retry eligible
// at the failure, and the key's pace spaces it like any other start. A job
// with a key that spaces nothing (a concurrency cap alone) and a job's
// third failure keep their backoff: a storm of retries, or a run of
// failures, still slows down. Every failure spends one unit of the
// transient budget.
func testPacedFault(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "ra", Rate: 10, Burst: 2})
	setLimit(t, s, admission.Config{Name: "wa", Windows: []admission.Window{{Limit: 5, Period: time.Second}}})
	setLimit(t, s, admission.Config{Name: "ca", Concurrency: 5})
	rate, window, capped := NewJob("acme", job.LaneBatch, "ra"), NewJob("acme", job.LaneBatch, "wa"), NewJob("acme", job.LaneBatch, "ca")
	insert(t, s, rate, window, capped)
	got := leaseAll(t, s, 3)
	at := T0.Add(10 * time.Millisecond)
	fault := job.Outcome{Class: job.ClassTransient, Status: 503}
	ts := endAll(t, s, got, fault, at)
	for i, j := range got {
		want, why, n := at.Add(time.Second), "backoff", 1
		if j.ID == rate.ID || j.ID == window.ID {
			want, why = at, store.PacedRetryWhy
		}
		if !ts[i].EligibleAt.Equal(want) || ts[i].Record.Why != why {
			t.Errorf("job on %v: finish reported eligible at %v (%s), want %v (%s)", j.LimitKeys,
				ts[i].EligibleAt.Sub(T0), ts[i].Record.Why, want.Sub(T0), why)
		}
		checkRetry(t, s, j, want, why, n)
	}
	// The paced retries go again as soon as their keys admit them; the
	// others wait out their backoff. fail leases them 0.2 s later and
	// fails them again: their n-th failure is retried after wait, as why.
	fail := func(n int, wait time.Duration, why string) {
		t.Helper()
		at = at.Add(200 * time.Millisecond)
		got := lease(t, s, at, 3)
		if len(got) != 2 {
			t.Fatalf("leased %v 0.2 s after failure %d, want the two jobs on paced keys", ids(got), n-1)
		}
		endAll(t, s, got, fault, at)
		for _, j := range got {
			checkRetry(t, s, j, at.Add(wait), why, n)
		}
	}
	fail(2, 0, store.PacedRetryWhy)   // the second failure is paced too
	fail(3, 4*time.Second, "backoff") // the third backs off (4 s at u = 0.5)
}

// checkRetry fails t unless j is retry_scheduled eligible at want, its
// last attempt record says why, and it spent n units of its transient
// budget.
func checkRetry(t *testing.T, s store.Store, j *job.Job, want time.Time, why string, n int) {
	t.Helper()
	g := get(t, s, j.ID)
	last := g.History[len(g.History)-1]
	if g.State != job.StateRetryScheduled || !g.EligibleAt.Equal(want) || last.Why != why || g.Attempts.Transient != n {
		t.Errorf("job on %v: %s eligible at %v, record %q, transient %d; want retry_scheduled at %v, %q, %d",
			j.LimitKeys, g.State, g.EligibleAt.Sub(T0), last.Why, g.Attempts.Transient, want.Sub(T0), why, n)
	}
}

// testFinishMixedPacing checks a finish batch whose jobs' keys are unpaced
// and paced, and one whose key became paced after its job was leased. A
// driver may finish jobs whose keys are all unpaced without writing the
// keys, but a paced
// key in the batch, even one paced only since the lease, still has its
// in-flight lease ended by the finish, so its cap frees.
func testFinishMixedPacing(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	setLimit(t, s, admission.Config{Name: "p", Concurrency: 1})
	insert(t, s, NewJob("acme", job.LaneBatch, "u"), NewJob("acme", job.LaneBatch, "u", "p"), NewJob("acme", job.LaneBatch, "u", "p"))
	first := lease(t, s, T0, 10)
	if len(first) != 2 {
		t.Fatalf("leased %d, want 2 (one on u, one of the two on p's cap of 1)", len(first))
	}
	ts := []store.Transition{success(first[0], T0), success(first[1], T0)}
	mustOK(t, finish(t, s, ts...))
	if k, _ := s.GetLimit(ctx, "p"); k.InFlight != 0 {
		t.Fatalf("paced key after a finish with an unpaced one: in flight = %d, want 0", k.InFlight)
	}
	second := lease(t, s, T0.Add(time.Second), 10)
	if len(second) != 1 {
		t.Fatalf("after the finish freed p's cap, leased %d, want 1", len(second))
	}
	mustOK(t, finish(t, s, success(second[0], T0.Add(time.Second))))

	// r is unpaced when its job is leased and capped before it finishes:
	// the cap counts the running job, and the finish must release it.
	insert(t, s, NewJob("acme", job.LaneBatch, "r"), NewJob("acme", job.LaneBatch, "r"))
	third := lease(t, s, T0.Add(2*time.Second), 1)
	if len(third) != 1 {
		t.Fatalf("leased %d on r, want 1", len(third))
	}
	if st, err := s.UpsertLimit(ctx, admission.Config{Name: "r", Concurrency: 1}, T0.Add(2*time.Second)); err != nil || st.InFlight != 1 {
		t.Fatalf("capping r with a running job: in flight %d, %v; want 1", st.InFlight, err)
	}
	mustOK(t, finish(t, s, success(third[0], T0.Add(3*time.Second))))
	if k, _ := s.GetLimit(ctx, "r"); k.InFlight != 0 {
		t.Fatalf("a key paced since the lease, after the finish: in flight = %d, want 0", k.InFlight)
	}
	if more := lease(t, s, T0.Add(4*time.Second), 10); len(more) != 1 {
		t.Fatalf("after the finish freed r's cap, leased %d, want 1", len(more))
	}
	// Unpaced again, a batch of unpaced jobs finishes as before.
	insert(t, s, NewJob("acme", job.LaneBatch, "u"), NewJob("acme", job.LaneBatch, "u"))
	last := lease(t, s, T0.Add(5*time.Second), 10)
	if len(last) != 2 {
		t.Fatalf("leased %d on u, want 2", len(last))
	}
	mustOK(t, finish(t, s, success(last[0], T0.Add(5*time.Second)), success(last[1], T0.Add(5*time.Second))))
	for _, j := range last {
		if got := get(t, s, j.ID); got.State != job.StatePublished {
			t.Fatalf("job on u is %s after its finish, want published", got.State)
		}
	}
}

// testEngineLeaseAdmits leases as an engine does (a batch share and an
// interactive budget: the lease first asks for the interactive lane's
// oldest job, and a driver may fetch the lanes' keys and heads with it)
// across both lanes and several groups of each, on a capped key that
// groups of both lanes share: every key still admits exactly what it
// allows, and a finish frees the cap for the next such lease.
func testEngineLeaseAdmits(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "cap", Concurrency: 2})
	for _, keys := range [][]string{{"cap"}, {"cap"}, {"cap", "x"}, {"cap", "x"}, {"cap", "y"}, {"z"}, {"z"}, {"z", "x"}} {
		insert(t, s, NewJob("acme", job.LaneInteractive, keys...))
	}
	for _, keys := range [][]string{{"cap"}, {"cap"}, {"w"}, {"w"}} {
		insert(t, s, NewJob("acme", job.LaneBatch, keys...))
	}
	engineLease := func(now time.Time) []*job.Job {
		t.Helper()
		got, err := s.Lease(context.Background(), store.LeaseParams{Now: now, Max: 64, LeaseFor: time.Minute, BatchMin: 8,
			InteractiveBudget: 30 * time.Second})
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		return got
	}
	onCap := func(jobs []*job.Job) (n int, one *job.Job) {
		for _, j := range jobs {
			for _, k := range j.LimitKeys {
				if k == "cap" {
					n, one = n+1, j
				}
			}
		}
		return n, one
	}
	first := engineLease(T0)
	if n, _ := onCap(first); n != 2 || len(first) != 7 {
		t.Fatalf("leased %d jobs, %d on the key capped at 2; want 7 (3 on z, 2 on w, 2 on cap), 2", len(first), n)
	}
	if more := engineLease(T0.Add(time.Millisecond)); len(more) != 0 {
		t.Fatalf("leased %d more beyond the cap", len(more))
	}
	_, done := onCap(first)
	mustOK(t, finish(t, s, success(done, T0.Add(2*time.Millisecond))))
	// After CapRetry: the groups the cap refused are blocked until then
	// (the finish unblocks only its own job's group).
	if more := engineLease(T0.Add(admission.CapRetry + time.Second)); len(more) != 1 {
		t.Fatalf("after a finish freed one of the cap's slots, leased %d, want 1", len(more))
	}
}

// testCapFreedByFinish checks the hand-off from one job to the next on a
// key at its concurrency cap. A lease that meets the full key blocks the
// group for admission.CapRetry; the finish that frees the slot unblocks
// it, so a lease right after the finish takes the next job rather than
// waiting out CapRetry (on the unforeseen mix's concurrent-1, a cap of one
// learned, that wait was paid once per request). And a driver that is a
// store.FinishLeaser finishes and leases in one call: the lease sees the
// slot the finish freed, and the cap still holds after it.
func testCapFreedByFinish(t *testing.T, open Opener) {
	s := openKeyed(t, open, admission.Config{Name: "k", Concurrency: 1}, 3, job.LaneInteractive)
	ms := func(n int) time.Time { return T0.Add(time.Duration(n) * time.Millisecond) }
	first := lease(t, s, ms(0), 5)
	if len(first) != 1 {
		t.Fatalf("leased %d with a cap of 1, want 1", len(first))
	}
	if more := lease(t, s, ms(10), 5); len(more) != 0 {
		t.Fatalf("leased %d beyond the cap", len(more))
	}
	// The group is blocked until 10 ms + CapRetry; the finish frees the
	// slot at 11 ms and the next lease, at 12 ms, must see it.
	mustOK(t, finish(t, s, success(first[0], ms(11))))
	second := lease(t, s, ms(12), 5)
	if len(second) != 1 {
		t.Fatalf("a lease 1 ms after the finish that freed the cap leased %d, want 1 (the group stayed blocked for %v)", len(second), admission.CapRetry)
	}
	fl, ok := s.(store.FinishLeaser)
	if !ok {
		return
	}
	if more := lease(t, s, ms(13), 5); len(more) != 0 {
		t.Fatalf("leased %d beyond the cap", len(more))
	}
	errs, third, err := fl.FinishLease(context.Background(), []store.Transition{success(second[0], ms(14))},
		store.LeaseParams{Now: ms(14), Max: 5, LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatalf("finish and lease: %v", err)
	}
	mustOK(t, errs)
	if len(third) != 1 || third[0].State != job.StateRunning {
		t.Fatalf("finish and lease leased %d jobs, want the third (the slot the finish freed)", len(third))
	}
	if got := get(t, s, second[0].ID); got.State != job.StatePublished {
		t.Fatalf("the finished job is %s, want published", got.State)
	}
	if more := lease(t, s, ms(15), 5); len(more) != 0 {
		t.Fatalf("leased %d beyond the cap after finish and lease", len(more))
	}
	if k, err := s.GetLimit(context.Background(), "k"); err != nil || k.InFlight != 1 {
		t.Fatalf("key in flight = %d (%v), want 1", k.InFlight, err)
	}
	// A finish and lease that leases several jobs at once (the SQLite
	// driver once refused it: one lease token per call).
	for range 2 {
		insert(t, s, NewJob("acme", job.LaneInteractive, "free"))
	}
	errs, many, err := fl.FinishLease(context.Background(), []store.Transition{success(third[0], ms(16))},
		store.LeaseParams{Now: ms(16), Max: 5, LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatalf("finish and lease of several jobs: %v", err)
	}
	mustOK(t, errs)
	if len(many) != 2 {
		t.Fatalf("finish and lease leased %d jobs, want the 2 on the free key", len(many))
	}
}

// flightCases are the cases of a window's starts in flight.
var flightCases = map[string]func(*testing.T, Opener){
	"WindowCountsUntilFinish": testWindowCountsUntilFinish,
	"WindowLogsAtAnswer":      testWindowLogsAtAnswer,
}

// testWindowCountsUntilFinish checks, on every driver, that a window
// counts a start from its lease until its finish and logs it at the
// finish (admission.State.End), so that a request that reaches the
// upstream late cannot share an upstream window with one leased a period
// later: a sliding window of 2 per second still full of two running jobs
// 1.5 s after their lease; freed one period after each finish, be it a
// success or a cancel; and a fixed window of 1 per aligned second that
// carries a job running across the second into the next window and
// counts it there when it finishes. The key's flights round-trip through
// the driver between every call.
func testWindowCountsUntilFinish(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	setLimit(t, s, admission.Config{Name: "slide", Windows: []admission.Window{{Limit: 2, Period: time.Second}}})
	setLimit(t, s, admission.Config{Name: "fixed", Windows: []admission.Window{{Limit: 1, Period: time.Second, Fixed: true}}})
	slide := newJobs(4, "acme", job.LaneBatch, "slide")
	insert(t, s, slide...)
	at := msAfterT0
	leaseN := func(ms, want int) []*job.Job { t.Helper(); return leaseExactly(t, s, ms, want) }
	first := leaseN(0, 2)
	leaseN(1500, 0) // both still running: the upstream may not have counted them yet
	mustOK(t, finish(t, s, success(first[0], at(1600))))
	if _, err := s.Cancel(ctx, first[1].ID, at(1700)); err != nil {
		t.Fatal(err)
	}
	leaseN(2500, 0) // logged at +1.6 s and +1.7 s
	leaseN(2600, 1)
	leaseN(2700, 1)
	if k, err := s.GetLimit(ctx, "slide"); err != nil || k.InFlight != 2 {
		t.Fatalf("slide key in flight = %d, %v; want 2", k.InFlight, err)
	}

	long, next := NewJob("acme", job.LaneBatch, "fixed"), NewJob("acme", job.LaneBatch, "fixed")
	long.EligibleAt, next.EligibleAt = at(10_900), at(10_900)
	insert(t, s, long)
	running := leaseN(10_900, 1) // counted in [10 s, 11 s)
	insert(t, s, next)
	leaseN(11_200, 0) // still running: it may arrive in [11 s, 12 s)
	mustOK(t, finish(t, s, success(running[0], at(11_300))))
	leaseN(11_500, 0) // it finished in [11 s, 12 s): counted there
	leaseN(12_000, 1)
}

// testWindowLogsAtAnswer checks, on every driver, that a finish carrying
// the time its answer was in (store.KeyEffect.Answered, the handler's
// return) logs a window's start then, not at the later finish write: the
// upstream counted the request before it answered, so the slot is free
// one period after the answer. An Answered after Now (a clock behind)
// logs at Now, and the outcome's other effects apply at Now.
func testWindowLogsAtAnswer(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	setLimit(t, s, admission.Config{Name: "answer", Windows: []admission.Window{{Limit: 1, Period: time.Second}}})
	js := newJobs(3, "acme", job.LaneBatch, "answer")
	insert(t, s, js...)
	at := msAfterT0
	leaseN := func(ms, want int) []*job.Job { t.Helper(); return leaseExactly(t, s, ms, want) }
	first := leaseN(0, 1)
	tr := success(first[0], at(400)) // written at +400 ms ...
	tr.Keys.Answered = at(100)       // ... for an answer in at +100 ms
	mustOK(t, finish(t, s, tr))
	leaseN(1050, 0) // logged at +100 ms: the window holds it until +1.1 s
	second := leaseN(1150, 1)
	tr = success(second[0], at(1300))
	tr.Keys.Answered = at(1900) // after Now: logged at Now
	mustOK(t, finish(t, s, tr))
	leaseN(2250, 0)
	leaseN(2350, 1)
	if k, err := s.GetLimit(ctx, "answer"); err != nil || k.InFlight != 1 {
		t.Fatalf("answer key in flight = %d, %v; want 1", k.InFlight, err)
	}
}

// msAfterT0 is T0 (on a whole second) plus ms milliseconds.
func msAfterT0(ms int) time.Time { return T0.Add(time.Duration(ms) * time.Millisecond) }

// leaseExactly leases up to 10 jobs at T0+ms and fails the test unless
// exactly want were admitted.
func leaseExactly(t *testing.T, s store.Store, ms, want int) []*job.Job {
	t.Helper()
	got := lease(t, s, msAfterT0(ms), 10)
	if len(got) != want {
		t.Fatalf("lease at +%dms admitted %d jobs, want %d", ms, len(got), want)
	}
	return got
}

// leaseAll leases n jobs at T0 and fails the test unless it gets all n.
func leaseAll(t *testing.T, s store.Store, n int) []*job.Job {
	t.Helper()
	got := lease(t, s, T0, n)
	if len(got) != n {
		t.Fatalf("leased %d, want %d", len(got), n)
	}
	return got
}

// endAll ends the running jobs got with outcome o at at, in one finish,
// and returns their transitions as the store left them (a paced retry's
// eligible time and record are rewritten by it). engine.Decide draws its
// jitter at u = 0.5: a job's first backoff is exactly Base, 1 s; a
// second, 2 s.
func endAll(t *testing.T, s store.Store, got []*job.Job, o job.Outcome, at time.Time) []store.Transition {
	t.Helper()
	ts := make([]store.Transition, len(got))
	for i, j := range got {
		ts[i] = engine.Decide(j, o, at, false, engine.Backoff{}, 0.5)
	}
	mustOK(t, finish(t, s, ts...))
	return ts
}

// testFinishLeaseIfReleased checks store.LeaseParams.Released on a
// store.FinishLeaser: a finish that released nothing (a success on an
// unpaced key) leases nothing, though a job is waiting, and says so; one
// that released something leases as FinishLease always did: a job back
// to waiting (a repair attempt, eligible at once: its group is readied,
// and the job itself is leased again), a slot of a key at its
// concurrency cap, a paced key's start. Without Released it leases
// whatever is ready, as before; with Max 0 it is a Finish that tells.
func testFinishLeaseIfReleased(t *testing.T, open Opener) {
	s := open(t)
	fl := optional[store.FinishLeaser](t, s)
	setLimit(t, s, admission.Config{Name: "cap", Concurrency: 1})
	setLimit(t, s, admission.Config{Name: "paced", Rate: 1000, Burst: 1000})
	ms := func(n int) time.Time { return T0.Add(time.Duration(n) * time.Millisecond) }
	// finishLease finishes tr at ms(n) asking for up to 5 jobs, Released
	// set when ifReleased; it returns what it leased and what Released
	// was told (true when not set).
	finishLease := func(tr store.Transition, n, max int, ifReleased bool) ([]*job.Job, bool) {
		t.Helper()
		released, calls := true, 0
		p := store.LeaseParams{Now: ms(n), Max: max, LeaseFor: 30 * time.Second}
		if ifReleased {
			p.Released = func(r bool) { released = r; calls++ }
		}
		errs, got, err := fl.FinishLease(context.Background(), []store.Transition{tr}, p)
		if err != nil {
			t.Fatalf("finish and lease: %v", err)
		}
		mustOK(t, errs)
		if ifReleased && calls != 1 {
			t.Fatalf("Released was called %d times, want once", calls)
		}
		return got, released
	}
	insert(t, s, newJobs(4, "acme", job.LaneInteractive, "free")...)
	j := lease(t, s, ms(0), 1)[0]
	if got, released := finishLease(success(j, ms(1)), 1, 5, true); released || len(got) != 0 {
		t.Fatalf("a success on an unpaced key: released %v, leased %d; want nothing released and nothing leased", released, len(got))
	}
	if got := get(t, s, j.ID); got.State != job.StatePublished {
		t.Fatalf("the finished job is %s, want published", got.State)
	}
	j = lease(t, s, ms(2), 1)[0]
	if got, released := finishLease(success(j, ms(3)), 3, 0, true); released || len(got) != 0 {
		t.Fatalf("with Max 0: released %v, leased %d; want neither", released, len(got))
	}
	j = lease(t, s, ms(4), 1)[0]
	repair := store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled, EligibleAt: ms(5),
		Attempts: job.Attempts{Schema: 1}, Record: job.AttemptRecord{At: ms(5), Attempt: j.Attempt, Outcome: job.ClassInvalidOutput},
		Keys: store.KeyEffect{Now: ms(5)}}
	got, released := finishLease(repair, 5, 5, true)
	if !released || len(got) != 2 || !slices.ContainsFunc(got, func(g *job.Job) bool { return g.ID == j.ID }) {
		t.Fatalf("a repair attempt eligible at once: released %v, leased %d; want released and both waiting jobs, the repaired one among them", released, len(got))
	}
	// Without Released: the lease runs though the finish released nothing.
	insert(t, s, NewJob("acme", job.LaneInteractive, "free"))
	if more, _ := finishLease(success(got[0], ms(6)), 6, 5, false); len(more) != 1 {
		t.Fatalf("without Released, leased %d, want the waiting job", len(more))
	}

	// A finish of a job on a capped key frees its slot, and one on a paced
	// key gives back its token: either released something, and the lease
	// takes the key's next job. The capped key is leased asking for 5 (the
	// cap is what holds it to 1), the paced one asking for 1.
	for _, c := range []struct {
		key  string
		at   int
		max  int
		what string
	}{{"cap", 10, 5, "a finish that freed a cap's slot"}, {"paced", 20, 1, "a finish on a paced key"}} {
		insert(t, s, newJobs(2, "acme", job.LaneInteractive, c.key)...)
		got := lease(t, s, ms(c.at), c.max)
		if len(got) != 1 {
			t.Fatalf("leased %d on %s asking for %d, want 1", len(got), c.key, c.max)
		}
		if more, released := finishLease(success(got[0], ms(c.at+1)), c.at+1, 5, true); !released || len(more) != 1 {
			t.Fatalf("%s: released %v, leased %d; want released and the next job", c.what, released, len(more))
		}
	}
}

// FinishLeaseNoTurn is the lease an engine's finish asks for while its
// CPU governor has no turn free: up to 5 jobs of kinds noop, hook and
// crunch, none of crunch, the only kind that takes a turn. Exported for
// the drivers' own tests of what such a finish runs.
func FinishLeaseNoTurn(now time.Time) store.LeaseParams {
	return store.LeaseParams{Now: now, Max: 5, LeaseFor: 30 * time.Second, Kinds: []string{"noop", "hook", "crunch"},
		BatchMax: -1, BatchMaxKinds: []string{"crunch"}, Released: func(bool) {}}
}

// testFinishLeaseWithNoTurn checks a FinishLease with no batch turn
// free (BatchMax -1 for the counted kinds) beside a sweep: a finish that
// released a paced key's start takes none of the sweep's ready jobs of a
// counted kind, but takes what it may: a batch job of a kind BatchMax
// does not count, and an interactive job. A driver may skip the lease's
// statements when it can tell it would take nothing (SQLite reads first);
// it must not skip one that would take a job.
func testFinishLeaseWithNoTurn(t *testing.T, open Opener) {
	s := open(t)
	fl := optional[store.FinishLeaser](t, s)
	setLimit(t, s, admission.Config{Name: "paced", Rate: 1000, Burst: 1000})
	ms := func(n int) time.Time { return T0.Add(time.Duration(n) * time.Millisecond) }
	kind := func(k string, j *job.Job) *job.Job { j.Kind = k; return j }
	insert(t, s, kind("crunch", NewJob("acme", job.LaneBatch, "sweep")), kind("crunch", NewJob("acme", job.LaneBatch, "sweep")))
	// round leases an interactive job of the paced key, inserts ready,
	// and finishes the first with the no-turn lease: what it took.
	round := func(n int, ready ...*job.Job) []*job.Job {
		t.Helper()
		insert(t, s, NewJob("acme", job.LaneInteractive, "paced"))
		got, err := s.Lease(context.Background(), store.LeaseParams{Now: ms(n), Max: 1, LeaseFor: 30 * time.Second, Lane: job.LaneInteractive})
		if err != nil || len(got) != 1 {
			t.Fatalf("lease the paced job: %d, %v", len(got), err)
		}
		insert(t, s, ready...)
		errs, took, err := fl.FinishLease(context.Background(), []store.Transition{success(got[0], ms(n+1))}, FinishLeaseNoTurn(ms(n+1)))
		if err != nil {
			t.Fatalf("finish and lease: %v", err)
		}
		mustOK(t, errs)
		return took
	}
	if took := round(10); len(took) != 0 {
		t.Fatalf("with no turn free, the finish leased %d jobs (%s), want none of the counted kind", len(took), took[0].Kind)
	}
	hook := kind("hook", NewJob("acme", job.LaneBatch, "subscriber"))
	if took := round(20, hook); len(took) != 1 || took[0].ID != hook.ID {
		t.Fatalf("with no turn free, the finish leased %d jobs, want the batch job of a kind that takes no turn", len(took))
	}
	inter := NewJob("acme", job.LaneInteractive, "free")
	if took := round(30, inter); len(took) != 1 || took[0].ID != inter.ID {
		t.Fatalf("with no turn free, the finish leased %d jobs, want the interactive job", len(took))
	}
	if got := lease(t, s, ms(40), 5); len(got) != 2 {
		t.Fatalf("a lease with turns free leased %d, want the 2 counted jobs", len(got))
	}
}
