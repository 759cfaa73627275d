package engine_test

import (
	"context"
	"os"
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
	// emptyLeases and emptyFinishLeases count the calls that took no
	// job: a lease transaction spent on nothing, and a finish whose
	// lease part read the ready groups for nothing. skippedFinishLeases
	// counts the finishes asked to lease only if they released something
	// (store.LeaseParams.Released) that released nothing, so read
	// nothing. A FinishLease with Max 0 is counted as a finish alone.
	emptyLeases, emptyFinishLeases, skippedFinishLeases atomic.Int64
	// writer, when set, is held through each call: one writer at a time,
	// as SQLite's, so that a lease waits for the finish under way and
	// the finish for the lease (a channel made in the bubble: a goroutine
	// waiting on it is durably blocked, and the bubble's clock moves).
	writer chan struct{}
}

// hold takes the writer, when there is one, and sleeps the commit; the
// returned func releases the writer.
func (s *slowStore) hold() func() {
	if s.writer == nil {
		time.Sleep(s.commit)
		return func() {}
	}
	s.writer <- struct{}{}
	time.Sleep(s.commit)
	return func() { <-s.writer }
}

func (s *slowStore) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	s.leases.Add(1)
	defer s.hold()()
	jobs, err := s.Store.Lease(ctx, p)
	if err == nil && len(jobs) == 0 {
		s.emptyLeases.Add(1)
	}
	return jobs, err
}

func (s *slowStore) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	s.finishes.Add(1)
	defer s.hold()()
	return s.Store.Finish(ctx, ts)
}

func (s *slowStore) FinishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	if p.Max <= 0 {
		s.finishes.Add(1)
	} else {
		s.finishLease.Add(1)
	}
	defer s.hold()()
	released := true
	if told := p.Released; told != nil {
		p.Released = func(r bool) { released = r; told(r) }
	}
	errs, jobs, err := s.Store.(store.FinishLeaser).FinishLease(ctx, ts, p)
	switch {
	case err != nil || p.Max <= 0:
	case !released:
		s.skippedFinishLeases.Add(1)
	case len(jobs) == 0:
		s.emptyFinishLeases.Add(1)
	}
	return errs, jobs, err
}

// neighbour is a key whose jobs run beside a capped key's in capOneGaps:
// its limit, how many jobs and how long each runs. The zero neighbour is
// none.
type neighbour struct {
	limit admission.Config
	jobs  int
	run   time.Duration
}

// capOneGaps runs 20 jobs of a key with a concurrency cap of one (handler
// 25 ms) and nb's jobs beside them on an engine whose every lease and
// finish takes 2 ms of a synctest bubble's time, one call at a time when
// serial is set (SQLite's single writer), and returns the mean gap from
// one capped answer to the next capped start (every gap is logged, with
// the store's calls).
func capOneGaps(t *testing.T, serial bool, nb neighbour) (mean time.Duration, s *slowStore) {
	const n, run, commit = 20, 25 * time.Millisecond, 2 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t)
		ctx := context.Background()
		for _, c := range []admission.Config{{Name: "k", Concurrency: 1}, nb.limit} {
			if c.Name == "" {
				continue
			}
			if _, err := base.UpsertLimit(ctx, c, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		s = &slowStore{Store: base, commit: commit}
		if serial {
			s.writer = make(chan struct{}, 1)
		}
		var mu sync.Mutex
		var starts, answers []time.Time
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			if j.LimitKeys[0] != "k" {
				time.Sleep(nb.run)
				return job.Outcome{Class: job.ClassSuccess}
			}
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
		for range nb.jobs {
			jobs = append(jobs, storetest.NewJob("acme", job.LaneInteractive, nb.limit.Name))
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
		var gaps []time.Duration
		for i := 1; i < n; i++ {
			gap := starts[i].Sub(answers[i-1])
			if gap < 0 {
				t.Fatalf("job %d started %v before job %d answered: the cap of one did not hold", i, -gap, i-1)
			}
			gaps = append(gaps, gap)
			total += gap
		}
		mean = total / (n - 1)
		t.Logf("serial %v, neighbour %s at %v/s (%d jobs of %v): answer to next start: mean %v over %d jobs (commit %v); store calls: %d leases, %d finishes, %d finishes with a lease; gaps %v",
			serial, nb.limit.Name, nb.limit.Rate, nb.jobs, nb.run, mean, n, commit, s.leases.Load(), s.finishes.Load(), s.finishLease.Load(), gaps)
	})
	return mean, s
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
	mean, _ := capOneGaps(t, false, neighbour{})
	// One commit when the fetch loop was idle at the answer; two
	// when it was in a lease call of its own (its 20 ms re-check of
	// the full key) and the finish went alone.
	if commit := 2 * time.Millisecond; mean > commit*3/2 {
		t.Errorf("mean gap from an answer to the next start %v, want about one commit (%v): the next job waits for a second write", mean, commit)
	}
}

