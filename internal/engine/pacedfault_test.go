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
		var mu sync.Mutex
		var began []time.Time
		h := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			mu.Lock()
			began = append(began, time.Now())
			mu.Unlock()
			return job.Outcome{Class: job.ClassTransient, Status: 503}
		})
		base := time.Second
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 2,
			PollInterval: 50 * time.Millisecond, Backoff: engine.Backoff{Base: base}})
		waitFinal(t, s, 5*time.Minute)
		mu.Lock()
		defer mu.Unlock()
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
