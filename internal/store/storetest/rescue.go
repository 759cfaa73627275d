package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// The rescuer-vs-completion cases (RELIABILITY.md T3, River issue #1302).
// The reaper selects expired leases (Expired) and recovers them (Finish)
// in two calls; these cases act in the gap between the two, as the
// engine's reaper hook does on a live engine, and check that every
// recovery is a guarded transition that either wins whole or changes
// nothing (ErrConflict: the guarded UPDATE matched no row).

// leaseFor leases up to max jobs at now for d.
func leaseFor(t *testing.T, s store.Store, now time.Time, max int, d time.Duration) []*job.Job {
	t.Helper()
	got, err := s.Lease(context.Background(), store.LeaseParams{Now: now, Max: max, LeaseFor: d})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	return got
}

// Recovery is the reaper's transition of an expired lease at now, as
// engine.Reap builds it: one transient attempt, back to waiting, guarded on
// the lease token it selected and on the lease having expired by now.
func Recovery(j *job.Job, now time.Time) store.Transition {
	a := j.Attempts
	a.Transient++
	return store.Transition{
		ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateWaiting, EligibleAt: now, Attempts: a,
		Record:         job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassLeaseExpired, Why: "lease expired"},
		Keys:           store.KeyEffect{Now: now},
		LeaseExpiredBy: now,
	}
}

func expired(t *testing.T, s store.Store, now time.Time) []*job.Job {
	t.Helper()
	got, err := s.Expired(context.Background(), now, 100)
	if err != nil {
		t.Fatalf("expired: %v", err)
	}
	return got
}

func inFlight(t *testing.T, s store.Store, key string) int {
	t.Helper()
	k, err := s.GetLimit(context.Background(), key)
	if err != nil {
		t.Fatalf("get limit %s: %v", key, err)
	}
	return k.InFlight
}

func conflict(t *testing.T, what string, errs []error) {
	t.Helper()
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("%s = %v, want ErrConflict (no row matched the guard)", what, errs[0])
	}
}

// CountOutcome counts the attempts in j's history that ended with c.
func CountOutcome(j *job.Job, c job.Class) int {
	n := 0
	for _, h := range j.History {
		if h.Outcome == c {
			n++
		}
	}
	return n
}

// leasedOnK opens a store with n jobs on the unconfigured key k, all
// leased at T0 for 30 s (expired from T0+30s): the state every rescue
// case acts on.
func leasedOnK(t *testing.T, open Opener, n int) (store.Store, []*job.Job) {
	t.Helper()
	s := open(t)
	insert(t, s, newJobs(n, "acme", job.LaneBatch, "k")...)
	js := leaseFor(t, s, T0, n, 30*time.Second)
	if len(js) != n {
		t.Fatalf("leased %d, want %d", len(js), n)
	}
	return s, js
}

// rescueAt is when the reapers of the rescue races act: a second after
// leasedOnK's leases expired.
var rescueAt = T0.Add(31 * time.Second)

// selectExpired selects the expired leases at rescueAt n times, as n
// reapers' sweeps would (each its own read), and fails the test unless
// every selection holds want leases.
func selectExpired(t *testing.T, s store.Store, n, want int) [][]*job.Job {
	t.Helper()
	sels := make([][]*job.Job, n)
	for i := range sels {
		if sels[i] = expired(t, s, rescueAt); len(sels[i]) != want {
			t.Fatalf("selection %d of %d holds %d expired leases, want %d", i+1, n, len(sels[i]), want)
		}
	}
	return sels
}

// testRescueVsCompletion: the worker completes after the reaper selected
// its (expired) lease. The recovery conflicts and the completed job is
// unchanged: state, attempt, counters, history and timestamps.
func testRescueVsCompletion(t *testing.T, open Opener) {
	s, js := leasedOnK(t, open, 2)
	j, at := js[0], rescueAt
	sel := selectExpired(t, s, 1, 2)[0]
	mustOK(t, finish(t, s, success(j, at))) // the late worker wins the gap
	done := get(t, s, j.ID)
	for _, e := range sel {
		if e.ID == j.ID {
			conflict(t, "recovery of a job completed since its selection", finish(t, s, Recovery(e, at)))
		}
	}
	if after := get(t, s, j.ID); !reflect.DeepEqual(after, done) {
		t.Fatalf("the recovery changed a completed job:\nbefore %+v\nafter  %+v", done, after)
	}
	if done.State != job.StatePublished || done.Attempt != 1 || done.Attempts != (job.Attempts{}) {
		t.Fatalf("completed job = %s attempt %d %+v", done.State, done.Attempt, done.Attempts)
	}
	// The other job is still running: the key holds its lease, once.
	if n := inFlight(t, s, "k"); n != 1 {
		t.Fatalf("in flight = %d after one completion and one refused recovery, want 1", n)
	}
}

