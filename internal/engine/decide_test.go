package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func running(lane job.Lane) *job.Job {
	return &job.Job{ID: "j1", Lane: lane, LeaseToken: "tok", Attempt: 1, Cost: 1, LimitKeys: []string{"k"},
		Budgets: job.Budgets{Congestion: 3, Transient: 2, Schema: 1}}
}

// TestDecide is the table of the engine's one classification switch.
func TestDecide(t *testing.T) {
	t.Parallel()
	b := Backoff{}.WithDefaults()
	spent := func(c, tr, s int) func(*job.Job) {
		return func(j *job.Job) { j.Attempts = job.Attempts{Congestion: c, Transient: tr, Schema: s} }
	}
	tests := []struct {
		name       string
		prep       func(*job.Job)
		out        job.Outcome
		validates  bool
		to         job.State
		reason     job.Reason
		delay      time.Duration // expected exact delay, or -1 to skip
		attempts   job.Attempts
		pauseUntil time.Time
		backoff    bool // the key effect is marked as the job's own backoff
		fault      bool // the key effect marks one of a job's first PacedFaults faults (store.PacedFault)
	}{
		{name: "success publishes", out: job.Outcome{Class: job.ClassSuccess}, to: job.StatePublished, delay: -1},
		{name: "success validates", out: job.Outcome{Class: job.ClassSuccess}, validates: true, to: job.StateValidated, delay: -1},
		{name: "429 with retry-after", out: job.Outcome{Class: job.ClassRateLimited, RetryAfter: 2 * time.Second, Status: 429},
			to: job.StateRetryScheduled, delay: 2 * time.Second, attempts: job.Attempts{Congestion: 1}, pauseUntil: t0.Add(2 * time.Second)},
		{name: "retry-after keeps its milliseconds", out: job.Outcome{Class: job.ClassRateLimited, RetryAfter: 1234 * time.Millisecond, Status: 429},
			to: job.StateRetryScheduled, delay: 1234 * time.Millisecond, attempts: job.Attempts{Congestion: 1}, pauseUntil: t0.Add(1234 * time.Millisecond)},
		{name: "503 with retry-after pauses like a 429", out: job.Outcome{Class: job.ClassRateLimited, RetryAfter: 1500 * time.Millisecond, Status: 503},
			to: job.StateRetryScheduled, delay: 1500 * time.Millisecond, attempts: job.Attempts{Congestion: 1}, pauseUntil: t0.Add(1500 * time.Millisecond)},
		{name: "429 without retry-after backs off", out: job.Outcome{Class: job.ClassRateLimited, Status: 429},
			to: job.StateRetryScheduled, delay: time.Second, attempts: job.Attempts{Congestion: 1}, pauseUntil: t0.Add(time.Second), backoff: true},
		{name: "429 budget exhausted", prep: spent(3, 0, 0), out: job.Outcome{Class: job.ClassRateLimited, RetryAfter: time.Second},
			to: job.StateTerminal, reason: job.ReasonRateLimitBudgetExhausted, delay: -1, attempts: job.Attempts{Congestion: 4}, pauseUntil: t0.Add(time.Second)},
		{name: "429 past the 7-day cap", out: job.Outcome{Class: job.ClassRateLimited, RetryAfter: 8 * 24 * time.Hour},
			to: job.StateTerminal, reason: job.ReasonNeedsReconciliation, delay: -1, attempts: job.Attempts{Congestion: 1}, pauseUntil: t0.Add(job.MaxDelay)},
		{name: "transient backs off", out: job.Outcome{Class: job.ClassTransient, Status: 503},
			to: job.StateRetryScheduled, delay: time.Second, attempts: job.Attempts{Transient: 1}, fault: true},
		{name: "a second transient is marked too", prep: spent(0, 1, 0), out: job.Outcome{Class: job.ClassTransient, Status: 503},
			to: job.StateRetryScheduled, delay: 2 * time.Second, attempts: job.Attempts{Transient: 2}, fault: true},
		{name: "a third transient backs off, unmarked", prep: func(j *job.Job) { j.Attempts.Transient, j.Budgets.Transient = 2, 5 }, out: job.Outcome{Class: job.ClassTransient, Status: 503},
			to: job.StateRetryScheduled, delay: 4 * time.Second, attempts: job.Attempts{Transient: 3}},
		{name: "transient exhausted", prep: spent(2, 2, 0), out: job.Outcome{Class: job.ClassTransient},
			to: job.StateTerminal, reason: job.ReasonTransientBudgetExhausted, delay: -1, attempts: job.Attempts{Congestion: 2, Transient: 3}},
		{name: "invalid output spends schema only", prep: spent(1, 1, 0), out: job.Outcome{Class: job.ClassInvalidOutput},
			to: job.StateRetryScheduled, delay: 0, attempts: job.Attempts{Congestion: 1, Transient: 1, Schema: 1}},
		{name: "schema exhausted", prep: spent(0, 0, 1), out: job.Outcome{Class: job.ClassInvalidOutput},
			to: job.StateTerminal, reason: job.ReasonSchemaBudgetExhausted, delay: -1, attempts: job.Attempts{Schema: 2}},
		{name: "permanent never retried", out: job.Outcome{Class: job.ClassPermanent, Status: 401},
			to: job.StateTerminal, reason: job.ReasonPermanentError, delay: -1},
		{name: "quota exhausted pauses the key", out: job.Outcome{Class: job.ClassPermanent, Reason: job.ReasonProviderQuotaExhausted, PauseKeyFor: time.Hour},
			to: job.StateTerminal, reason: job.ReasonProviderQuotaExhausted, delay: -1, pauseUntil: t0.Add(time.Hour)},
		{name: "pending comes back after its delay, spending nothing", prep: spent(3, 4, 1),
			out: job.Outcome{Class: job.ClassPending, RetryAfter: 90 * time.Second},
			to:  job.StateRetryScheduled, delay: 90 * time.Second, attempts: job.Attempts{Congestion: 3, Transient: 4, Schema: 1}},
		{name: "pending with a refusal pauses the key, spending nothing", prep: spent(3, 4, 1),
			out: job.Outcome{Class: job.ClassPending, RetryAfter: 5 * time.Second, PauseKeyFor: 30 * time.Second},
			to:  job.StateRetryScheduled, delay: 5 * time.Second, attempts: job.Attempts{Congestion: 3, Transient: 4, Schema: 1},
			pauseUntil: t0.Add(30 * time.Second)},
		{name: "pending without a delay waits the default", out: job.Outcome{Class: job.ClassPending},
			to: job.StateRetryScheduled, delay: job.DefaultPendingDelay},
		{name: "pending past the deadline ends", prep: func(j *job.Job) { j.Deadline = t0.Add(time.Second) },
			out: job.Outcome{Class: job.ClassPending}, to: job.StateTerminal, reason: job.ReasonDeadlineExceeded, delay: -1},
		{name: "lease expired returns to waiting", out: job.Outcome{Class: job.ClassLeaseExpired},
			to: job.StateWaiting, delay: 0, attempts: job.Attempts{Transient: 1}},
		{name: "retry past the deadline", prep: func(j *job.Job) { j.Deadline = t0.Add(time.Second) },
			out: job.Outcome{Class: job.ClassRateLimited, RetryAfter: 5 * time.Second},
			to:  job.StateTerminal, reason: job.ReasonDeadlineExceeded, delay: -1, attempts: job.Attempts{Congestion: 1}, pauseUntil: t0.Add(5 * time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := running(job.LaneInteractive)
			if tc.prep != nil {
				tc.prep(j)
			}
			if tc.attempts == (job.Attempts{}) {
				tc.attempts = j.Attempts
			}
			tr := Decide(j, tc.out, t0, tc.validates, b, 0.5) // u = 0.5: no jitter
			if tr.To != tc.to || tr.Reason != tc.reason {
				t.Fatalf("to %s/%s, want %s/%s", tr.To, tr.Reason, tc.to, tc.reason)
			}
			if tr.Attempts != tc.attempts {
				t.Fatalf("attempts %+v, want %+v", tr.Attempts, tc.attempts)
			}
			if tc.delay >= 0 && tr.To != job.StateTerminal && !tr.EligibleAt.Equal(t0.Add(tc.delay)) {
				t.Fatalf("eligible at %v, want +%v", tr.EligibleAt.Sub(t0), tc.delay)
			}
			if !tr.Keys.PauseUntil.Equal(tc.pauseUntil) {
				t.Fatalf("pause until %v, want %v", tr.Keys.PauseUntil, tc.pauseUntil)
			}
			if tr.Keys.Backoff != tc.backoff {
				t.Fatalf("key effect backoff = %v, want %v", tr.Keys.Backoff, tc.backoff)
			}
			// The store decides from the job's keys whether they pace the
			// retry instead of the backoff (store.PacedRetry).
			// So it does for a job's first PacedFaults faults
			// (store.PacedFault), and only then: a later fault backs off
			// whatever its keys.
			if tr.Keys.Fault != tc.fault {
				t.Fatalf("key effect fault = %v, want %v", tr.Keys.Fault, tc.fault)
			}
			named := tc.backoff || tc.fault
			if named != (len(tr.Keys.JobKeys) > 0) || named && !slices.Equal(tr.Keys.JobKeys, j.LimitKeys) {
				t.Fatalf("key effect job keys = %v, want the job's %v only with a backoff or one of its first faults", tr.Keys.JobKeys, j.LimitKeys)
			}
			if !job.CanTransition(job.StateRunning, tr.To) {
				t.Fatalf("running -> %s is not a legal transition", tr.To)
			}
			if (tr.To == job.StateTerminal) != (tr.Reason != "") {
				t.Fatal("a terminal transition needs a reason and only a terminal one has one")
			}
			if tr.ID != j.ID || tr.LeaseToken != "tok" {
				t.Fatal("transition not guarded on the job's lease")
			}
		})
	}
}

// TestBackoffBounds checks min(cap, base*2^n) * U(0.5, 1.5).
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	b := Backoff{}.WithDefaults()
	for n := 1; n <= 20; n++ {
		for _, u := range []float64{0, 0.25, 0.999} {
			d := b.Delay(job.LaneInteractive, n, u)
			base := min(float64(time.Second)*float64(int64(1)<<min(n-1, 30)), float64(60*time.Second))
			if float64(d) < 0.5*base-1 || float64(d) > 1.5*base+1 {
				t.Fatalf("n=%d u=%v: delay %v outside [0.5, 1.5] x %v", n, u, d, time.Duration(base))
			}
		}
	}
	if d := b.Delay(job.LaneBatch, 30, 0.999); d > 15*time.Minute {
		t.Fatalf("batch delay %v exceeds 1.5 x its 10 min cap", d)
	}
}
