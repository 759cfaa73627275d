package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/testkit"
)

// TestSweepPassSharesOneMemo: the Aggregators of one periodic sweep pass
// see one SweepMemo (so a plug-in reads what its parents share once per
// pass), each pass a new one (so nothing read is older than its pass), and
// an aggregation outside a sweep none (it reads afresh).
func TestSweepPassSharesOneMemo(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	jobs := writerOn(t, s)
	var ids []string
	for range 3 {
		p := &job.Job{Kind: "report", Region: "us", Tenant: "acme", Lane: job.LaneBatch, LimitKeys: []string{"parts:report"}}
		p.Prepare(uuid.Must(uuid.NewV7()).String(), time.Now(), 0, true)
		if _, err := jobs.InsertParts(ctx, p, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	var (
		mu    sync.Mutex
		memos []*engine.SweepMemo
	)
	pending := engine.AggregatorFunc(func(ctx context.Context, _ *job.Job, _ []*job.Job) job.Outcome {
		mu.Lock()
		memos = append(memos, engine.SweepMemoFrom(ctx))
		mu.Unlock()
		return job.Outcome{Class: job.ClassPending, Err: "waiting on something that is not a job"}
	})
	// Not started: only the calls below aggregate.
	e, err := engine.New(engine.Config{Store: s, Region: "us", Kinds: map[string]engine.Kind{"report": {Aggregate: pending}}})
	if err != nil {
		t.Fatal(err)
	}
	pass := func() []*engine.SweepMemo {
		t.Helper()
		mu.Lock()
		memos = nil
		mu.Unlock()
		if err := e.SweepParents(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return memos
	}
	first, second := pass(), pass()
	if len(first) != 3 || len(second) != 3 {
		t.Fatalf("passes asked %d and %d parents, want 3 each", len(first), len(second))
	}
	for _, ms := range [][]*engine.SweepMemo{first, second} {
		if ms[0] == nil || ms[1] != ms[0] || ms[2] != ms[0] {
			t.Fatalf("one pass's memos %p, want one non-nil memo shared by its parents", ms)
		}
	}
	if first[0] == second[0] {
		t.Fatal("two passes shared a memo; each pass must read afresh")
	}
	memos = nil
	if err := e.AggregateParent(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if len(memos) != 1 || memos[0] != nil {
		t.Fatalf("an aggregation outside a sweep saw memos %p, want one nil", memos)
	}

	// Load calls its loader once per key and pass.
	m := engine.SweepMemoFrom(engine.WithSweepMemo(ctx))
	loads := 0
	for range 3 {
		v, err := m.Load("batch-1", func() (any, error) { loads++; return loads, nil })
		if err != nil || v != 1 {
			t.Fatalf("Load = %v, %v; want the first load's 1", v, err)
		}
	}
	if loads != 1 {
		t.Fatalf("the loader ran %d times, want 1", loads)
	}
}

// TestWokenBatchGroupSharesOneGroupMemo: the Aggregators of a woken batch
// group see one GroupMemo (so a plug-in reads what the group's parents
// share, a batch's head, once per group), a sweep pass and a direct
// AggregateParent none; and GroupMemo.Load remembers a value, not an
// error.
func TestWokenBatchGroupSharesOneGroupMemo(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	const n = 8
	ids := insertBatchParents(t, s, n)
	var (
		mu     sync.Mutex
		memos  = map[string]*engine.GroupMemo{}
		swept  int
		wakeup bool
	)
	agg := engine.AggregatorFunc(func(ctx context.Context, parent *job.Job, _ []*job.Job) job.Outcome {
		mu.Lock()
		defer mu.Unlock()
		if !wakeup {
			swept++
			if engine.GroupMemoFrom(ctx) != nil {
				t.Errorf("parent %s aggregated with a group memo outside a woken group", parent.ID)
			}
			return job.Outcome{Class: job.ClassPending}
		}
		memos[parent.ID] = engine.GroupMemoFrom(ctx)
		return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{}`)}
	})
	e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"report": {Aggregate: agg, SweepEvery: time.Hour}}})
	testkit.Eventually(t, time.Minute, "the start sweep", func() error {
		mu.Lock()
		defer mu.Unlock()
		if swept < n {
			return fmt.Errorf("%d of %d parents swept", swept, n)
		}
		return nil
	})
	if err := e.AggregateParent(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	wakeup = true
	mu.Unlock()
	for _, id := range ids {
		e.Jobs().PartsChangedIn(id, job.LaneBatch)
	}
	for _, id := range ids {
		waitState(t, s, id, job.StatePublished)
	}
	mu.Lock()
	defer mu.Unlock()
	distinct := map[*engine.GroupMemo]int{}
	for _, id := range ids {
		m, ok := memos[id]
		if !ok || m == nil {
			t.Fatalf("woken parent %s aggregated without a group memo (%v)", id, ok)
		}
		distinct[m]++
	}
	if len(distinct) == n {
		t.Fatalf("%d woken parents in %d groups: no two shared a memo", n, len(distinct))
	}

	m := engine.GroupMemoFrom(engine.WithGroupMemo(ctx))
	loads := 0
	for range 2 {
		if _, err := m.Load("head", func() (any, error) { loads++; return nil, errors.New("not recorded yet") }); err == nil {
			t.Fatal("Load returned no error from a failing load")
		}
	}
	for range 2 {
		if v, err := m.Load("head", func() (any, error) { loads++; return loads, nil }); err != nil || v != 3 {
			t.Fatalf("Load = %v, %v; want the first successful load's 3", v, err)
		}
	}
	if loads != 3 {
		t.Fatalf("the loader ran %d times, want 3 (each failure, then one success)", loads)
	}
}
