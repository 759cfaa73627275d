package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Parts and aggregation: a parent job is inserted accepted together with
// its parts (child jobs, waiting, ParentID = the parent) in one write
// (Jobs.InsertParts). Parts run as ordinary jobs of their own kinds. When
// every part is final (published or terminal) the engine that runs the
// parent's kind calls the kind's Aggregator with the parent and its parts
// and writes the outcome it returns as the parent's guarded advance out of
// accepted: success to validated (then published once, by the kind's
// Publisher when it has one), a permanent failure to terminal.
//
// Exactly once: the advance is a compare-and-set from accepted, so of any
// number of engines (nodes) that aggregate the same parent at once one
// writes and the others get ErrConflict and change nothing. At least once:
// the engine is woken when its writer records a part's final transition,
// and it also sweeps the accepted parents of its aggregating kinds that
// have no open part (Store.ReadyParents) every Kind.SweepEvery: a wake-up
// lost with a full queue, an aggregation that failed, or a part finished
// by another process is repaired by the next pass or the one after, and
// a crash (kill -9) between the last part's transition and the parent's
// advance by the walk of every parent at start and every 15 passes
// (sweepParents states exactly what each finds). The aggregator may
// therefore run more than once for one parent
// (after a crash, or on two nodes at once); it must be a function of the
// parent and its parts, with no side effect of its own. Side effects
// belong to the kind's Publisher, which runs once the advance is written.

// Aggregator computes a parent job's outcome from its parts, every one of
// them final (published with its result, or terminal with its reason).
// Its outcome is the parent's: a success (with the parent's Result) makes
// the parent validated and then published; ClassPermanent or
// ClassInvalidOutput make it terminal with the outcome's Reason (default
// permanent_error) and, when the outcome has one, its Result; any other
// class decides nothing and leaves the parent accepted: a read that
// failed (ClassTransient, logged as a warning) is asked again at the next
// sweep pass; a parent that also waits on something that is not a job at
// its next wake-up (Jobs.PartsChanged), or the next walk of every parent
// (sweepParents). It may be called more than once for one parent and
// must have no side effect.
type Aggregator interface {
	Aggregate(ctx context.Context, parent *job.Job, parts []*job.Job) job.Outcome
}

// AggregatorFunc adapts a function to Aggregator.
type AggregatorFunc func(ctx context.Context, parent *job.Job, parts []*job.Job) job.Outcome

// Aggregate calls f.
func (f AggregatorFunc) Aggregate(ctx context.Context, parent *job.Job, parts []*job.Job) job.Outcome {
	return f(ctx, parent, parts)
}

// DefaultSweepEvery is Kind.SweepEvery's default: how often an engine's
// sweep pass re-checks the parents of a kind with an Aggregator
// (sweepParents).
const DefaultSweepEvery = 2 * time.Second

// ErrPartsNotFinal is the error of a redriven parent leased while some of
// its parts are not final yet (see Kind.Aggregate).
var ErrPartsNotFinal = errors.New("parts are not all final")

// InsertParts durably inserts parent (prepared accepted) and its parts
// (prepared waiting) in one store write, all or none, with def
// configuring limit keys first seen. Every part must name the parent as
// its ParentID and share its tenant and region. A part with no
// idempotency key gets one derived from the parent's (when it has one),
// so a replayed insert dedupes its parts as well as the parent. A parent
// with no parts is aggregated at once. The first result is the parent's.
func (w *Jobs) InsertParts(ctx context.Context, parent *job.Job, parts []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	return w.InsertPartsWithObjects(ctx, nil, parent, parts, def)
}

// InsertPartsWithObjects is InsertParts with objs, the objects the parent
// and its parts reference (a review's diff and its parts' texts), stored
// in the same write first (store.ObjectsBulk.InsertWithObjects): on a
// single-writer store one commit, where storing them apart made the
// parts wait for two before they could be leased. When the writer's
// engine runs interactive parts of theirs and has free worker slots, that
// write also leases them (store.InsertLeaser; insertlease.go), and they
// start as it returns.
func (w *Jobs) InsertPartsWithObjects(ctx context.Context, objs []store.Object, parent *job.Job, parts []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	if parent.State != job.StateAccepted {
		return nil, fmt.Errorf("engine: a parent is inserted accepted, not %s", parent.State)
	}
	for i, p := range parts {
		switch {
		case p.ParentID != parent.ID:
			return nil, fmt.Errorf("engine: part %d names parent %q, not %q", i, p.ParentID, parent.ID)
		case p.Tenant != parent.Tenant || p.Region != parent.Region:
			return nil, fmt.Errorf("engine: part %d is of tenant %q in region %q; its parent's are %q and %q", i, p.Tenant, p.Region, parent.Tenant, parent.Region)
		case p.State != job.StateWaiting:
			return nil, fmt.Errorf("engine: part %d is inserted waiting, not %s", i, p.State)
		}
		if p.IdempotencyKey == "" && parent.IdempotencyKey != "" {
			p.IdempotencyKey = PartIdempotencyKey(parent.IdempotencyKey, i)
		}
	}
	res, err := w.insert(ctx, objs, append([]*job.Job{parent}, parts...), def, true)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		w.partFinal(res[0].Job.ID, parent.Lane)
	}
	return res, nil
}

// PartIdempotencyKey derives part index's idempotency key from its
// parent's: a hash keeps it within the length limit for any parent key.
func PartIdempotencyKey(parentKey string, index int) string {
	sum := sha256.Sum256([]byte(parentKey))
	return "part:" + hex.EncodeToString(sum[:16]) + "/" + strconv.Itoa(index)
}

