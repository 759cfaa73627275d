package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
)

// leaseCounting is a SQLite store that counts its lease calls: Lease
// calls and those that returned no job; FinishLease calls (finishes), those
// that asked for jobs (p.Max > 0) and those of them that returned none;
// MayLease reads and those that found nothing to lease (the idle poll did
// not lease). It embeds the *sqlite.Store, so the engine sees every
// optional interface the store has.
type leaseCounting struct {
	*sqlite.Store
	leaseTally
	finishes, finishLeases, finishEmpty, reads, idleProbes atomic.Int64
}

// leaseTally counts a store's Lease calls (leases) and those that took
// nothing (empty): leaseCounting's and leaseCounter's Lease count through it.
type leaseTally struct{ leases, empty atomic.Int64 }

// count tallies one Lease call's answer and passes it on.
func (t *leaseTally) count(jobs []*job.Job, err error) ([]*job.Job, error) {
	t.leases.Add(1)
	if err == nil && len(jobs) == 0 {
		t.empty.Add(1)
	}
	return jobs, err
}

func (s *leaseCounting) MayLease(ctx context.Context, p store.LeaseParams) (bool, error) {
	s.reads.Add(1)
	may, err := s.Store.MayLease(ctx, p)
	if err == nil && !may {
		s.idleProbes.Add(1)
	}
	return may, err
}

func (s *leaseCounting) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	return s.count(s.Store.Lease(ctx, p))
}

func (s *leaseCounting) FinishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	errs, jobs, err := s.Store.FinishLease(ctx, ts, p)
	s.finishes.Add(1)
	if p.Max > 0 {
		s.finishLeases.Add(1)
		if err == nil && len(jobs) == 0 {
			s.finishEmpty.Add(1)
		}
	}
	return errs, jobs, err
}

// sweepRun is what an interactive stream cost beside a batch sweep.
type sweepRun struct {
	leases, empty, finishLeases, finishEmpty int64
	reads                                    int64 // MayLease reads
	swept                                    int64 // sweep jobs run in the window
	reviews                                  int
}

// runBesideSweep runs, in simulated time, an interactive parent of one
// part every 100 ms for 3 s while a batch sweep of computing jobs (each
// 20 ms of handler) keeps the governor's one turn busy, in one engine.
func runBesideSweep(t *testing.T) sweepRun {
	var out sweepRun
	synctest.Test(t, func(t *testing.T) {
		raw := newSQLite(t, sqlite.Config{})
		s := &leaseCounting{Store: raw}
		var calls, swept atomic.Int64
		work := func(d time.Duration) engine.HandlerFunc {
			return func(_ context.Context, j *job.Job) job.Outcome {
				if j.Lane == job.LaneBatch {
					swept.Add(1)
				}
				time.Sleep(d)
				return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{"n":1}`)}
			}
		}
		e := start(t, engine.Config{Store: s, Workers: 16, BatchCPUs: 1, PollInterval: 50 * time.Millisecond,
			Kinds: map[string]engine.Kind{"fetch": {Handler: work(5 * time.Millisecond), Computes: true},
				"crunch": {Handler: work(20 * time.Millisecond), Computes: true},
				"report": {Aggregate: sumParts(&calls), PartKinds: []string{"fetch"}, SweepEvery: 500 * time.Millisecond},
				"hook":   {Handler: work(time.Millisecond)}}}) // takes no turn: a poll with none free may lease it
		var sweep []*job.Job
		for range 400 {
			j := &job.Job{Kind: "crunch", Region: "us", Tenant: "acme", Lane: job.LaneBatch, LimitKeys: []string{"crunch"}, Payload: []byte(`{}`)}
			j.Prepare(uuid.Must(uuid.NewV7()).String(), time.Now(), 0, false)
			sweep = append(sweep, j)
		}
		if _, err := e.Jobs().Insert(context.Background(), sweep, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		l0, e0, f0, fe0, s0, r0 := s.leases.Load(), s.empty.Load(), s.finishLeases.Load(), s.finishEmpty.Load(), swept.Load(), s.reads.Load()
		const reviews = 30
		for range reviews {
			now := time.Now()
			parent := &job.Job{Kind: "report", Region: "us", Tenant: "acme", Lane: job.LaneInteractive, LimitKeys: []string{"parts:report"}}
			parent.Prepare(uuid.Must(uuid.NewV7()).String(), now, 0, true)
			p := &job.Job{Kind: "fetch", Region: "us", Tenant: "acme", Lane: job.LaneInteractive, LimitKeys: []string{"fetch"},
				Payload: []byte(`{"n":1}`), ParentID: parent.ID}
			p.Prepare(uuid.Must(uuid.NewV7()).String(), now, 0, false)
			if _, err := e.Jobs().InsertParts(context.Background(), parent, []*job.Job{p}, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			e.Notify()
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		if n := calls.Load(); n != reviews {
			t.Fatalf("%d parents aggregated, want %d", n, reviews)
		}
		out = sweepRun{leases: s.leases.Load() - l0, empty: s.empty.Load() - e0,
			finishLeases: s.finishLeases.Load() - f0, finishEmpty: s.finishEmpty.Load() - fe0, swept: swept.Load() - s0, reads: s.reads.Load() - r0, reviews: reviews}
	})
	return out
}

// TestSweepPollsLeaseOnlyWhatTheyCanTake: beside a batch sweep that
// holds the governor's one turn, an idle poll whose read finds only the
// sweep's jobs ready does not lease (the lease could take none of them
// with no turn free, and took nothing: a write through SQLite's one
// writer). On main 38 of 105 leases for 30 reviews were empty, 25 of them
// polls' with no turn; with the turn-aware read 8 of 75, none a poll's,
// and the sweep took as many jobs (40) in the window. Its polls read
// MayLease at most twice, once when the lease may take something.
func TestSweepPollsLeaseOnlyWhatTheyCanTake(t *testing.T) {
	t.Parallel()
	r := runBesideSweep(t)
	t.Logf("%+v", r)
	if r.empty*2 > int64(r.reviews) {
		t.Errorf("%d of %d leases empty for %d interactive reviews beside a sweep, want at most one per two reviews", r.empty, r.leases, r.reviews)
	}
	// A poll with no turn free reads once for what its lease could take
	// (the interactive lane and the turnless hook kind together), and once
	// more only when that finds nothing: 71-75 reads here, where one read
	// per lane or kind set made 100-102 (docs/benchmarks.md, "Session 31
	// (s31h2)"). Each review's insert leases its part in its own write, and
	// the wake-up its Notify brings reads once instead of leasing (a
	// write): 30 more reads, 104 in all, against 130 when that wake-up read
	// as a poll does (twice), and 75 leases when it leased.
	if r.reads > 4*int64(r.reviews) {
		t.Errorf("%d MayLease reads for %d interactive reviews beside a sweep, want at most 4 per review", r.reads, r.reviews)
	}
	if r.leases*2 > 3*int64(r.reviews) {
		t.Errorf("%d leases for %d interactive reviews beside a sweep, want at most 1.5 per review (the insert leases its part)", r.leases, r.reviews)
	}
}
