package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

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
	got := lease(t, s, T0, 3)
	if len(got) != 3 {
		t.Fatalf("leased %d, want 3", len(got))
	}
	at := T0.Add(10 * time.Millisecond)
	ts := make([]store.Transition, len(got))
	for i, j := range got {
		// u = 0.5: the first backoff is exactly Base, 1 s.
		ts[i] = engine.Decide(j, job.Outcome{Class: job.ClassRateLimited, Status: 429}, at, false, engine.Backoff{}, 0.5)
	}
	mustOK(t, finish(t, s, ts...))
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

// A job's first transient failure (a 503 without Retry-After) on a job
// whose every key spaces its starts needs no backoff (store.PacedFault):
// the store writes the retry eligible at the failure, and the key's pace
// spaces it like any other start. A job with a key that spaces nothing (a
// concurrency cap alone) and a job's second failure keep their backoff: a storm of retries, or a run of failures, still
// slows down. Every failure spends one unit of the transient budget.
func testPacedFault(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "ra", Rate: 10, Burst: 2})
	setLimit(t, s, admission.Config{Name: "wa", Windows: []admission.Window{{Limit: 5, Period: time.Second}}})
	setLimit(t, s, admission.Config{Name: "ca", Concurrency: 5})
	rate, window, capped := NewJob("acme", job.LaneBatch, "ra"), NewJob("acme", job.LaneBatch, "wa"), NewJob("acme", job.LaneBatch, "ca")
	insert(t, s, rate, window, capped)
	got := lease(t, s, T0, 3)
	if len(got) != 3 {
		t.Fatalf("leased %d, want 3", len(got))
	}
	at := T0.Add(10 * time.Millisecond)
	ts := make([]store.Transition, len(got))
	for i, j := range got {
		// u = 0.5: the first backoff is exactly Base, 1 s; a second 2 s.
		ts[i] = engine.Decide(j, job.Outcome{Class: job.ClassTransient, Status: 503}, at, false, engine.Backoff{}, 0.5)
	}
	mustOK(t, finish(t, s, ts...))
	for i, j := range got {
		want, why, n := at.Add(time.Second), "backoff", 1
		if j.ID == rate.ID || j.ID == window.ID {
			want, why = at, store.PacedRetryWhy
		}
		if !ts[i].EligibleAt.Equal(want) || ts[i].Record.Why != why {
			t.Errorf("job on %v: finish reported eligible at %v (%s), want %v (%s)", j.LimitKeys,
				ts[i].EligibleAt.Sub(T0), ts[i].Record.Why, want.Sub(T0), why)
		}
		g := get(t, s, j.ID)
		last := g.History[len(g.History)-1]
		if g.State != job.StateRetryScheduled || !g.EligibleAt.Equal(want) || last.Why != why || g.Attempts.Transient != n {
			t.Errorf("job on %v: %s eligible at %v, record %q, transient %d; want retry_scheduled at %v, %q, %d",
				j.LimitKeys, g.State, g.EligibleAt.Sub(T0), last.Why, g.Attempts.Transient, want.Sub(T0), why, n)
		}
	}
	// The paced retries go again as soon as their keys admit them; the
	// others wait out their backoff.
	at = at.Add(200 * time.Millisecond)
	got = lease(t, s, at, 3)
	if len(got) != 2 {
		t.Fatalf("leased %v 0.2 s after the failures, want the two first faults on paced keys", ids(got))
	}
	// Their second failure backs off (2 s at u = 0.5).
	for i, j := range got {
		ts[i] = engine.Decide(j, job.Outcome{Class: job.ClassTransient, Status: 503}, at, false, engine.Backoff{}, 0.5)
	}
	mustOK(t, finish(t, s, ts[:2]...))
	for _, j := range got {
		if g := get(t, s, j.ID); !g.EligibleAt.Equal(at.Add(2*time.Second)) || g.Attempts.Transient != 2 {
			t.Errorf("job on %v after its second failure: eligible at %v, transient %d; want %v, 2",
				j.LimitKeys, g.EligibleAt.Sub(T0), g.Attempts.Transient, at.Add(2*time.Second).Sub(T0))
		}
	}
}