// Parts returns the parts of parent: its children of the given kinds
// (every child when kinds is empty), newest first as List orders them. A child of another
// tenant or region is not one of its parts (the engine never creates one;
// a forged or buggy row must not change someone else's aggregate) and is
// left out.
func (w *Jobs) Parts(ctx context.Context, parent *job.Job, kinds []string) ([]*job.Job, error) {
	children, err := w.children(ctx, parent.ID)
	if err != nil {
		return nil, err
	}
	return partsAmong(parent, children, kinds), nil
}

// children returns every job naming parentID as its parent, newest first
// as List orders them, page by page.
func (w *Jobs) children(ctx context.Context, parentID string) ([]*job.Job, error) {
	var all []*job.Job
	after := ""
	for {
		js, err := w.cfg.Store.List(ctx, store.ListParams{Parent: parentID, After: after, Limit: store.MaxListLimit})
		if err != nil {
			return nil, err
		}
		all = append(all, js...)
		if len(js) < store.MaxListLimit {
			return all, nil
		}
		after = js[len(js)-1].ID
	}
}

// partsAmong returns those of children that are parent's parts of the
// given kinds (isPart), in their order; it reuses children's array.
func partsAmong(parent *job.Job, children []*job.Job, kinds []string) []*job.Job {
	return slices.DeleteFunc(children, func(c *job.Job) bool { return !isPart(parent, c, kinds) })
}

// isPart reports whether child, a job naming parent as its ParentID, is
// one of parent's parts of the given kinds (Parts).
func isPart(parent, child *job.Job, kinds []string) bool {
	return child.Tenant == parent.Tenant && child.Region == parent.Region && (len(kinds) == 0 || slices.Contains(kinds, child.Kind))
}

// partsOf returns the parts of kinds of each of parents, by parent id, in
// one store read (Store.PartsOf), each parent's newest first as Parts
// returns them.
func (w *Jobs) partsOf(ctx context.Context, parents []*job.Job, kinds []string) (map[string][]*job.Job, error) {
	if len(parents) == 0 {
		return nil, nil
	}
	ids := make([]string, len(parents))
	byID := make(map[string]*job.Job, len(parents))
	for i, p := range parents {
		ids[i], byID[p.ID] = p.ID, p
	}
	children, err := w.cfg.Store.PartsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]*job.Job, len(parents))
	for _, c := range children {
		if p := byID[c.ParentID]; p != nil && isPart(p, c, kinds) {
			out[p.ID] = append(out[p.ID], c)
		}
	}
	return out, nil
}

// watchParts registers fn to be told the parent id (and lane) of every
// part this writer moves to a final state (and of a parent inserted with
// no parts). It never blocks the writer for long: fn must only queue the
// id.
func (w *Jobs) watchParts(fn func(parentID string, lane job.Lane)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partWatchers = append(w.partWatchers, fn)
}

// PartsChanged tells the engines aggregating through this writer that
// parentID may be ready to aggregate now, so it is checked at once rather
// than at the next sweep. The writer calls it itself for every part it
// moves to a final state; a plug-in whose parent also waits on something
// that is not a job (a provider batch's items, say) calls it when that
// changes, and its Aggregator returns a non-deciding outcome until then.
// The parent is taken to be of the interactive lane; a plug-in that knows
// better calls PartsChangedIn.
func (w *Jobs) PartsChanged(parentID string) { w.partFinal(parentID, job.LaneInteractive) }

// PartsChangedIn is PartsChanged for a parent of the given lane. Each
// lane's wake-ups have their own aggregation loop, so a burst of batch
// results settling at once never queues an interactive review's
// aggregation behind thousands of batch ones.
func (w *Jobs) PartsChangedIn(parentID string, lane job.Lane) { w.partFinal(parentID, lane) }

func (w *Jobs) partFinal(parentID string, lane job.Lane) {
	w.mu.Lock()
	fns := w.partWatchers
	w.mu.Unlock()
	for _, fn := range fns {
		fn(parentID, lane)
	}
}

// allFinal reports whether every part is published or terminal.
func allFinal(parts []*job.Job) bool {
	for _, p := range parts {
		if !p.State.Final() {
			return false
		}
	}
	return true
}

// aggregates reports whether the engine runs any kind with an Aggregator.
func (e *Engine) aggregates() bool { return len(e.aggKinds) > 0 }

// wakeParent queues parentID for its lane's aggregation loop; when the
// queue is full the sweep catches up.
func (e *Engine) wakeParent(parentID string, lane job.Lane) {
	if !e.serves(lane) {
		return // a node serving the lane aggregates it (its sweep, at the latest)
	}
	q := e.parents
	if lane == job.LaneBatch {
		q = e.batchParents
	}
	w := parentWake{id: parentID, at: e.cfg.Now(), lane: lane}
	select {
	case q <- w:
	default:
		e.miss(w) // the next sweep pass aggregates it
	}
}

// parentWake is a parent's wake-up: its id, when it was queued (for
// StageAggregateWait) and its lane.
type parentWake struct {
	id   string
	at   time.Time
	lane job.Lane
}

// maxMissed bounds the wake-ups kept for the next sweep pass (miss):
// past it the pass walks every parent instead, which finds the ready
// ones among them as well.
const maxMissed = 1 << 14

