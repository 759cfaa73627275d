package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestPacedStartsOnTheKeysClock splits a paced start's lag (issue 12,
// docs/benchmarks.md "Session 14 (s14h6)") in the bubble's clock, where
// running code takes no time and only a sleep does: a lease call here
// takes 2 ms (leaseLatency), as a durable write would. Each start of a
// key at 20/s, burst 1, must be leased at the key's admissible instant
// (the fetch loop's wake-up adds nothing: it sleeps until the time the
// store reported), and its handler must begin when that lease call
// returns (the handoff adds nothing). What remains on the real clock,
// scheduler delays and the lease's own duration, is execution, not the
// engine's waiting: the bucket paces from the lease's now, so only the
// wake-up shifts later starts, and it is nil here.
func TestPacedStartsOnTheKeysClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const leaseLatency = 2 * time.Millisecond
		s := &slowLease{Store: newStore(t), latency: leaseLatency}
		pacedBacklog(t, s, 20, 10)
		var log startLog
		h := log.handler(job.Outcome{Class: job.ClassSuccess})
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 4, PollInterval: 10 * time.Second})
		waitFinal(t, s, 5*time.Second)
		s.mu.Lock()
		leases := append([]time.Time(nil), s.leasedAt...)
		s.mu.Unlock()
		began := log.times()
		if len(began) != 10 || len(leases) != 10 {
			t.Fatalf("%d handlers began, %d leases returned a job; want 10 each", len(began), len(leases))
		}
		unit := 50 * time.Millisecond
		for i := range began {
			if want := leases[0].Add(time.Duration(i) * unit); !leases[i].Equal(want) {
				t.Errorf("start %d leased at +%v, want +%v: the fetch loop woke after the key admitted", i, leases[i].Sub(leases[0]), want.Sub(leases[0]))
			}
			if d := began[i].Sub(leases[i]); d != leaseLatency {
				t.Errorf("start %d began %v after its lease's now, want the lease's %v", i, d, leaseLatency)
			}
		}
	})
}

// slowLease is a store whose Lease takes latency of the bubble's clock,
// and that records the lease time (p.Now) of each call that returned a
// job.
type slowLease struct {
	store.Store
	latency  time.Duration
	mu       sync.Mutex
	leasedAt []time.Time
}

func (s *slowLease) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	time.Sleep(s.latency)
	jobs, err := s.Store.Lease(ctx, p)
	s.mu.Lock()
	for range jobs {
		s.leasedAt = append(s.leasedAt, p.Now)
	}
	s.mu.Unlock()
	return jobs, err
}

// startLog records, in the bubble's clock, when each call of the
// handler it makes began: the pacing tests compare those instants with
// the key's pace and the backoff.
type startLog struct {
	mu    sync.Mutex
	began []time.Time
}

// handler returns a handler that records its start and returns out.
func (l *startLog) handler(out job.Outcome) engine.Handler {
	return engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
		l.mu.Lock()
		l.began = append(l.began, time.Now())
		l.mu.Unlock()
		return out
	})
}

// times returns a copy of the start instants recorded so far.
func (l *startLog) times() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.began...)
}

// TestFailingUpstreamBacksOff holds engine.PacedFaults to its promise
// that a run of failures still slows down: a job on a key paced at 20/s
// whose upstream fails every attempt (a 503 without Retry-After) is
// retried at the key's pace for its first engine.PacedFaults faults, and
// after a growing backoff (base 1 s, doubled per fault, at least half of
// it) from the next one on, until its transient budget ends it. Run in the
// bubble's clock, so that the gaps are exact whatever the machine's load.
func TestFailingUpstreamBacksOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		pacedBacklog(t, s, 20, 1)
		var log startLog
		h := log.handler(job.Outcome{Class: job.ClassTransient, Status: 503})
		base := time.Second
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 2,
			PollInterval: 50 * time.Millisecond, Backoff: engine.Backoff{Base: base}})
		waitFinal(t, s, 5*time.Minute)
		began := log.times()
		budget := job.DefaultBudgets.Transient
		if len(began) != budget+1 {
			t.Fatalf("%d attempts, want %d: the transient budget and one", len(began), budget+1)
		}
		// However many faults are paced, the upstream must not see the
		// budget's 6 attempts within less than the 3 backoffs' least
		// (2 + 4 + 8 s at u = 0): a destination that always fails is
		// still backed off.
		if span := began[len(began)-1].Sub(began[0]); span < 14*time.Second {
			t.Errorf("%d attempts within %v, want them spread over at least 14 s", len(began), span)
		}
		for i := 1; i < len(began); i++ {
			gap := began[i].Sub(began[i-1])
			if i <= engine.PacedFaults {
				// Paced: the key's 50 ms and a poll at most.
				if gap > 150*time.Millisecond {
					t.Errorf("attempt %d began %v after attempt %d, want at the key's pace (fault %d of %d paced)", i+1, gap, i, i, engine.PacedFaults)
				}
				continue
			}
			// Backed off: base * 2^(i-1) * U(0.5, 1.5).
			if least := base << (i - 1) / 2; gap < least {
				t.Errorf("attempt %d began %v after attempt %d, want a backoff of at least %v", i+1, gap, i, least)
			}
		}
		checkHistory(t, s)
	})
}

// checkHistory fails t unless the one job of s ended on its transient
// budget, its first engine.PacedFaults retries recorded as key pacing and
// the later ones as backoff.
func checkHistory(t *testing.T, s store.Store) {
	t.Helper()
	jobs, err := s.List(context.Background(), store.ListParams{Limit: 10})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("list: %d jobs, %v; want 1", len(jobs), err)
	}
	j, err := s.Get(context.Background(), jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != job.StateTerminal || j.Reason != job.ReasonTransientBudgetExhausted {
		t.Fatalf("job %s/%s, want terminal/%s", j.State, j.Reason, job.ReasonTransientBudgetExhausted)
	}
	retries := 0
	for _, r := range j.History {
		if r.Outcome != job.ClassTransient || r.Why == "" {
			continue
		}
		retries++
		want := "backoff"
		if retries <= engine.PacedFaults {
			want = store.PacedRetryWhy
		}
		if r.Why != want {
			t.Errorf("retry %d recorded %q, want %q", retries, r.Why, want)
		}
	}
}
