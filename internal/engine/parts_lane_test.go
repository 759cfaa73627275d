package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
)

// laneAggregator records the parents it is asked about, in order, and
// holds the call for the parent named by hold (any parent for "first")
// until release is closed (entered is
// closed when it starts waiting). Batch-lane parents named in pending
// stay accepted (ClassPending, as a batch review waiting on its items
// does); every other parent succeeds.
type laneAggregator struct {
	mu      sync.Mutex
	calls   []string
	hold    string
	entered chan struct{}
	release chan struct{}
	pending map[string]bool
	// grouped counts the aggregations in a woken batch group
	// (engine.GroupMemoFrom); unnamed lists those of them whose parent
	// the group's memo does not name (GroupMemo.Parents).
	grouped int
	unnamed []string
}

func (a *laneAggregator) Aggregate(ctx context.Context, parent *job.Job, _ []*job.Job) job.Outcome {
	a.mu.Lock()
	a.calls = append(a.calls, parent.ID)
	if m := engine.GroupMemoFrom(ctx); m != nil {
		a.grouped++
		if !slices.Contains(m.Parents(), parent.ID) {
			a.unnamed = append(a.unnamed, parent.ID)
		}
	}
	hold, pending := a.hold == parent.ID || a.hold == "first", a.pending[parent.ID]
	if hold {
		a.hold = ""
	}
	a.mu.Unlock()
	if hold {
		close(a.entered)
		<-a.release
	}
	if pending {
		return job.Outcome{Class: job.ClassPending}
	}
	return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{}`)}
}

func (a *laneAggregator) log() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// pendingSwept waits for the engine's start sweep to have asked a about n
// parents (each left waiting, pending), then makes every parent's items
// final: a wake-up from then on aggregates it.
func (a *laneAggregator) pendingSwept(t *testing.T, n int) {
	t.Helper()
	testkit.Eventually(t, time.Minute, "the start sweep", func() error {
		if got := len(a.log()); got < n {
			return fmt.Errorf("%d of %d parents swept", got, n)
		}
		return nil
	})
	a.mu.Lock()
	a.pending = nil // their items are final now
	a.mu.Unlock()
}

func parentIn(lane job.Lane) *job.Job {
	p := &job.Job{Kind: "report", Region: "us", Tenant: "acme", Lane: lane, LimitKeys: []string{"parts:report"}}
	p.Prepare(uuid.Must(uuid.NewV7()).String(), time.Now(), 0, true)
	return p
}

// TestPartsInteractiveNotBehindBatch: while a batch-lane parent's
// aggregation is held, five more batch-lane parents and then one
// interactive parent are woken; the interactive one is aggregated and
// published while the batch one is still held (the lanes have their own
// aggregation loops), and every batch parent is published once released.
func TestPartsInteractiveNotBehindBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		agg := &laneAggregator{entered: make(chan struct{}), release: make(chan struct{})}
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"report": {Aggregate: agg, SweepEvery: time.Hour}}})
		synctest.Wait() // past the start sweep
		insert := func(p *job.Job) {
			t.Helper()
			if _, err := e.Jobs().InsertParts(ctx, p, nil, admission.Config{}); err != nil {
				t.Fatal(err)
			}
		}
		busy := parentIn(job.LaneBatch)
		agg.mu.Lock()
		agg.hold = busy.ID
		agg.mu.Unlock()
		insert(busy) // no parts: woken at once, and held
		<-agg.entered
		var batch []string
		for range 5 {
			p := parentIn(job.LaneBatch)
			insert(p)
			batch = append(batch, p.ID)
		}
		inter := parentIn(job.LaneInteractive)
		insert(inter)
		waitState(t, s, inter.ID, job.StatePublished)
		if got := agg.log(); !slices.Equal(got, []string{busy.ID, inter.ID}) {
			t.Fatalf("aggregated %v while the batch parent was held; want the held one, then the interactive one", got)
		}
		close(agg.release)
		for _, id := range append([]string{busy.ID}, batch...) {
			waitState(t, s, id, job.StatePublished)
		}
	})
}

// TestPartsSweepDoesNotHoldInteractive: a periodic sweep over many
// batch-lane parents that are still waiting (a sweep's batch reviews),
// held at its first parent, does not hold back an interactive parent
// woken meanwhile: it is published before the held parent returns.
func TestPartsSweepDoesNotHoldInteractive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		// The waiting parents come from another writer (another process),
		// so only the sweep finds them.
		other := writerOn(t, s)
		agg := &laneAggregator{entered: make(chan struct{}), release: make(chan struct{}), pending: map[string]bool{}}
		var waiting []string
		for range 20 {
			p := parentIn(job.LaneBatch)
			if _, err := other.InsertParts(ctx, p, nil, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			waiting = append(waiting, p.ID)
			agg.pending[p.ID] = true
		}
		agg.hold = "first"
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"report": {Aggregate: agg, SweepEvery: time.Hour}}})
		<-agg.entered // the start sweep, at its first parent
		inter := parentIn(job.LaneInteractive)
		if _, err := e.Jobs().InsertParts(ctx, inter, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		waitState(t, s, inter.ID, job.StatePublished)
		// A stretch's parents are aggregated concurrently (session 20), so
		// the rest of the first stretch may have been asked too; what
		// matters is that the interactive parent did not wait for the
		// held one.
		got := agg.log()
		if len(got) < 2 || !slices.Contains(got, inter.ID) || !slices.Contains(waiting, got[0]) {
			t.Fatalf("aggregated %v while the sweep was held; want a waiting parent (held) and the interactive %s", got, inter.ID)
		}
		for _, id := range got {
			if id != inter.ID && !slices.Contains(waiting, id) {
				t.Fatalf("aggregated %s, neither a waiting parent nor the interactive one", id)
			}
		}
		close(agg.release)
		synctest.Wait()
		if got := agg.log(); len(got) != len(waiting)+1 {
			t.Fatalf("aggregated %d parents, want the %d waiting ones and the interactive one", len(got), len(waiting))
		}
		for _, id := range waiting {
			if j, err := s.Get(ctx, id); err != nil || j.State != job.StateAccepted {
				t.Fatalf("waiting parent %s: %v, %v; want it still accepted", id, j, err)
			}
		}
	})
}

// TestPartsBatchWakeupsShareCommits: batch-lane parents woken together
// (a provider batch's results settled at once) are aggregated as a group,
// so their advances, publication claims and publications share the
// SQLite writer's transactions instead of taking three commits each.
// With the CPU governor on (BatchCPUs) the group's aggregations run
// BatchCPUs at a time and share fewer commits (4.6 per parent at one, on
// this test); the test keeps it off to check the grouping itself.
func TestPartsBatchWakeupsShareCommits(t *testing.T) {
	t.Parallel()
	// With the CPU governor off, and at one turn (its default on a 2-CPU
	// machine, DefaultBatchCPUs): a group took a turn per parent until
	// session 20, so under the governor its parents were aggregated one at
	// a time and every advance was its own transaction.
	for _, cpus := range []int{-1, 1} {
		t.Run(fmt.Sprintf("BatchCPUs=%d", cpus), func(t *testing.T) {
			t.Parallel()
			batchWakeupsShareCommits(t, engine.Config{BatchCPUs: cpus})
		})
	}
}

// batchWakeupsShareCommits wakes 64 ready batch-lane parents at once in an
// engine configured by cfg and bounds the store transactions their
// advances, claims and publications took.
func batchWakeupsShareCommits(t *testing.T, cfg engine.Config) {
	s := newStore(t)
	const n = 64
	ids := insertBatchParents(t, s, n)
	agg := &laneAggregator{entered: make(chan struct{}), release: make(chan struct{}), pending: map[string]bool{}}
	for _, id := range ids {
		agg.pending[id] = true // the start sweep leaves them waiting
	}
	cfg.Store = s
	cfg.Kinds = map[string]engine.Kind{"report": {Aggregate: agg, SweepEvery: time.Hour}}
	e := start(t, cfg)
	agg.pendingSwept(t, n)
	wc := s.(store.WriteCounter)
	before := wc.WriteCounts()
	for _, id := range ids {
		e.Jobs().PartsChangedIn(id, job.LaneBatch)
	}
	for _, id := range ids {
		waitState(t, s, id, job.StatePublished)
	}
	after := wc.WriteCounts()
	writes, txs := after.Writes-before.Writes, after.Transactions-before.Transactions
	t.Logf("%d batch parents: %d writes in %d transactions (%.2f transactions per parent)", n, writes, txs, float64(txs)/n)
	// An advance each, which since session 29 records the publication
	// too; no claim since session 20 (the kind has no Publisher: nothing
	// to deliver, nothing to claim).
	if writes < n {
		t.Fatalf("%d writes for %d parents; want at least an advance each", writes, n)
	}
	// One parent at a time, every write is its own transaction (344
	// transactions for these 64 before grouping; 195, 3 per parent, with
	// batchAggregateGroup set to 1). A group of 32 shares its advances
	// and, since session 20, its publications, which the batch loop runs
	// in the group's turn rather than through the pool: 14–16
	// transactions unloaded, with the governor off or at one turn (before
	// session 20, at one turn, 198: the group ran a parent per turn). The
	// bound, one per parent, is what grouping must keep under a loaded
	// machine's scheduling; without it each parent takes two or three.
	if txs > n {
		t.Fatalf("%d transactions for %d parents' %d writes; want them grouped (at most 1 transaction per parent)", txs, n, writes)
	}
}

// insertBatchParents inserts n batch-lane parents without parts and
// returns their ids. They come from another writer than the engine under
// test, so nothing wakes them until the test does.
func insertBatchParents(t *testing.T, s store.Store, n int) []string {
	t.Helper()
	return insertParentsIn(t, s, job.LaneBatch, n)
}

// insertParentsIn is insertBatchParents for parents of lane.
func insertParentsIn(t *testing.T, s store.Store, lane job.Lane, n int) []string {
	t.Helper()
	other := writerOn(t, s)
	var ids []string
	for range n {
		p := parentIn(lane)
		if _, err := other.InsertParts(context.Background(), p, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	return ids
}