// miss keeps w, a wake-up this engine did not serve (its queue was
// full, or its aggregation failed or decided nothing for a transient
// reason), for the next sweep pass.
func (e *Engine) miss(w parentWake) {
	e.missedMu.Lock()
	defer e.missedMu.Unlock()
	if _, ok := e.missed[w.id]; ok || e.missedAll {
		return
	}
	if len(e.missed) >= maxMissed {
		e.missed, e.missedAll = nil, true
		return
	}
	if e.missed == nil {
		e.missed = map[string]parentWake{}
	}
	e.missed[w.id] = w
}

// takeMissed returns the missed wake-ups, oldest first, and whether more
// were dropped than kept, and forgets them.
func (e *Engine) takeMissed() (ws []parentWake, all bool) {
	e.missedMu.Lock()
	m, all := e.missed, e.missedAll
	e.missed, e.missedAll = nil, false
	e.missedMu.Unlock()
	for _, w := range m {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b parentWake) int { return a.at.Compare(b.at) })
	return ws, all
}

// sweepEvery is the periodic sweep's period: the shortest SweepEvery of
// the aggregating kinds.
func (e *Engine) sweepEvery() time.Duration {
	d := time.Duration(0)
	for _, kind := range e.aggKinds {
		s := e.cfg.Kinds[kind].SweepEvery
		if s <= 0 {
			s = DefaultSweepEvery
		}
		if d == 0 || s < d {
			d = s
		}
	}
	return d
}

// aggregateLoop serves the interactive lane's wake-ups, a group at a time
// (aggregateGroup), until the engine stops. It does nothing else: the
// batch lane's wake-ups and the periodic sweep have their own loop
// (batchAggregateLoop), so an interactive review is never aggregated
// after a batch review's aggregation, advance and publication (three
// commits and several reads each) or behind a sweep over thousands of
// waiting batch reviews. Both loops may aggregate the same parent at once
// (the sweep finds an interactive parent too): the advance is a
// compare-and-set and the publication is claimed, as between nodes.
//
// A group, not one parent at a time: an aggregation mostly waits (its
// parts' read, its advance at the store's writer), and one at a time the
// loop served 1 ÷ that wait parents a second, less than the interactive
// wake-ups arriving under a batch sweep on a loaded machine, so its queue
// grew without bound (docs/benchmarks.md, "Session 11 (s11h5)": the
// interactive aggregate_wait stage's p99 past 30 s at load 20).
func (e *Engine) aggregateLoop() {
	defer e.wg.Done()
	for {
		cpulabel.Set(cpulabel.InteractiveAgg) // again each time: the phase may have moved
		select {
		case <-e.ctx.Done():
			return
		case <-e.stop:
			return
		case w := <-e.parents:
			e.aggregateGroup(e.ctx, w, job.LaneInteractive)
		}
	}
}

// batchAggregateGroup bounds how many batch-lane parents are aggregated at
// once. Their advances reach the store together, so the SQLite writer
// commits them for the whole group in few transactions instead of one
// commit per parent; their publications go to the engine's publication
// pool, whose Publishers share some commits (TestPartsBatchWakeupsShareCommits
// measured 74 transactions for 64 parents, 344 one at a time).
const batchAggregateGroup = 32

// batchPublishInline: the batch loop publishes the parents it validates
// itself, in the group's (or the sweep stretch's) turn, rather than
// through the publication pool. A group's publications then reach the
// store's writer together and share its commits, as its advances do; and
// the batch lane's publications keep pace with its aggregations. Through
// the pool each batch publication took a turn of its own, one at a time
// while interactive work was in flight, so once a group of 32 was
// aggregated under one turn the validated reviews of a 10,000-file sweep
// queued for the pool and the sweep took four times as long
// (docs/benchmarks.md, "Session 20 (s20h5)"). A batch kind's Publisher
// holds its group while it runs; the reviews' enqueue a delivery job or
// write a file.

// batchAggregateLoop sweeps once (the crash-recovery pass), then serves the
// batch lane's wake-ups, a group at a time, and the periodic sweep until
// the engine stops.
func (e *Engine) batchAggregateLoop() {
	defer e.wg.Done()
	// Its advances and publication claims are batch-lane writes: a
	// single-writer store runs them only while no interactive write waits.
	ctx := store.WithLane(e.ctx, job.LaneBatch)
	cpulabel.Set(cpulabel.BatchUnpacedAgg)
	var st sweepState
	e.sweepParents(ctx, &st)
	tick := time.NewTicker(e.sweepEvery())
	defer tick.Stop()
	for {
		cpulabel.Set(cpulabel.BatchUnpacedAgg) // again each time: the phase may have moved
		select {
		case <-e.ctx.Done():
			return
		case <-e.stop:
			return
		case w := <-e.batchParents:
			e.aggregateGroup(ctx, w, job.LaneBatch)
		case <-tick.C:
			e.sweepParents(ctx, &st)
		}
	}
}

// aggregateGroup aggregates first and the wake-ups of its lane queued
// behind it (up to batchAggregateGroup distinct parents) concurrently, and
// returns when all are done. An interactive parent's aggregation is
// interactive work (the batch budget and the yield gate hold batch work
// while it runs); a batch group is one piece of batch-lane work.
func (e *Engine) aggregateGroup(ctx context.Context, first parentWake, lane job.Lane) {
	q := e.parents
	if lane == job.LaneBatch {
		q = e.batchParents
	}
	ws := []parentWake{first}
	seen := map[string]bool{first.id: true}
drain:
	for len(ws) < batchAggregateGroup {
		select {
		case w := <-q:
			if !seen[w.id] {
				seen[w.id] = true
				ws = append(ws, w)
			}
		default:
			break drain
		}
	}
	if lane == job.LaneBatch {
		e.batchGroupPiece(ctx, ws)
		return
	}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.interactive.enter()
			defer e.interactive.leave()
			e.aggregateWoken(ctx, w, lane)
		}()
	}
	wg.Wait()
}

