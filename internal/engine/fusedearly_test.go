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
)

// parentReads is a store that records, for one parent, the reads of it
// and its parts (List of its children, Get of it): how many, how many
// began after a part's handler returned (returned), how many of its
// parts' lists were done (listed, with a channel closed at each count
// asked for by listedN) and when its first Get was done (got); its
// advances by Store.Advance (the aggregation loop's) and by a part's
// finish (fused, store.Transition.Parent written).
type parentReads struct {
	*leaseCounter
	parent                  string
	returned                atomic.Bool
	reads, afterReturn      atomic.Int64
	advances, fused, listed atomic.Int64

	mu     sync.Mutex
	wait   map[int64]chan struct{}
	got    chan struct{}
	gotOne sync.Once
	// holdFirst, when set, holds the first Get of the parent, once done,
	// until it is closed.
	holdFirst <-chan struct{}
}

func newParentReads(s store.Store, parent string) *parentReads {
	return &parentReads{leaseCounter: &leaseCounter{Store: s}, parent: parent, wait: map[int64]chan struct{}{}, got: make(chan struct{})}
}

// listedN is closed once n lists of the parent's parts are done.
func (r *parentReads) listedN(n int64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.wait[n]
	if !ok {
		c = make(chan struct{})
		r.wait[n] = c
		if r.listed.Load() >= n {
			close(c)
		}
	}
	return c
}

func (r *parentReads) read() {
	r.reads.Add(1)
	if r.returned.Load() {
		r.afterReturn.Add(1)
	}
}

func (r *parentReads) List(ctx context.Context, p store.ListParams) ([]*job.Job, error) {
	if p.Parent != r.parent {
		return r.leaseCounter.List(ctx, p)
	}
	r.read()
	js, err := r.leaseCounter.List(ctx, p)
	r.mu.Lock()
	n := r.listed.Add(1)
	if c, ok := r.wait[n]; ok {
		close(c)
	} else {
		r.wait[n] = closed()
	}
	r.mu.Unlock()
	return js, err
}

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (r *parentReads) Get(ctx context.Context, id string) (*job.Job, error) {
	if id != r.parent {
		return r.leaseCounter.Get(ctx, id)
	}
	r.read()
	j, err := r.leaseCounter.Get(ctx, id)
	first := false
	r.gotOne.Do(func() { close(r.got); first = true })
	if first && r.holdFirst != nil {
		orTimeout(r.holdFirst)
	}
	return j, err
}

func (r *parentReads) Advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	if p.ID == r.parent {
		r.advances.Add(1)
	}
	return r.leaseCounter.Advance(ctx, p)
}

func (r *parentReads) countFused(ts []store.Transition) {
	for _, t := range ts {
		if t.Parent != nil && t.Parent.Job != nil {
			r.fused.Add(1)
		}
	}
}

func (r *parentReads) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	errs, err := r.leaseCounter.Finish(ctx, ts)
	r.countFused(ts)
	return errs, err
}

func (r *parentReads) FinishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	errs, js, err := r.leaseCounter.FinishLease(ctx, ts, p)
	r.countFused(ts)
	return errs, js, err
}

// finishedLog is an engine.Observer that closes a channel when the job
// it names is finished (its finish written).
type finishedLog struct {
	id   string
	done chan struct{}
	once sync.Once
}

func (l *finishedLog) Finished(j *job.Job, _ job.Outcome, _ store.Transition) {
	if j.ID == l.id {
		l.once.Do(func() { close(l.done) })
	}
}
func (*finishedLog) Leased(int) {}

// orTimeout waits for c, or a minute of the bubble's fake time: what a
// test waits for when the engine does not do what the test asserts, so
// that it fails rather than hangs.
func orTimeout(c <-chan struct{}) {
	select {
	case <-c:
	case <-time.After(time.Minute):
	}
}

// runFused starts an engine on r whose "fetch" parts run handle and
// whose "report" parents sum their parts (calls counts the
// aggregations), and inserts parent and its parts into it.
func runFused(t *testing.T, r *parentReads, obs engine.Observer, calls *atomic.Int64, parent *job.Job, parts []*job.Job, handle func(*job.Job)) {
	t.Helper()
	fetch := engine.Kind{Handler: engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
		handle(j)
		out := fetchKind.Handler.Handle(ctx, j)
		r.returned.Store(true)
		return out
	})}
	e := start(t, engine.Config{Store: r, PollInterval: time.Hour, Observer: obs, Kinds: map[string]engine.Kind{
		"fetch":  fetch,
		"report": {Aggregate: sumParts(calls), PartKinds: []string{"fetch"}, SweepEvery: time.Hour},
	}})
	synctest.Wait()
	if _, err := e.Jobs().InsertParts(context.Background(), parent, parts, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	e.Notify()
}

