package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
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
	s := open(t)
	setLimit(t, s, admission.AdaptiveUpstreamWindow("ev", 20, time.Second, 20, admission.DefaultHeadroom))
	for range 30 {
		insert(t, s, NewJob("acme", job.LaneBatch, "ev"))
	}
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