// batchGroupPiece aggregates ws (aggregateBatchGroup) as one piece of
// batch-lane work: one turn for all of it, so that its parents' advances
// reach the store's writer together and share its commits. A turn per
// parent ran them one at a time under the governor's width of one, each
// advance its own transaction and fsync: the single writer busy with the
// sweep's commits while interactive writes queued behind them
// (docs/benchmarks.md, "Session 20 (s20h5)").
func (e *Engine) batchGroupPiece(ctx context.Context, ws []parentWake) {
	end := e.batchPiece(ctx)
	defer end()
	cpulabel.Set(cpulabel.BatchPaced)
	defer cpulabel.Set(cpulabel.BatchUnpacedAgg)
	e.aggregateBatchGroup(WithGroupMemo(e.chargeThreadWrites(withTurnHeld(ctx), e.threads.pieces), wakeIDs(ws)...), ws)
}

// wakeIDs returns the parent ids of ws, in order.
func wakeIDs(ws []parentWake) []string {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.id
	}
	return ids
}

// aggregateBatchGroup aggregates a woken batch group under its turn: this
// goroutine reads and aggregates its parents one after the other (the
// group's CPU work), and only their writes (advance, publication) run
// concurrently, so that they reach the store's writer together and share
// its commits. A goroutine per parent for all of it put the group's 32
// aggregations on the run queues at once, both cores' worth of batch work
// under the governor's one turn, ahead of the interactive lane's
// goroutines (docs/benchmarks.md, "Session 21 (s21h4)"). Its
// Aggregators share ctx's GroupMemo.
//
// On a store.ParentsReader it reads the group's parents and their
// children in one statement (readGroup) rather than two per parent.
func (e *Engine) aggregateBatchGroup(ctx context.Context, ws []parentWake) {
	writes := make([]*parentWrite, 0, len(ws))
	wakes := make([]parentWake, 0, len(ws)) // writes[i] is wakes[i]'s
	g := e.readGroup(ctx, ws)
	for _, w := range ws {
		start := e.cfg.Now()
		e.observeStage(w.id, "", "", w.lane, stAggregateWait, w.at, start)
		var write *parentWrite
		var err error
		if g != nil {
			write, err = g.prepare(ctx, e, w.id, e.publishInline)
		} else {
			write, err = e.prepareParent(ctx, w.id, e.publishInline) // publishInline: see batchPublishInline
		}
		if err != nil && ctx.Err() == nil {
			e.log.Warn("aggregation failed; the sweep will retry", "job_id", w.id, "err", err)
			e.miss(w)
		}
		if write == nil {
			e.observeStage(w.id, "", "", w.lane, stAggregate, start, e.cfg.Now())
			continue
		}
		wakes = append(wakes, w)
		write.done = func() { e.observeStage(w.id, "", "", w.lane, stAggregate, start, e.cfg.Now()) }
		writes = append(writes, write)
	}
	for i, err := range e.writeTogether(ctx, writes) {
		if err != nil && ctx.Err() == nil {
			e.log.Warn("aggregation failed; the sweep will retry", "job_id", wakes[i].id, "err", err)
			e.miss(wakes[i])
		}
	}
}

// groupRows is a woken batch group's parents and their children as one
// store read returned them (readGroup).
type groupRows struct {
	parents  map[string]*job.Job
	children map[string][]*job.Job
	err      error // the read's: every parent of the group fails with it
}

// readGroup reads the parents of ws and their children in one statement
// when the store can (store.ParentsReader), and returns nil when it
// cannot: each parent is then read on its own (prepareParent without a
// ParentsReader), its children and then its row, two statements. One
// statement is one snapshot, so prepareParent's ordering holds here too,
// and more: a
// part's finish that advanced its parent in the same write
// (fused.go) is seen whole, the part final and the parent advanced, or
// not at all. Read one parent at a time, a 10,000-file sweep's group
// reads were ~11 % of its CPU, mostly SQLite's own execution
// (docs/benchmarks.md, "Session 39 (s39h1)", "Session 40 (s40h2)").
func (e *Engine) readGroup(ctx context.Context, ws []parentWake) *groupRows {
	r, ok := e.cfg.Store.(store.ParentsReader)
	if !ok {
		return nil
	}
	parents, children, err := r.ParentsWithChildren(ctx, wakeIDs(ws))
	g := &groupRows{parents: make(map[string]*job.Job, len(parents)), children: map[string][]*job.Job{}, err: err}
	for _, p := range parents {
		g.parents[p.ID] = p
	}
	for _, c := range children {
		g.children[c.ParentID] = append(g.children[c.ParentID], c)
	}
	return g
}

// prepare is prepareParent for parent id of the group g read.
func (g *groupRows) prepare(ctx context.Context, e *Engine, id string, publish publishFunc) (*parentWrite, error) {
	if g.err != nil {
		return nil, g.err
	}
	parent := g.parents[id]
	if parent == nil {
		return nil, nil // as prepareParent's ErrNotFound
	}
	return e.prepareJob(ctx, parent, g.children[id], publish), nil
}