// TestFusedReadsBesideHandler: an interactive part's reads of its parent
// and its parts, which tell whether it is the last open one and carry
// the parent's aggregation into its finish (fused.go), are made beside
// its handler, not after it returns, when the worker goroutine hands the
// outcome to the finisher: none of them begins after the handler
// returned. A one-part parent still aggregates with its part's finish
// (no Store.Advance), in two reads. The handler returns once the reads
// are done (or a minute of fake time later, when they are not made
// beside it).
func TestFusedReadsBesideHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		parent, parts := interactiveParent(1)
		r := newParentReads(s, parent.ID)
		var calls atomic.Int64
		runFused(t, r, nil, &calls, parent, parts, func(*job.Job) { orTimeout(r.got) })
		waitState(t, s, parent.ID, job.StatePublished)
		synctest.Wait()
		t.Logf("%d reads of the parent and its parts, %d after the handler returned; %d fused advances, %d by the aggregation loop",
			r.reads.Load(), r.afterReturn.Load(), r.fused.Load(), r.advances.Load())
		if n := r.afterReturn.Load(); n != 0 {
			t.Errorf("%d reads of the parent or its parts began after the part's handler returned, want 0", n)
		}
		if r.fused.Load() != 1 || r.advances.Load() != 0 || calls.Load() != 1 {
			t.Errorf("parent advanced %d times with its part's finish and %d times by the aggregation loop (%d aggregations), want once with the finish", r.fused.Load(), r.advances.Load(), calls.Load())
		}
		if n := r.reads.Load(); n != 2 {
			t.Errorf("%d reads of the parent and its parts, want 2 (its parts, itself)", n)
		}
	})
}

// TestFusedEarlyReadOfOpenSibling: a part whose early read found another
// part open reads again when its handler returns, and, the other part
// final by then, carries the parent's aggregation in its finish. Each
// part's early read sees the other running; the second part returns
// first (its read again finds the first open: no fused advance), and
// the first returns once the second's finish is written.
func TestFusedEarlyReadOfOpenSibling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		runTwoParts(t, 1, false, func(_ *parentReads, obs *finishedLog) <-chan struct{} { return obs.done })
	})
}

// TestWokenAggregationReadsPartsFirst: a parent woken by a part's finish
// while its other part is running, whose last part then advances it with
// its own finish (fused.go) while the woken aggregation reads, is
// aggregated once. Here the woken aggregation's read of the parent is
// done first and held until the last part's finish (with the parent's
// advance) is written: an aggregation that read the parent (accepted)
// before its parts found them all final and aggregated it a second time,
// to lose the compare-and-set; one that reads the parts first finds the
// last one running and leaves the parent to its finish. parentReads is
// no store.ParentsReader, so this is the two-statement read of a store
// without one; on one, the parent and its parts are one snapshot
// (TestWokenInteractiveParentReadOnce).
func TestWokenAggregationReadsPartsFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// The first part returns once the second finished and woke the
		// parent, whose aggregation read it (the parent's first Get).
		runTwoParts(t, 0, true, func(r *parentReads, _ *finishedLog) <-chan struct{} { return r.got })
	})
}

// runTwoParts runs a parent of two interactive parts whose handlers each
// wait for both parts' early reads (each then sees the other running); the
// first part's handler then waits for what firstWaits returns too. obs
// tells when parts[finished]'s finish is written; with hold, the parent's
// first Get is held until then. It fails t unless the parent, once
// published, was aggregated exactly once, with its last part's finish.
func runTwoParts(t *testing.T, finished int, hold bool, firstWaits func(*parentReads, *finishedLog) <-chan struct{}) {
	t.Helper()
	s := newStore(t)
	parent, parts := interactiveParent(2)
	r := newParentReads(s, parent.ID)
	obs := &finishedLog{id: parts[finished].ID, done: make(chan struct{})}
	if hold {
		r.holdFirst = obs.done
	}
	var calls atomic.Int64
	runFused(t, r, obs, &calls, parent, parts, func(j *job.Job) {
		orTimeout(r.listedN(2))
		if j.ID == parts[0].ID {
			orTimeout(firstWaits(r, obs))
		}
	})
	waitState(t, s, parent.ID, job.StatePublished)
	synctest.Wait()
	t.Logf("%d lists of the parts, %d reads in all; %d fused advances, %d by the aggregation loop, %d aggregations",
		r.listed.Load(), r.reads.Load(), r.fused.Load(), r.advances.Load(), calls.Load())
	if r.fused.Load() != 1 || r.advances.Load() != 0 || calls.Load() != 1 {
		t.Errorf("parent advanced %d times with a part's finish and %d times by the aggregation loop (%d aggregations), want once with its last part's finish", r.fused.Load(), r.advances.Load(), calls.Load())
	}
}

// TestFusedEarlyReadStaleParent: the parent changes between its part's
// early read and the part's finish (here another node aggregated it, to
// terminal): the finish's write checks the parent is still accepted and
// writes nothing of it; the part's finish stands and the parent keeps
// what the other node wrote, advanced once.
func TestFusedEarlyReadStaleParent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		parent, parts := interactiveParent(1)
		r := newParentReads(s, parent.ID)
		var calls atomic.Int64
		runFused(t, r, nil, &calls, parent, parts, func(*job.Job) {
			orTimeout(r.got)
			if _, err := s.Advance(context.Background(), store.AdvanceParams{ID: parent.ID, From: job.StateAccepted, To: job.StateTerminal,
				Reason: job.ReasonPermanentError, Now: time.Now()}); err != nil {
				t.Error(err)
			}
		})
		waitState(t, s, parts[0].ID, job.StatePublished)
		synctest.Wait()
		got, err := s.Get(context.Background(), parent.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != job.StateTerminal || got.Reason != job.ReasonPermanentError || r.fused.Load() != 0 || r.advances.Load() != 0 {
			t.Errorf("parent %s (%s) after %d fused advances and %d by the aggregation loop, want terminal (%s) as the other node left it, advanced by neither",
				got.State, got.Reason, r.fused.Load(), r.advances.Load(), job.ReasonPermanentError)
		}
	})
}
