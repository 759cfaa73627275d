package engine

import (
	"context"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// insertLease is one interactive insert's lease in its own write
// (store.InsertLeaser): the worker slots an engine reserved for it and
// what it must settle once the write returns.
//
// An interactive review's part was leased in a write of its own: the
// insert committed, its Notify woke the fetch loop, whose lease queued at
// the store's writer a second time. On SQLite, under a batch sweep, that
// queue was the largest named share of the slowest interactive reviews'
// extra latency, and the loop waiting for the insert's commit another
// (docs/benchmarks.md, "Session 30 (s30h1)"). Leased in the insert's
// write, the part starts as the insert returns, one write and one queue
// fewer.
type insertLease struct {
	p     LeaseParams
	free  int       // worker slots reserved for it
	gen   uint64    // queuedWork's generation as the lease began
	admit time.Time // set by the store: a skipped group's next admission
	asked time.Time // when the insert's write was called (traced only: leaseNote)
}

// insertLeaser is what an engine lends its writer (Jobs.leaseInserts) so
// that an interactive insert leases in its own write.
type insertLeaser interface {
	// beginInsertLease reserves worker slots for a lease in the write
	// that inserts jobs; false when there is none to make (no job the
	// engine would lease now, no free slot, the engine not running).
	beginInsertLease(jobs []*job.Job) (*insertLease, bool)
	// endInsertLease runs what the write leased on l's slots and gives
	// back the slots not used; err says the write failed (nothing was
	// leased).
	endInsertLease(l *insertLease, leased []*job.Job, err error)
}

// beginInsertLease reserves, without waiting, a worker slot per job of
// the insert that the engine would lease now (waiting, and leasesNow:
// interactive, one of its kinds, not scheduled for later), and asks for that many
// interactive-lane jobs. The lease is a Lease of the engine's kinds in
// the interactive lane, not of the inserted jobs: it takes what a fetch
// loop's lease would take of that lane, an older ready job of a group
// before a newer one, so an insert never jumps its group's queue, and
// its keys admit as for any lease. It leases no batch-lane job: the
// insert is an interactive caller's write, the batch lane's turns of the
// CPU governor and its share are the fetch loop's (no turn is taken
// here), and a batch job's lease in an interactive write would lengthen
// the very write this saves. Only as many slots as the insert brings
// ready jobs: a concurrent insert finds the others free for its own.
func (e *Engine) beginInsertLease(jobs []*job.Job) (*insertLease, bool) {
	if !e.live.Load() || !e.serves(job.LaneInteractive) {
		return nil, false
	}
	want := 0
	for _, j := range jobs {
		if j.State == job.StateWaiting && e.leasesNow(j) {
			if want++; want == e.cfg.MaxBatch {
				break
			}
		}
	}
	free := e.takeSlotsUpTo(want)
	if free == 0 {
		return nil, false
	}
	if e.stopping() {
		// Stop began: no new lease. One that begins after this check
		// waits for these slots (its drain) and so for the jobs leased.
		e.giveSlots(free)
		return nil, false
	}
	// The insert's write is interactive work in flight from here: the
	// SQLite writer's hold (store.InteractiveWatcher) then keeps a
	// batch-lane transaction open for it to join instead of committing
	// in its way. Counted only from the insert's commit (its watchers),
	// the insert was the interactive write that most often still found a
	// batch-lane commit in progress (docs/benchmarks.md, "Session 31
	// (s31h3)"). endInsertLease ends it, once the jobs leased are counted
	// by their handlers.
	e.interactive.enter()
	l := &insertLease{free: free, gen: e.queued.leasing()}
	l.p = e.leaseParams(free, 0, &l.admit)
	l.p.Lane = job.LaneInteractive
	l.asked = e.noteNow() // the insert's write is called next
	return l, true
}

// endInsertLease settles an insert's lease as leaseAndRun settles the
// fetch loop's: the stages and counts of runLeased, the jobs in flight
// and heartbeated as any lease's, the queued interactive work seen, the
// admission time the store noted. The Notify its inserter sends next (as
// after any insert) need not lease again, most likely: the next wake-up
// of an idle fetch loop first asks the store by a read whether a lease
// would take anything (sawInsertLease), as its polls do. The read, not
// this lease, decides, so a lease that took as many jobs as it asked for
// (more may be ready) and a wake-up that was not the inserter's lease as
// before whenever the read finds something.
func (e *Engine) endInsertLease(l *insertLease, leased []*job.Job, err error) {
	defer e.interactive.leave() // beginInsertLease's
	if err != nil {
		e.giveSlots(l.free)
		return
	}
	noteLease("insert", l.p, leased)
	e.noteAdmission(l.admit)
	e.sawInsertLease.Store(true)
	e.runLeased(leased, l.free, 0, leaseNote{via: "insert", asked: l.asked})
	if len(leased) < l.free {
		// It saw every interactive job it could take: the queued piece
		// ends as after a fetch loop's lease. One that took as many as
		// it asked for (its own jobs' count) may have left another
		// insert's job ready: the fetch loop's lease that the other
		// insert's Notify brings ends the piece.
		e.queued.seen(l.gen)
	}
}

// takeSlotsUpTo reserves up to n free worker slots without waiting.
func (e *Engine) takeSlotsUpTo(n int) int {
	for got := 0; got < n; got++ {
		select {
		case e.slots <- struct{}{}:
		default:
			return got
		}
	}
	return n
}

// giveSlots gives back n worker slots reserved and not used.
func (e *Engine) giveSlots(n int) {
	for range n {
		<-e.slots
	}
}

// insertLeasing inserts objs and jobs with a lease in the same write when
// the writer's engine has one to make and the store can (see
// insertLease); ok false when it did not try, and the caller inserts the
// usual way. The results given to the insert's watchers and statistics
// leave out the jobs leased: they are running, not queued.
func (w *Jobs) insertLeasing(ctx context.Context, objs []store.Object, jobs []*job.Job, def admission.Config) (res []store.InsertResult, ok bool, err error) {
	il, can := w.cfg.Store.(store.InsertLeaser)
	w.mu.Lock()
	e := w.inserts
	w.mu.Unlock()
	if !can || e == nil {
		return nil, false, nil
	}
	l, ok := e.beginInsertLease(jobs)
	if !ok {
		return nil, false, nil
	}
	sp := w.leaseParams(l.p)
	res, leased, err := il.InsertLease(ctx, objs, jobs, def, sp)
	if err != nil {
		e.endInsertLease(l, nil, err)
		return nil, true, err
	}
	w.leased(leased, sp.Now)
	w.inserted(unleased(res, leased))
	e.endInsertLease(l, leased, nil)
	w.replays(res)
	return res, true, nil
}

// unleased is res without the results of jobs in leased (res itself when
// there are none).
func unleased(res []store.InsertResult, leased []*job.Job) []store.InsertResult {
	if len(leased) == 0 {
		return res
	}
	ids := make(map[string]bool, len(leased))
	for _, j := range leased {
		ids[j.ID] = true
	}
	taken := func(r store.InsertResult) bool { return !r.Existing && ids[r.Job.ID] }
	if !slices.ContainsFunc(res, taken) {
		return res
	}
	return slices.DeleteFunc(slices.Clone(res), taken)
}