// parentWrite is what is left of a parent's aggregation once its
// aggregator decided: the parent's advance, then its publication.
type parentWrite struct {
	// advance is the parent's advance; nil for a parent found validated,
	// whose publication alone is left.
	advance *store.AdvanceParams
	// parent is the parent's row as the aggregation read it: a brief
	// advance's answer (AdvanceParams.Brief) is completed from it.
	parent *job.Job
	// written takes the advance's outcome (nil, nil without one) and
	// returns its error and the publication that follows (nil: none).
	written func(j *job.Job, err error) (publish func(), _ error)
	// done, when set, runs once the write and its publication are over.
	done func()
}

// writeParent writes w alone: its advance, then its publication.
func (e *Engine) writeParent(ctx context.Context, w *parentWrite) error {
	var pub func()
	var err error
	if w.advance == nil {
		pub, err = w.written(nil, nil)
	} else {
		pub, err = w.written(e.jobs.advance(ctx, *w.advance, w.parent))
	}
	if pub != nil {
		pub()
	}
	if w.done != nil {
		w.done()
	}
	return err
}

// writeTogether writes a group of parents (a sweep stretch's, a woken
// batch group's) and returns their errors, in order: their advances
// reach a single-writer store together and share its commits, where one
// after the other each was a transaction of its own. On a store that
// takes many advances at once (store.ManyAdvancer) this goroutine queues
// them all and waits for them: a goroutine per parent for them, 32 a
// stretch made runnable at once when created and again by the commit that
// answered them, were 94 % of the goroutines waiting for a CPU whenever
// more than 20 did under a batch sweep (docs/benchmarks.md, "Session 31
// (s31h4)"). On another store, and for their publications (a Publisher
// may wait seconds for an external system), a goroutine each runs them
// concurrently. The group's CPU work is done before, by its caller.
func (e *Engine) writeTogether(ctx context.Context, ws []*parentWrite) []error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	var ps []store.AdvanceParams
	var rows []*job.Job // rows[k] is ps[k]'s parent
	var at []int        // ps[k] is ws[at[k]]'s advance
	for i, w := range ws {
		if w.advance != nil {
			ps = append(ps, *w.advance)
			rows = append(rows, w.parent)
			at = append(at, i)
		}
	}
	js, aerrs, ok := e.jobs.advanceMany(ctx, ps, rows)
	if !ok {
		for i, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = e.writeParent(ctx, w)
			}()
		}
		wg.Wait()
		return errs
	}
	written := make([]bool, len(ws))
	for k, i := range at {
		written[i] = true
		var pub func()
		pub, errs[i] = ws[i].written(js[k], aerrs[k])
		then(&wg, pub, ws[i].done)
	}
	for i, w := range ws {
		if !written[i] {
			var pub func()
			pub, errs[i] = w.written(nil, nil)
			then(&wg, pub, w.done)
		}
	}
	wg.Wait()
	return errs
}

// then runs a written parent's publication pub, if any, in a goroutine of
// wg's, and done after it (at once without one).
func then(wg *sync.WaitGroup, pub, done func()) {
	if pub == nil {
		if done != nil {
			done()
		}
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		pub()
		if done != nil {
			done()
		}
	}()
}

// aggregateWoken aggregates a woken interactive parent, timing its wait
// and its aggregation; its publication goes to the pool (a batch group's
// are inline: aggregateBatchGroup).
func (e *Engine) aggregateWoken(ctx context.Context, w parentWake, lane job.Lane) {
	start := e.cfg.Now()
	e.observeStage(w.id, "", "", lane, stAggregateWait, w.at, start)
	if err := e.aggregateParent(ctx, w.id, e.publishQueued); err != nil && ctx.Err() == nil {
		e.log.Warn("aggregation failed; the sweep will retry", "job_id", w.id, "err", err)
		e.miss(w)
	}
	e.observeStage(w.id, "", "", lane, stAggregate, start, e.cfg.Now())
}

// fullSweepPasses: the batch aggregation loop's periodic pass walks every
// accepted parent (a full walk) at start and then once in
// fullSweepPasses × SweepEvery (30 s by default); the passes between
// read only the parents of parts finished since shortly before the
// previous pass and the wake-ups this engine missed (sweepParents).
const fullSweepPasses = 15

// sweepState is what the batch aggregation loop's passes carry from one
// to the next (sweepParents).
type sweepState struct {
	// fullAt is when the last full walk that succeeded began (zero: none
	// yet, so the next pass is one).
	fullAt time.Time
	// prevAt is when the previous pass began.
	prevAt time.Time
	// failed: the previous pass failed, so the next one walks every
	// parent.
	failed bool
}