// testRescueVsRelease: another reaper recovers the lease and a worker
// leases the job again, all in the first reaper's gap. The first reaper's
// recovery conflicts: the fresh attempt is not reset and the lease was
// recovered exactly once (transient +1 once).
func testRescueVsRelease(t *testing.T, open Opener) {
	s, js := leasedOnK(t, open, 1)
	j := js[0]
	at := rescueAt
	sels := selectExpired(t, s, 2, 1)
	slow, fast := sels[0], sels[1]
	mustOK(t, finish(t, s, Recovery(fast[0], at)))
	again := leaseFor(t, s, at, 1, 30*time.Second)
	if len(again) != 1 || again[0].Attempt != 2 || again[0].LeaseToken == j.LeaseToken {
		t.Fatalf("re-lease = %+v, want attempt 2 with a new token", again)
	}
	conflict(t, "stale recovery of a job leased again", finish(t, s, Recovery(slow[0], at)))
	got := get(t, s, j.ID)
	if got.State != job.StateRunning || got.Attempt != 2 || got.LeaseToken != again[0].LeaseToken ||
		got.Attempts.Transient != 1 || CountOutcome(got, job.ClassLeaseExpired) != 1 {
		t.Fatalf("job = %s attempt %d transient %d, %d recoveries; want running attempt 2, recovered once",
			got.State, got.Attempt, got.Attempts.Transient, CountOutcome(got, job.ClassLeaseExpired))
	}
	if !got.LeaseExpiresAt.Equal(again[0].LeaseExpiresAt) {
		t.Fatalf("the fresh lease was changed: expires %v, leased until %v", got.LeaseExpiresAt, again[0].LeaseExpiresAt)
	}
	if n := inFlight(t, s, "k"); n != 1 {
		t.Fatalf("in flight = %d with one lease running, want 1", n)
	}
}

// testRescueVsHeartbeat: the worker heartbeats after the reaper selected
// its expired lease. The worker is alive and renewed its lease, so the
// recovery conflicts and the job keeps running under the same lease.
func testRescueVsHeartbeat(t *testing.T, open Opener) {
	s, js := leasedOnK(t, open, 1)
	j := js[0]
	at := rescueAt
	sel := selectExpired(t, s, 1, 1)[0]
	if err := s.Heartbeat(context.Background(), j.ID, j.LeaseToken, at.Add(30*time.Second)); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	conflict(t, "recovery of a lease renewed since its selection", finish(t, s, Recovery(sel[0], at)))
	got := get(t, s, j.ID)
	if got.State != job.StateRunning || got.LeaseToken != j.LeaseToken || got.Attempt != 1 || got.Attempts.Transient != 0 {
		t.Fatalf("job = %s attempt %d transient %d; want still running under its lease", got.State, got.Attempt, got.Attempts.Transient)
	}
	mustOK(t, finish(t, s, success(j, at.Add(time.Second)))) // and the worker finishes normally
}

// testRescueHorizon: a lease expiring at E is expired at E and after (the
// lease holds while now < E, as the HTTP API checks it), and not at
// E - 1ms; a recovery guarded on an earlier now than E conflicts.
func testRescueHorizon(t *testing.T, open Opener) {
	s, js := leasedOnK(t, open, 1)
	j := js[0]
	e := j.LeaseExpiresAt
	if !e.Equal(T0.Add(30 * time.Second)) {
		t.Fatalf("lease expires %v, want %v", e, T0.Add(30*time.Second))
	}
	for _, c := range []struct {
		now  time.Time
		want int
	}{{e.Add(-time.Millisecond), 0}, {e, 1}, {e.Add(time.Millisecond), 1}} {
		if got := expired(t, s, c.now); len(got) != c.want {
			t.Fatalf("expired at expiry%+v = %d jobs, want %d", c.now.Sub(e), len(got), c.want)
		}
	}
	// A reaper whose clock reads E - 1ms must not recover it, whatever it
	// selected.
	conflict(t, "recovery at expiry-1ms", finish(t, s, Recovery(j, e.Add(-time.Millisecond))))
	mustOK(t, finish(t, s, Recovery(j, e)))
	if got := get(t, s, j.ID); got.State != job.StateWaiting || got.Attempts.Transient != 1 {
		t.Fatalf("job = %s transient %d after the recovery at expiry", got.State, got.Attempts.Transient)
	}
}

// testRescueOnce: two recoveries of one selection (two sweeps that both
// saw the lease) recover it once: the second conflicts, the attempt is
// counted once and the key's in-flight lease is released once.
func testRescueOnce(t *testing.T, open Opener) {
	s, js := leasedOnK(t, open, 2)
	j, at := js[0], rescueAt
	// The other job keeps its lease so a second release would show.
	if err := s.Heartbeat(context.Background(), js[1].ID, js[1].LeaseToken, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	sels := selectExpired(t, s, 2, 1)
	a, b := sels[0], sels[1]
	errs := finish(t, s, Recovery(a[0], at), Recovery(b[0], at))
	if errs[0] != nil || !errors.Is(errs[1], store.ErrConflict) {
		t.Fatalf("two recoveries in one batch = %v, want nil then ErrConflict", errs)
	}
	conflict(t, "a third recovery", finish(t, s, Recovery(a[0], at)))
	got := get(t, s, j.ID)
	if got.State != job.StateWaiting || got.Attempts.Transient != 1 || CountOutcome(got, job.ClassLeaseExpired) != 1 {
		t.Fatalf("job = %s transient %d, %d recoveries; want recovered exactly once", got.State, got.Attempts.Transient,
			CountOutcome(got, job.ClassLeaseExpired))
	}
	if n := inFlight(t, s, "k"); n != 1 {
		t.Fatalf("in flight = %d, want 1 (one lease left): the key was released more than once", n)
	}
}

// testGuardOnAttempt: a transition naming another attempt of the job than
// the one running conflicts even with the right lease token, so the guard
// is on (id, state, attempt) as well as the token.
func testGuardOnAttempt(t *testing.T, open Opener) {
	s, js := leasedOnK(t, open, 1)
	j := js[0]
	wrong := success(j, T0)
	wrong.Record.Attempt = j.Attempt + 1
	conflict(t, "finish naming another attempt", finish(t, s, wrong))
	if got := get(t, s, j.ID); got.State != job.StateRunning || got.Attempt != 1 || len(got.History) != 0 {
		t.Fatalf("the refused transition changed the job: %s attempt %d, %d records", got.State, got.Attempt, len(got.History))
	}
	mustOK(t, finish(t, s, success(j, T0)))
}