// TestCapBoundKeyBesidePacedKey is the unforeseen mix's pair in a
// synctest bubble: the capped key beside a key paced at 20 starts a
// second (counter-20 beside concurrent-1), every store call one at a
// time (SQLite's writer). The paced key's leases and finishes keep the
// fetch and finish loops busy now and then, yet the fetch loop is idle
// (waiting for the paced key's next admission) at nearly every capped
// answer, so the finish leases the capped key's next job in its own
// write: a gap of one commit, or two when the answer waited for the
// paced key's finish under way (docs/benchmarks.md, "Session 14
// (s14h4)": 2.2-2.7 ms, every finish write with a lease). A
// finish that never leased would make every gap two commits or more.
// RATELANE_CAPONE_SHAPES=1 also logs busier neighbours (the figures of
// that section).
func TestCapBoundKeyBesidePacedKey(t *testing.T) {
	t.Parallel()
	const commit = 2 * time.Millisecond
	paced := neighbour{admission.Config{Name: "p", Rate: 20, Burst: 1}, 60, 25 * time.Millisecond}
	mean, s := capOneGaps(t, true, paced)
	if mean > commit*7/4 {
		t.Errorf("mean gap from an answer to the next start %v beside a paced key, want under 1.75 commits (%v each)", mean, commit)
	}
	if all, with := s.finishes.Load()+s.finishLease.Load(), s.finishLease.Load(); with*10 < all*9 {
		t.Errorf("%d of %d finishes leased in the same write, want nine in ten or more: the fetch loop is idle beside a paced key", with, all)
	}
	if os.Getenv("RATELANE_CAPONE_SHAPES") == "" {
		return
	}
	for _, nb := range []neighbour{
		paced,
		{admission.Config{Name: "p", Rate: 100, Burst: 1}, 200, 5 * time.Millisecond},
		{admission.Config{Name: "p", Rate: 300, Burst: 1}, 400, 5 * time.Millisecond},
		{admission.Config{Name: "p"}, 400, 10 * time.Millisecond},
	} {
		capOneGaps(t, false, nb)
		capOneGaps(t, true, nb)
	}
}

// TestRepairAttemptStartsOneCommitAfterTheAnswer: a finish that sends its
// job back to waiting, eligible at once (a repair attempt after invalid
// output), on a key that is unpaced, released something: the job itself.
// With the fetch loop idle, the finish leases it in the same write, so it
// starts one commit after the answer. A finish that judged only its keys
// (unpaced: nothing released) would skip that lease and its Notify, and
// the job would wait for the poll (50 ms). In a synctest bubble, every
// lease and finish taking 2 ms of the bubble's time.
func TestRepairAttemptStartsOneCommitAfterTheAnswer(t *testing.T) {
	t.Parallel()
	const commit = 2 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t)
		s := &slowStore{Store: base, commit: commit}
		var mu sync.Mutex
		var starts, answers []time.Time
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			mu.Lock()
			defer mu.Unlock()
			starts = append(starts, time.Now())
			answers = append(answers, time.Now())
			if len(starts) == 1 {
				return job.Outcome{Class: job.ClassInvalidOutput}
			}
			return job.Outcome{Class: job.ClassSuccess}
		})
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}, Workers: 4, PollInterval: 50 * time.Millisecond})
		insertNow(t, base, storetest.NewJob("acme", job.LaneInteractive, "free"))
		waitFinal(t, base, time.Minute)
		mu.Lock()
		defer mu.Unlock()
		if len(starts) != 2 {
			t.Fatalf("%d starts, want 2 (the attempt and its repair)", len(starts))
		}
		gap := starts[1].Sub(answers[0])
		t.Logf("answer to the repair's start: %v (commit %v); %d leases, %d finishes, %d finishes with a lease (%d skipped)",
			gap, commit, s.leases.Load(), s.finishes.Load(), s.finishLease.Load(), s.skippedFinishLeases.Load())
		if gap > commit*3/2 {
			t.Errorf("the repair attempt started %v after the answer, want one commit (%v): the finish that readied it did not lease it", gap, commit)
		}
	})
}