// sweepParents runs one pass of the batch aggregation loop's sweep.
//
// A full walk (sweepParentsVia with no FinishedSince) lists every ready
// parent: it runs at start, every fullSweepPasses × SweepEvery, after a
// pass that failed and when more wake-ups were missed than kept. Each
// other pass reads (1) the ready parents of which a part finished since
// one SweepEvery before the previous pass began (Store.ReadyParents with
// FinishedSince: a part finished by any process, this one's writer or
// another node's, whose finish is visible within SweepEvery of the time
// it records; so within two passes), and (2) the wake-ups this engine
// missed since the previous pass (miss: dropped from a full queue, or an
// aggregation that failed or was transient), by id. Under a sweep of
// 10,000 batch reviews waiting on their items a full walk probes every
// one of them (~80 ms of CPU a pass, docs/benchmarks.md, "Session 27
// (s27h2)"); these passes read only what changed. What only a full walk
// finds: a batch item settled, or a parent inserted with no parts, by a
// process that crashed before it woke the aggregation (its engine's
// start-up walk, or another node's next full walk), a part whose
// recorded finish time lags its commit by more than SweepEvery, and an
// aggregator that waits on something else and is never woken
// (Jobs.PartsChanged).
func (e *Engine) sweepParents(ctx context.Context, st *sweepState) {
	defer e.sweeps.Add(1)
	now := e.cfg.Now()
	every := e.sweepEvery()
	missed, all := e.takeMissed()
	full := all || st.failed || st.fullAt.IsZero() || now.Sub(st.fullAt) >= fullSweepPasses*every
	since := time.Time{}
	if !full {
		since = st.prevAt.Add(-every)
	}
	st.prevAt = now
	err := e.sweepParentsVia(ctx, e.publishInline, since) // see batchPublishInline
	st.failed = err != nil
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("parts sweep failed", "err", err)
		}
		return
	}
	if full {
		st.fullAt = now
		return // the walk listed every ready parent among the missed
	}
	for lo := 0; lo < len(missed) && ctx.Err() == nil; lo += batchAggregateGroup {
		e.batchGroupPiece(ctx, missed[lo:min(len(missed), lo+batchAggregateGroup)])
	}
}

// Sweeps returns how many sweep passes over accepted parents the batch
// lane's aggregation loop has completed, failed ones included (the one at
// Start and one every SweepEvery; SweepParents calls are not counted). A
// test that must see sweeps happen after some event (a publication that a
// sweep must not repeat) waits for this count to grow rather than for
// time to pass.
func (e *Engine) Sweeps() uint64 { return e.sweeps.Load() }

// SweepParents aggregates every accepted parent of the engine's
// aggregating kinds whose parts are all final. The batch lane's
// aggregation loop runs it at start and every SweepEvery (the interactive
// lane's wake-ups have a loop of their own, which a sweep over many
// waiting batch-lane parents does not hold back); tests call it directly.
// A parent it validates is published before it returns (the aggregation
// loops hand it to the publication pool instead).
func (e *Engine) SweepParents(ctx context.Context) error {
	return e.sweepParentsVia(ctx, e.publishInline, time.Time{})
}

// sweepYieldEvery is how many parents a sweep pass asks between two
// looks at the yield gate.
const sweepYieldEvery = 32

// sweepParentsVia is SweepParents handing validated parents to publish,
// reading only the parents of parts finished since finishedSince when it
// is not zero (sweepParents).
//
// A pass lists only the parents that are ready (Store.ReadyParents: no
// part that is not final, neither a part job nor a batch item) and reads
// the parts of a page of them at once (Store.PartsOf), so what it reads
// is two statements per page, not one read of parts per waiting parent
// (nor per ready one: a batch review has none): with 10,000 batch-lane reviews
// waiting on their items, those reads were 28 % of the batch-isolation
// run's CPU (docs/benchmarks.md, "Session 15 (s15h1)"). A parent left out
// would only have been read and left accepted (prepareWith's allFinal, or
// a batch review's aggregator returning ClassPending on an open item), so
// what a pass decides is unchanged; a parent whose last part finished is
// listed by the next pass, which is all the sweep guarantees for a lost
// wake-up.
//
// One pass shares a SweepMemo (SweepMemoFrom) among its parents'
// Aggregators, and aggregates each listed parent from its listed row
// rather than reading the row again.
func (e *Engine) sweepParentsVia(ctx context.Context, publish publishFunc, finishedSince time.Time) error {
	ctx = WithSweepMemo(ctx)
	end := noLeave
	defer func() { end() }()
	pieceCtx := ctx
	ctx = withTurnHeld(ctx) // the pass holds a turn for each stretch
	batchBusy := e.batchWork() != e.sweptAt.Load()
	// Its stretches compute on idle threads (threads.go) only when they
	// take a turn: their writes are then charged as they are made.
	ctx = e.chargeThreadWrites(ctx, batchBusy && e.threads.pieces)
	defer func() { e.sweptAt.Store(e.batchWork()) }()
	for _, kind := range e.aggKinds {
		k := e.cfg.Kinds[kind]
		after := ""
		for {
			// While the batch lane works, the page's reads are a piece
			// of computing batch-lane work of their own, which the pacer
			// rests after: ReadyParents walks every accepted parent of
			// the kind (10,000 batch reviews waiting on their items under
			// a sweep) in one statement, and outside a turn those walks
			// were a quarter of the process's CPU under a sweep that no
			// rest followed (docs/benchmarks.md, "Session 27 (s27h2)").
			// With no batch work since the last pass they take no turn:
			// a lease would find it held for nothing, and an engine with
			// no batch work would pay a lease more per collision
			// (TestIdleGovernorCostsInteractiveNothing).
			if batchBusy {
				end()
				end = e.batchPiece(pieceCtx)
				cpulabel.Set(cpulabel.BatchPaced)
			} else {
				cpulabel.Set(cpulabel.BatchUnpacedAgg)
			}
			js, err := e.cfg.Store.ReadyParents(ctx, store.ReadyParentsParams{Kind: kind, PartKinds: k.PartKinds, After: after, Limit: 500, Lane: e.lane,
				FinishedSince: finishedSince})
			if err != nil {
				return err
			}
			parts, err := e.jobs.partsOf(ctx, js, k.PartKinds)
			if err != nil {
				return err
			}
			for lo := 0; lo < len(js); lo += sweepYieldEvery {
				// Every sweepYieldEvery parents are a piece of batch-lane
				// work: the pass holds there while interactive work is in
				// flight. Not every parent: with interactive work always
				// in flight, a pass over 10,000 waiting parents would take
				// 10,000 holds.
				end()
				end = e.batchPiece(pieceCtx)
				if err := e.aggregateStretch(ctx, k, js[lo:min(len(js), lo+sweepYieldEvery)], parts, publish); err != nil {
					return err
				}
			}
			if len(js) < 500 {
				break
			}
			after = js[len(js)-1].ID
		}
	}
	return nil
}

