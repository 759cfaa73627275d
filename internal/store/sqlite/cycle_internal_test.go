package sqlite

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// insertBatchJobs inserts n batch-lane jobs over the five keys k0 to k4 in
// one Insert.
func insertBatchJobs(t *testing.T, s *Store, n int) {
	t.Helper()
	batch := make([]*job.Job, n)
	for k := range batch {
		batch[k] = storetest.NewJob("t", job.LaneBatch, "k"+strconv.Itoa(k%5))
	}
	if _, err := s.Insert(context.Background(), batch, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
}

// CycleJobs is how many jobs one ThroughputCycle runs.
const CycleJobs = 1024

// ThroughputCycle is one op of the writer's work per job in bench
// throughput at its own shape: 16 unpaced keys (one group each), 64
// workers. It inserts CycleJobs jobs in one Insert, then leases them 48 at
// a time and finishes each lease's jobs as successes (to validated) in
// one Finish, as the engine's fetch and finish loops do, with the clock at
// now, and returns the clock after. BenchmarkThroughputCycle (callgrind)
// and BenchmarkThroughputVMSteps (SQLite's bytecode steps) both measure
// it, so their per-job figures are of the same work.
func ThroughputCycle(tb testing.TB, s *Store, now time.Time) time.Time {
	tb.Helper()
	return ThroughputCycleTo(tb, s, now, job.StateValidated)
}

// ThroughputCycleTo is ThroughputCycle with the successes finished to
// state to: published is the engine's finish of a kind without a
// validation step, bench throughput's no-op jobs.
func ThroughputCycleTo(tb testing.TB, s *Store, now time.Time, to job.State) time.Time {
	tb.Helper()
	return throughputCycle(tb, s, now, to, StageFinish)
}

// CycleStage is how far ThroughputCycleStage runs a cycle.
type CycleStage int

// The stages of a cycle, each including the ones before it: the insert,
// the leases, the finishes.
const (
	StageInsert CycleStage = iota
	StageLease
	StageFinish
)

// ThroughputCycleStage is ThroughputCycleTo(validated) run up to stage:
// the per-stage instruction counts are the differences between stages
// (BenchmarkThroughputStages), since callgrind's toggles are confused by
// Go's stack switches. With StageLease the jobs are left running.
func ThroughputCycleStage(tb testing.TB, s *Store, now time.Time, stage CycleStage) time.Time {
	tb.Helper()
	return throughputCycle(tb, s, now, job.StateValidated, stage)
}

func throughputCycle(tb testing.TB, s *Store, now time.Time, to job.State, stage CycleStage) time.Time {
	tb.Helper()
	ctx := context.Background()
	const lease, keys = 48, 16
	batch := make([]*job.Job, CycleJobs)
	for k := range batch {
		batch[k] = storetest.NewJob("t", job.LaneBatch, "k"+strconv.Itoa(k%keys))
	}
	if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
		tb.Fatal(err)
	}
	if stage == StageInsert {
		return now
	}
	for left := CycleJobs; left > 0; {
		now = now.Add(time.Millisecond)
		jobs, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: min(lease, left), LeaseFor: time.Hour, Kinds: []string{"noop"}})
		if err != nil || len(jobs) == 0 {
			tb.Fatalf("lease: %d jobs, %v", len(jobs), err)
		}
		left -= len(jobs)
		if stage == StageFinish {
			finishSucceeded(tb, s, jobs, to, now)
		}
	}
	return now
}

// successes are the transitions that end the leased jobs' attempts as
// successes moving to state to, at now.
func successes(jobs []*job.Job, to job.State, now time.Time) []store.Transition {
	ts := make([]store.Transition, len(jobs))
	for i, j := range jobs {
		ts[i] = store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: to,
			Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassSuccess},
			Keys:   store.KeyEffect{Now: now, Success: true}}
	}
	return ts
}

// finishSucceeded ends the leased jobs as successes moving to state to, in
// one Finish at now, as the engine's finish loop does, and fails tb on any
// error, the call's or a job's.
func finishSucceeded(tb testing.TB, s *Store, jobs []*job.Job, to job.State, now time.Time) {
	tb.Helper()
	errs, err := s.Finish(context.Background(), successes(jobs, to, now))
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range errs {
		if e != nil {
			tb.Fatal(e)
		}
	}
}
