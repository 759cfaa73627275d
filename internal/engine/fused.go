package engine

import (
	"context"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// The last part's finish carries its parent's aggregation. When an
// interactive part's handler returns an outcome that may end it (a
// success, or a failure that is not retried) and every other part of its
// parent is final already, the part is its parent's last open part: the
// engine reads the parent and its parts (off the finish loop, and off the
// hand-off to it: on a goroutine of its own started beside the part's
// handler, readPartsEarly; again after the handler returns only when
// another part was open then), and once the finish decides the part's transition it
// aggregates the parent in memory, the finishing part taken as that
// transition leaves it, and writes the part's finish and the parent's
// guarded advance in one store write (store.Transition.Parent). Apart,
// they were two visits to a single-writer store, the second queued behind
// whatever the batch lane had in the writer's queue: an interactive
// review made four writes (insert, lease, finish, aggregation) and now
// makes three (docs/benchmarks.md, "Session 30 (s30h1)").
//
// Every guarantee of the aggregation stands. Exactly once: the advance is
// the same compare-and-set from accepted, checked in the finish's
// transaction, which also checks that no other part is open or finished
// since the engine read them (a redriven part, a part of another node),
// and writes nothing of the parent when the part's own guard fails (a
// lost lease). At least once: when the fused advance is not written for
// any of those reasons, or the fused path does not apply (an outcome
// that is retried, a part that is not the last, a read that failed), the
// part's finish wakes its parent as before and the aggregation loop, or
// the sweep, aggregates it. A crash before the write loses both (the
// part's lease runs out and it runs again), after it neither.
//
// Only interactive-lane parts take this path: a batch-lane review's parts
// are its batch items, not jobs, and a batch-lane finish is written on
// the batch lane's terms (store.WithLane, the pacer's charge).

// fusedParent is what the engine read of a part's parent when the part
// was its last open one: the parent, its parts as read (the finishing
// one among them, running), the kind that aggregates it, and when the
// reading began.
type fusedParent struct {
	e      *Engine
	k      Kind
	parent *job.Job
	parts  []*job.Job
	read   time.Time
	// begun is when the aggregation began, for its stage.
	begun time.Time
}

// partRead is what a part's early read of its parent found (readParts):
// the fused aggregation when the part was the last open one, or again
// when another part was still open then, and may not be by the time the
// part's handler returns.
type partRead struct {
	f     *fusedParent
	again bool
}

// fusesPart reports whether j may take the fused path: an interactive
// part of one of the engine's aggregating kinds that ends final (a part
// with a Publisher ends validated, not final). Its outcome decides the
// rest (mayEnd).
func (e *Engine) fusesPart(j *job.Job) bool {
	return j.ParentID != "" && j.Lane == job.LaneInteractive && e.serves(job.LaneInteractive) &&
		e.aggregatesPart(j.Kind) && e.cfg.Kinds[j.Kind].Publisher == nil
}

// earlyReadOf returns the channel of j's early read (readPartsEarly),
// holding the engine's wait group for it, or nil when j does not take the
// fused path. run calls it: the worker goroutine that starts the read
// may be abandoned by then (Config.MaxRunTime), and Stop waits for the
// read all the same.
func (e *Engine) earlyReadOf(j *job.Job) chan partRead {
	if !e.fusesPart(j) {
		return nil
	}
	e.wg.Add(1)                   // done by readPartsEarly's goroutine
	return make(chan partRead, 1) // never blocks: no one receives from an abandoned handler's
}

// readPartsEarly reads j's parent and parts into c (from earlyReadOf;
// nothing when nil), for fusedPart, on a goroutine of its own beside j's
// handler: the reads were made after the handler returned, in the worker
// goroutine, before it handed the outcome to the finisher, on every
// interactive review's critical path (docs/benchmarks.md, "Session 37
// (s37h1)"). The worker starts it right before the handler: the read is
// its P's next goroutine, run when the handler first blocks (its provider
// call) unless an idle P takes it, so that it does not take a P from the
// handler's first run, as it did started before the worker. Read early,
// the parts are as they were when the handler began; the finish's write
// checks they are still so (store.ParentAdvance), and nothing else of
// them is used.
func (e *Engine) readPartsEarly(j *job.Job, c chan<- partRead) {
	if c == nil {
		return
	}
	go func() {
		defer e.wg.Done()
		f, again := e.readParts(e.ctx, j)
		c <- partRead{f: f, again: again}
	}()
}

// fusedPart returns the fused aggregation of j's parent when j, whose
// handler returned out, is its parent's last open part; nil when it is
// not, or may not be (then the parent is aggregated the usual way, after
// the finish). early is readPartsEarly's read: it reads again only when
// another part was open when the early read was made (a parent of more
// than one part).
func (e *Engine) fusedPart(j *job.Job, out job.Outcome, early <-chan partRead) *fusedParent {
	if early == nil || !mayEnd(out.Class) {
		return nil
	}
	r := <-early
	if r.again {
		r.f, _ = e.readParts(e.ctx, j)
	}
	return r.f
}

// readParts reads j's parent and parts and returns their fused
// aggregation when j is the parent's last open part; again when it is
// not because another part is open (and may not be later).
func (e *Engine) readParts(ctx context.Context, j *job.Job) (f *fusedParent, again bool) {
	read := e.cfg.Now()
	children, err := e.cfg.Store.List(ctx, store.ListParams{Parent: j.ParentID, Limit: fusedMaxParts + 1})
	if err != nil || len(children) > fusedMaxParts {
		return nil, false
	}
	if !lastOpen(children, j.ID) {
		return nil, slices.ContainsFunc(children, func(c *job.Job) bool { return c.ID == j.ID })
	}
	parent, err := e.cfg.Store.Get(ctx, j.ParentID)
	if err != nil || parent.State != job.StateAccepted || parent.Lane != job.LaneInteractive {
		return nil, false
	}
	k, ok := e.cfg.Kinds[parent.Kind]
	if !ok || k.Aggregate == nil || !isPart(parent, j, k.PartKinds) {
		return nil, false
	}
	return &fusedParent{e: e, k: k, parent: parent, parts: partsAmong(parent, children, k.PartKinds), read: read}, false
}

// fusedMaxParts bounds the parents that take the fused path: every part
// of one that may end reads its siblings to learn whether it is the last
// open one, so with no bound a parent of n parts made n reads of n rows
// (TestFusedReadIsBounded), in the handlers' goroutines, and aggregated
// on the finish loop. A parent with more parts (a large review) is
// aggregated the usual way after its last finish: one write more, small
// beside its parts' own.
const fusedMaxParts = 64

// mayEnd reports whether an outcome of class c may end a job's attempts
// for good (Decide has the last word: a failure within its budget is
// retried instead).
func mayEnd(c job.Class) bool {
	return c == job.ClassSuccess || c == job.ClassPermanent || c == job.ClassInvalidOutput
}

// aggregatesPart reports whether kind is a part kind of one of the
// engine's aggregating kinds.
func (e *Engine) aggregatesPart(kind string) bool {
	for _, name := range e.aggKinds {
		if pk := e.cfg.Kinds[name].PartKinds; len(pk) == 0 || slices.Contains(pk, kind) {
			return true
		}
	}
	return false
}

// lastOpen reports whether every child but id is final.
func lastOpen(children []*job.Job, id string) bool {
	found := false
	for _, c := range children {
		if c.ID == id {
			found = true
		} else if !c.State.Final() {
			return false
		}
	}
	return found
}

// advance aggregates the parent with part ended by t (its transition,
// decided) and returns the parent's advance for t's write; nil when the
// aggregator decided nothing (the parent then waits for its wake-up, as
// any other), or t does not end the part.
func (f *fusedParent) advance(ctx context.Context, t store.Transition) *store.ParentAdvance {
	if !t.To.Final() {
		return nil
	}
	f.begun = f.e.cfg.Now()
	parts := make([]*job.Job, len(f.parts))
	var finishedBy time.Time
	for i, p := range f.parts {
		if p.ID != t.ID {
			parts[i] = p
			if p.FinishedAt.After(finishedBy) {
				finishedBy = p.FinishedAt
			}
			continue
		}
		ended := *p // the part as t leaves it
		ended.State, ended.Reason, ended.Attempts, ended.FinishedAt = t.To, t.Reason, t.Attempts, t.Keys.Now
		ended.LeaseToken, ended.LeaseExpiresAt = "", time.Time{}
		if t.Result != nil {
			ended.Result = t.Result
		}
		parts[i] = &ended
	}
	o := f.e.aggregate(ctx, f.k, f.parent, parts)
	crashpoint.Hit(crashpoint.PartsBeforeAdvance)
	p, ok := advanceOf(f.parent, o, parts, t.Keys.Now)
	if !ok {
		return nil
	}
	p.Publish = p.To == job.StateValidated && !delivers(f.k.Publisher, f.parent)
	return &store.ParentAdvance{Advance: p, PartKinds: f.k.PartKinds, FinishedBy: finishedBy}
}

// advanced does what follows the parent's advance j, written with its
// last part's finish: what prepareWith's write does after Jobs.Advance.
func (f *fusedParent) advanced(pa *store.ParentAdvance) {
	e, j := f.e, pa.Job
	e.log.Info("parent aggregated", "job_id", j.ID, "kind", j.Kind, "parts", len(f.parts), "state", j.State, "with", "its last part's finish")
	now := e.cfg.Now()
	e.observeStage(j.ID, "", "", j.Lane, stAggregateWait, f.begun, f.begun) // woken by nothing: aggregated at once
	e.observeStage(j.ID, "", "", j.Lane, stAggregate, f.begun, now)
	switch {
	case j.State == job.StateValidated:
		e.queuePublish(j.ID, j.Lane) // as a finished part's: a full queue is retried by the reap tick
	case pa.Advance.Publish && j.State == job.StatePublished:
		e.observePublication(j.Kind, PublishPublished)
	}
}
