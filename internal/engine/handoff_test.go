package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// slowStore is a store whose lease and finish calls each take commit of
// the bubble's time before they run: a commit's fsync, or a PostgreSQL
// round trip and WAL flush, which a synctest bubble otherwise sees as
// free. It counts the calls.
type slowStore struct {
	store.Store
	commit                        time.Duration
	leases, finishes, finishLease atomic.Int64
}

func (s *slowStore) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	s.leases.Add(1)
	time.Sleep(s.commit)
	return s.Store.Lease(ctx, p)
}

func (s *slowStore) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	s.finishes.Add(1)
	time.Sleep(s.commit)
	return s.Store.Finish(ctx, ts)
}

func (s *slowStore) FinishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	s.finishLease.Add(1)
	time.Sleep(s.commit)
	return s.Store.(store.FinishLeaser).FinishLease(ctx, ts, p)
}

// TestCapBoundKeyStartsOneCommitAfterTheAnswer: on a key held at a
// concurrency cap of one, each job can start only once the one before it
// has finished, so whatever the engine spends between an answer and the
// next start is paid once per job (the unforeseen mix's concurrent-1:
// 200 requests one at a time). With its fetch loop idle (its last lease
// found the key full), the engine finishes the answer and leases the
// key's next job in one store write, so the next job starts one commit
// after the answer, not two (a finish, then the lease its Notify caused).
// In a synctest bubble with every lease and finish taking 2 ms of the
// bubble's time, so the gap is exact on any machine.
func TestCapBoundKeyStartsOneCommitAfterTheAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t)
		if _, err := base.UpsertLimit(context.Background(), admission.Config{Name: "k", Concurrency: 1}, time.Now()); err != nil {
			t.Fatal(err)
		}
		const n, run, commit = 20, 25 * time.Millisecond, 2 * time.Millisecond
		s := &slowStore{Store: base, commit: commit}
		var mu sync.Mutex
		var starts, answers []time.Time
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			time.Sleep(run)
			mu.Lock()
			answers = append(answers, time.Now())
			mu.Unlock()
			return job.Outcome{Class: job.ClassSuccess}
		})
		var jobs []*job.Job
		for range n {
			jobs = append(jobs, storetest.NewJob("acme", job.LaneInteractive, "k"))
		}
		insertNow(t, base, jobs...)
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 4, PollInterval: 50 * time.Millisecond})
		waitFinal(t, base, time.Minute)
		mu.Lock()
		defer mu.Unlock()
		if len(starts) != n || len(answers) != n {
			t.Fatalf("%d starts and %d answers, want %d each", len(starts), len(answers), n)
		}
		var total time.Duration
		for i := 1; i < n; i++ {
			gap := starts[i].Sub(answers[i-1])
			if gap < 0 {
				t.Fatalf("job %d started %v before job %d answered: the cap of one did not hold", i, -gap, i-1)
			}
			total += gap
		}
		mean := total / (n - 1)
		t.Logf("answer to next start: mean %v over %d jobs (commit %v); store calls: %d leases, %d finishes, %d finishes with a lease",
			mean, n, commit, s.leases.Load(), s.finishes.Load(), s.finishLease.Load())
		// One commit when the fetch loop was idle at the answer; two
		// when it was in a lease call of its own (its 20 ms re-check of
		// the full key) and the finish went alone.
		if mean > commit*3/2 {
			t.Errorf("mean gap from an answer to the next start %v, want about one commit (%v): the next job waits for a second write", mean, commit)
		}
	})
}