// aggregateStretch aggregates a sweep stretch's parents as a woken batch
// group's (aggregateBatchGroup): one after the other in this goroutine,
// their writes together, so that their advances and publications share
// the store writer's commits (one at a time, each advance of a sweep was
// its own transaction: docs/benchmarks.md, "Session 20 (s20h5)") while
// the stretch's CPU work stays on one goroutine ("Session 21 (s21h4)").
// It returns their errors joined.
func (e *Engine) aggregateStretch(ctx context.Context, k Kind, js []*job.Job, parts map[string][]*job.Job, publish publishFunc) error {
	writes := make([]*parentWrite, 0, len(js))
	for _, j := range js {
		if w := e.prepareWith(ctx, k, j, parts[j.ID], publish); w != nil {
			writes = append(writes, w)
		}
	}
	return errors.Join(e.writeTogether(ctx, writes)...)
}

// AggregateParent aggregates parent id when it is an accepted job of one
// of the engine's aggregating kinds and all its parts are final, and
// publishes it once it is validated. It does nothing for a parent whose
// parts are still running, or one already advanced (here or by another
// engine). A parent it validates is published before it returns; the
// aggregation loop's wake-ups hand it to the publication pool instead.
func (e *Engine) AggregateParent(ctx context.Context, id string) error {
	return e.aggregateParent(ctx, id, e.publishInline)
}

// publishFunc publishes validated job id of lane: inline
// (publishInline) or through the pool (publishQueued).
type publishFunc func(ctx context.Context, id string, lane job.Lane)

// publishInline is publish as a publishFunc.
func (e *Engine) publishInline(ctx context.Context, id string, _ job.Lane) { e.publish(ctx, id) }

// aggregateParent is AggregateParent handing a validated parent to
// publish: the engine's publish (inline) or publishQueued (the pool).
func (e *Engine) aggregateParent(ctx context.Context, id string, publish publishFunc) error {
	write, err := e.prepareParent(ctx, id, publish)
	if err != nil || write == nil {
		return err
	}
	return e.writeParent(ctx, write)
}

// prepareParent is aggregateParent up to its writes: it reads parent id
// and its parts and aggregates them, and returns what is left to do (the
// parent's advance and publication, or only the publication of one found
// validated), nil when nothing is (see prepareJob).
//
// It reads the parent's children before the parent. An interactive
// parent's last part may advance it in its own finish's write (fused.go):
// children read after that write see the part final, and the parent read
// next sees it advanced, so it is left alone. Read the other way round, a
// parent read accepted just before that write with its parts read all
// final just after it was aggregated a second time, only for its advance
// to lose the compare-and-set: an aggregation and a write to the
// single-writer store for nothing (TestFusedEarlyReadOfOpenSibling caught
// it in CI, stop 49).
//
// On a store.ParentsReader it reads both in one statement, as a woken
// batch group does (readGroup): one snapshot, in which that finish is
// seen whole (the part final and the parent advanced) or not at all, so
// what the ordering guards holds and more, and one statement where a
// woken interactive parent made two.
func (e *Engine) prepareParent(ctx context.Context, id string, publish publishFunc) (write *parentWrite, err error) {
	if g := e.readGroup(ctx, []parentWake{{id: id}}); g != nil {
		return g.prepare(ctx, e, id, publish)
	}
	children, err := e.jobs.children(ctx, id)
	if err != nil {
		return nil, err
	}
	parent, err := e.cfg.Store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return e.prepareJob(ctx, parent, children, publish), nil
}

// prepareJob is prepareParent for a parent row and its children already
// read (before it, by prepareParent). A row a moment old is safe: the
// advance is a compare-and-set from accepted, so a parent advanced
// meanwhile is left alone.
func (e *Engine) prepareJob(ctx context.Context, parent *job.Job, children []*job.Job, publish publishFunc) (write *parentWrite) {
	k, ok := e.cfg.Kinds[parent.Kind]
	if !ok || k.Aggregate == nil {
		return nil
	}
	if parent.State == job.StateValidated { // a crash came between the advance and the publication
		return &parentWrite{written: func(*job.Job, error) (func(), error) {
			return func() { publish(ctx, parent.ID, parent.Lane) }, nil
		}}
	}
	if parent.State != job.StateAccepted {
		return nil
	}
	return e.prepareWith(ctx, k, parent, partsAmong(parent, children, k.PartKinds), publish)
}

