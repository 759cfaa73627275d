package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/sqlite"
)

// interactiveRun is what an interactive stream cost an engine: lease
// calls and the interactive lane's queued stage.
type interactiveRun struct {
	leases, finishLeases, idleProbes int64
	queued                           uint64
	queuedSeconds                    float64
	budget                           engine.BudgetCounts
}

// runInteractiveStream runs, in simulated time, an interactive parent of
// three parts (each 5 ms of handler) every 100 ms for 5 s, with no batch
// work at all, on an engine with the given governor width.
func runInteractiveStream(t *testing.T, batchCPUs int) interactiveRun {
	var out interactiveRun
	synctest.Test(t, func(t *testing.T) {
		raw := newSQLite(t, sqlite.Config{})
		s := &leaseCounting{Store: raw}
		var calls atomic.Int64
		var parents sync.Map // the parents aggregated, each once or more
		sum := sumParts(&calls)
		aggregated := engine.AggregatorFunc(func(ctx context.Context, parent *job.Job, parts []*job.Job) job.Outcome {
			parents.Store(parent.ID, true)
			return sum(ctx, parent, parts)
		})
		part := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			time.Sleep(5 * time.Millisecond)
			return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{"n":1}`)}
		})
		e := start(t, engine.Config{Store: s, Workers: 16, BatchCPUs: batchCPUs, PollInterval: 50 * time.Millisecond,
			Kinds: map[string]engine.Kind{"fetch": {Handler: part, Computes: true},
				"report": {Aggregate: aggregated, PartKinds: []string{"fetch"}, SweepEvery: 500 * time.Millisecond}}})
		for range 50 {
			now := time.Now()
			parent := &job.Job{Kind: "report", Region: "us", Tenant: "acme", Lane: job.LaneInteractive, LimitKeys: []string{"parts:report"}}
			parent.Prepare(uuid.Must(uuid.NewV7()).String(), now, 0, true)
			var parts []*job.Job
			for range 3 {
				p := &job.Job{Kind: "fetch", Region: "us", Tenant: "acme", Lane: job.LaneInteractive, LimitKeys: []string{"fetch"},
					Payload: []byte(`{"n":1}`), ParentID: parent.ID}
				p.Prepare(uuid.Must(uuid.NewV7()).String(), now, 0, false)
				parts = append(parts, p)
			}
			if _, err := e.Jobs().InsertParts(context.Background(), parent, parts, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			e.Notify()
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		// An aggregator may run more than once for one parent (Aggregator):
		// the last part's finish aggregates before its write, and when its
		// guard finds a sibling finished since the read the usual path
		// aggregates again. Count parents, not calls.
		n := 0
		parents.Range(func(any, any) bool { n++; return true })
		if n != 50 || calls.Load() < 50 {
			t.Fatalf("%d parents aggregated in %d calls, want 50", n, calls.Load())
		}
		out.leases, out.finishLeases, out.idleProbes = s.leases.Load(), s.finishes.Load(), s.idleProbes.Load()
		e.Stages(func(lane, stage string, counts []uint64, sum float64) {
			if lane == string(job.LaneInteractive) && stage == engine.StageQueued {
				for _, c := range counts {
					out.queued += c
				}
				out.queuedSeconds = sum
			}
		})
		out.budget = e.BudgetCounts()
	})
	return out
}

// TestIdleGovernorCostsInteractiveNothing: with no batch work at all, an
// interactive stream (its parts of a computing kind, its parents
// aggregated and swept every 500 ms) costs the same lease calls, and
// waits no longer between ready and leased, with the governor at one
// turn as with it off; no lease finds the turn held. This is the engine
// alone: the interactive baseline that `bench batch-isolation` measured
// slower at one turn (docs/benchmarks.md, "Session 16 (s16h1)") is not
// its lease path's doing.
func TestIdleGovernorCostsInteractiveNothing(t *testing.T) {
	t.Parallel()
	// The fetch loop's turns only: how many finishes lease in their write
	// depends on whether the fetch loop was idle at that moment, which
	// real SQLite I/O inside the bubble leaves to the scheduler (99–132
	// of them in either mode, run to run). A turn is a lease, or an idle
	// poll whose read found nothing (s29h5: such a poll used to be an
	// empty lease; it now reads instead). Counted as leases alone, the
	// polls' reads hid in one mode what the other spent on wake-ups that
	// lease unread: under make test's load one turn read 60–65 leases
	// against 54–57 off, the same turns moved between the two kinds
	// (docs/benchmarks.md, "Session 29: the merge (lead)"). Each mode
	// runs three times, interleaved, and the fewest of each are
	// compared: a governor that costs turns costs them in every run.
	const rounds = 3
	var fewestOff, fewestOn int64
	for i := range rounds {
		off := runInteractiveStream(t, -1)
		on := runInteractiveStream(t, 1)
		t.Logf("round %d off: %+v", i+1, off)
		t.Logf("round %d one turn: %+v", i+1, on)
		if t := off.leases + off.idleProbes; i == 0 || t < fewestOff {
			fewestOff = t
		}
		if t := on.leases + on.idleProbes; i == 0 || t < fewestOn {
			fewestOn = t
		}
		if on.queued != off.queued || on.queuedSeconds > off.queuedSeconds+0.001 {
			t.Errorf("one turn: %d jobs queued %.3f s in all, against %d and %.3f s off", on.queued, on.queuedSeconds, off.queued, off.queuedSeconds)
		}
		if on.budget.Capped != 0 || on.budget.Running != 0 {
			t.Errorf("one turn: budget %+v, want no capped lease and no turn held", on.budget)
		}
	}
	if fewestOn > fewestOff+fewestOff/20 {
		t.Errorf("one turn: at fewest %d fetch-loop turns (leases and idle polls' empty reads) in %d runs, against %d off", fewestOn, rounds, fewestOff)
	}
}