// prepareWith is prepareJob for an accepted parent of kind k whose parts
// were read too (the sweep reads a page's parts at once): it runs the
// aggregator and returns the parent's advance and publication, or nil
// when the aggregator decided nothing (or a part is not final). Parts
// read a moment ago are as safe as the row: a parent whose last part
// finished meanwhile waits for the next pass or its wake-up, and one
// advanced meanwhile is left alone by the compare-and-set.
func (e *Engine) prepareWith(ctx context.Context, k Kind, parent *job.Job, parts []*job.Job, publish publishFunc) (write *parentWrite) {
	if !allFinal(parts) {
		return nil
	}
	o := e.aggregate(ctx, k, parent, parts)
	crashpoint.Hit(crashpoint.PartsBeforeAdvance)
	p, ok := advanceOf(parent, o, parts, e.cfg.Now())
	if !ok {
		// A transient failure is worth a warning; any other non-deciding
		// class is an aggregator still waiting on something, by design.
		level := slog.LevelDebug
		if o.Class == job.ClassTransient {
			level = slog.LevelWarn
			// Asked again at the next pass, which reads only what
			// changed: a failed read changed nothing it would see.
			e.miss(parentWake{id: parent.ID, at: e.cfg.Now(), lane: parent.Lane})
		}
		e.log.Log(ctx, level, "aggregation did not decide; the sweep will retry", "job_id", parent.ID, "kind", parent.Kind,
			"outcome", o.Class, "err", o.Err)
		return nil
	}
	// A parent with nothing to deliver is published by its advance's own
	// write (AdvanceParams.Publish): its publication is only the
	// compare-and-set, which the advance's compare-and-set from accepted
	// already makes exactly once. Recorded apart, it was one more visit
	// to a single-writer store per review (and, for an interactive one,
	// a hop through the publication pool), each a place to queue behind
	// a batch-lane commit (docs/benchmarks.md, "Session 29 (s29h2)").
	p.Publish = p.To == job.StateValidated && !delivers(k.Publisher, parent)
	// What the advance leaves that its answer is used for (written,
	// Jobs.advanced: the id, kind, lane, parent and new state) is
	// parent's or known without a read: the store need not read the row
	// back (docs/benchmarks.md, "Session 40 (s40h2)").
	p.Brief = true
	return &parentWrite{advance: &p, parent: parent, written: func(j *job.Job, err error) (func(), error) {
		if errors.Is(err, store.ErrConflict) {
			return nil, nil // another engine advanced it, or it was cancelled
		} else if err != nil {
			return nil, err
		}
		e.log.Info("parent aggregated", "job_id", j.ID, "kind", j.Kind, "parts", len(parts), "state", j.State)
		switch {
		case j.State == job.StateValidated: // to deliver (or a store that does not publish with an advance)
			return func() { publish(ctx, j.ID, j.Lane) }, nil
		case p.Publish && j.State == job.StatePublished:
			e.observePublication(j.Kind, PublishPublished)
		}
		return nil, nil
	}}
}

// aggregate calls the kind's aggregator, turning a panic into a transient
// outcome (the parent stays accepted).
func (e *Engine) aggregate(ctx context.Context, k Kind, parent *job.Job, parts []*job.Job) (o job.Outcome) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("aggregator panicked", "job_id", parent.ID, "kind", parent.Kind, "panic", fmt.Sprint(p))
			o = job.Outcome{Class: job.ClassTransient, Err: "aggregator panicked"}
		}
	}()
	return k.Aggregate.Aggregate(ctx, parent, parts)
}

// advanceOf is the parent's advance for an aggregator's outcome: success
// to validated with the result, a permanent failure to terminal; false for
// an outcome that decides nothing (transient), which leaves the parent
// accepted.
func advanceOf(parent *job.Job, o job.Outcome, parts []*job.Job, now time.Time) (store.AdvanceParams, bool) {
	failed := 0
	for _, p := range parts {
		if p.State == job.StateTerminal {
			failed++
		}
	}
	// A parent whose parts are not jobs (a batch-lane review's are its
	// batch items, which its aggregator reads) says so rather than
	// "aggregated 0 parts".
	why := fmt.Sprintf("aggregated %d parts (%d failed)", len(parts), failed)
	if len(parts) == 0 {
		why = "aggregated with no part jobs (the aggregator read its own inputs)"
	}
	p := store.AdvanceParams{ID: parent.ID, From: job.StateAccepted, Now: now,
		Record: job.AttemptRecord{At: now, Outcome: o.Class, Error: o.Err, Why: why}}
	p.Result = o.Result // a failed aggregate may still say what failed
	switch o.Class {
	case job.ClassSuccess:
		p.To = job.StateValidated
	case job.ClassPermanent, job.ClassInvalidOutput:
		p.To, p.Reason = job.StateTerminal, job.ReasonPermanentError
		if o.Reason != "" {
			p.Reason = o.Reason
		}
	default:
		return p, false
	}
	return p, true
}

// aggregateHandler is the handler of a kind with an Aggregator and no
// Handler of its own. A parent is never leased unless an operator redrives
// it (terminal -> waiting): then it is aggregated again from its parts as
// they are now, e.g. after its failed parts were redriven too and have
// finished; while some part is not final the attempt is transient and
// retried with backoff.
func (e *Engine) aggregateHandler(k Kind) Handler {
	return HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
		parts, err := e.jobs.Parts(ctx, j, k.PartKinds)
		if err != nil {
			return job.Outcome{Class: job.ClassTransient, Err: "load parts"}
		}
		if !allFinal(parts) {
			return job.Outcome{Class: job.ClassTransient, Err: ErrPartsNotFinal.Error()}
		}
		return k.Aggregate.Aggregate(ctx, j, parts)
	})
}

// batchWork counts the batch lane's computing work so far: pieces that
// took a turn of the governor and batch jobs leased with one. Two equal
// readings mean no batch work in between, except the reader's own.
func (e *Engine) batchWork() int64 {
	b := e.budget
	return b.passed.Load() + b.held.Load() + b.leasedTurns.Load()
}
