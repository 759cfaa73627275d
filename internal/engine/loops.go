package engine

import (
	"context"
	"errors"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// finishLoop turns outcomes into transitions and writes them in batches:
// every outcome waiting at the moment goes into one Finish call.
func (e *Engine) finishLoop() {
	defer e.wg.Done()
	for {
		batch, ok := e.gather()
		if !ok {
			return
		}
		if cpulabel.On {
			cpulabel.Set(finishLabel(batch))
		}
		e.finish(batch)
	}
}

// gather takes the next finish batch from results: the first outcome
// (waiting for it) and every one queued behind it, up to MaxBatch; false
// once results is closed and empty. Finding results empty after an
// interactive outcome while another interactive job is still to hand its
// outcome on (handling), it yields the processor once and looks again
// before it returns the batch. With none (an interactive review's one part, beside nothing or
// only the batch lane's handlers) the yield waited for nobody: it only put
// the finish loop at the back of the run queue, behind the batch lane's
// runnable goroutines under a sweep, on every interactive review's
// critical path (docs/benchmarks.md, "Session 39 (s39h2)"). A batch-lane
// outcome still yields once, as before: skipped for it too, the batch
// lane ran 15–20 % less of its paced share beside a sparse interactive
// stream and its pieces no longer spread over the interactive flight
// (TestBatchComputingOverlapsInteractiveLessWithTheGate, simulated time:
// 42–46 batch jobs in 2 s against 52–53, overlap share 0.01–0.10 against
// 0.23–0.25: docs/benchmarks.md, "Session 40: the merge (lead)"), and a
// batch finish is on no review's path. With the SQLite writer's hold off
// (sqlite.Config.BatchHold) the skip cost nothing there: a batch-only
// finish written while interactive work is in flight waits in the
// writer's held transaction for up to the hold, and the yield most likely
// let an interactive outcome of the same instant share the finish, which
// the writer does not hold. One finish
// loop gathers at a time while the others' finishes are in flight: when
// two loops waited on results together, a burst of outcomes (the jobs of
// one lease, done at once) was split between them, two finish
// transactions where one would do (docs/benchmarks.md, "Session 21
// (s21h3)").
func (e *Engine) gather() ([]result, bool) {
	e.gathering <- struct{}{}
	defer func() { <-e.gathering }()
	first, ok := <-e.results
	if !ok {
		return nil, false
	}
	batch := []result{first}
	yielded := false
	for len(batch) < e.cfg.MaxBatch {
		select {
		case r, ok := <-e.results:
			if !ok {
				return batch, true
			}
			batch = append(batch, r)
		default:
			if yielded || first.job.Lane == job.LaneInteractive && e.handling.Load() == 0 {
				return batch, true
			}
			// Once, let the handlers that are about to send their
			// outcomes run first: a burst's senders are runnable but
			// not all have run when the first outcome arrives.
			e.gatherYield()
			yielded = true
		}
	}
	return batch, true
}

func (e *Engine) finish(batch []result) {
	rs := make([]Report, len(batch))
	for i, r := range batch {
		rs[i] = Report{Job: r.job, Outcome: r.out, Validates: e.cfg.Kinds[r.job.Kind].Publisher != nil, Answered: r.answered, fuse: r.fuse}
	}
	// Finishing must outlive Stop's cancellation: an outcome we have is
	// written, or the lease expires and the job is retried.
	ctx := context.WithoutCancel(e.ctx)
	if allBatch(batch) {
		ctx = store.WithLane(ctx, job.LaneBatch) // yields to interactive writes
		// The handlers gave their turns back when they returned: the
		// writer's time for their finish is charged to the pacer.
		ctx = e.chargeWrites(ctx)
	}
	// The finish stage is recorded once the outcomes are written and
	// before the Observer hears of them, so that a listener of the
	// Observer reads histograms that count these finishes.
	written := func() {
		now := e.cfg.Now()
		for _, r := range batch {
			if !r.answered.IsZero() {
				e.observeStage(r.job.ID, r.job.ParentID, r.job.Kind, r.job.Lane, stFinish, r.answered, now)
			}
		}
	}
	var note leaseNote
	done, leased, free, turns, withLease, released := e.finishLease(ctx, rs, written, &note)
	var err error
	for attempt := 0; !withLease && attempt < 5; attempt++ {
		if done, released, err = e.report(ctx, rs, written); err == nil {
			break
		}
		e.log.Error("finish failed; retrying", "jobs", len(rs), "attempt", attempt+1, "err", err)
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	if err != nil {
		e.log.Error("finish failed; the leases will expire and the jobs be retried", "jobs", len(rs), "err", err)
		return
	}
	for i, r := range batch {
		if err := done[i].Err; err != nil {
			e.log.Warn("outcome refused: lease lost", "job_id", r.job.ID, "err", err)
			if lo := e.leaseObserver(); lo != nil && errors.Is(err, store.ErrConflict) {
				lo.OutcomeRefused(OpFinish)
			}
			continue
		}
		if done[i].Transition.To == job.StateValidated {
			e.queuePublish(r.job.ID, r.job.Lane) // the pool publishes: a slow Publisher must not hold finishes
		}
	}
	if !withLease {
		if released {
			e.noteWake(wakeFinishReleased)
			e.Notify() // keys were released or groups readied
		}
		return
	}
	e.runLeased(leased, free, turns, note)
	if !released {
		// Nothing leased, nothing new to lease: a lease now or beside
		// this finish finds what it would have found without it, so the
		// fetch loop's wait stands (see report).
		return
	}
	if len(leased) == free {
		e.noteWake(wakeFinishFull)
		e.Notify() // every slot taken: more may be ready
		return
	}
	// The lease saw what this finish released; an idle fetch loop leasing
	// again now would find nothing more, but the admission time the lease
	// noted may be sooner than its wait.
	select {
	case e.rearm <- struct{}{}:
	default:
	}
}

// finishLease writes rs and, in the same write, leases for the free
// worker slots (see store.FinishLeaser) when a fetch loop is idle: that
// loop's last lease found fewer jobs than it asked for (perhaps these), so
// what this finish releases (a slot of a key held at its concurrency cap,
// above all) is what a lease right after it would take, one commit later.
// It leases only when the finish released something (released): a finish
// of unpaced keys' successes leaves what the loop's lease saw as it was,
// and its lease read found nothing in most cases (331 of 400 on
// PostgreSQL: docs/benchmarks.md, "Session 27 (s27h4)"). withLease is
// false when it did not try or the write failed (nothing was written: the
// caller reports alone); then no slot or batch turn is held. It fills
// note, for the queued stage of the jobs it leased.
func (e *Engine) finishLease(ctx context.Context, rs []Report, written func(), note *leaseNote) (done []Reported, leased []*job.Job, free, turns int, withLease, released bool) {
	if e.idle.Load() == 0 || len(e.kinds) == 0 || e.stopping() || !e.jobs.CanReportLease() {
		return nil, nil, 0, 0, false, false
	}
	if free = e.takeSlots(); free == 0 {
		return nil, nil, 0, 0, false, false
	}
	turns, batchMax := e.takeTurns(free)
	var admit time.Time
	p := e.leaseParams(free, batchMax, &admit)
	p.Released = func(r bool) { released = r }
	note.asked = e.noteNow()
	done, leased, err := e.jobs.reportLease(ctx, rs, p, written)
	if err == nil && (leaseStatsOn || e.traced()) {
		note.via = finishTrigger(rs, released)
		noteLease(note.via, p, leased)
	}
	if err != nil {
		for range free {
			<-e.slots
		}
		e.budget.leased(turns, 0, free)
		e.log.Error("finish with lease failed; finishing alone", "jobs", len(rs), "err", err)
		return nil, nil, 0, 0, false, false
	}
	e.noteAdmission(admit)
	return done, leased, free, turns, true, released
}

// report writes rs alone and tells whether the outcomes released
// something (store.FinishReleased), which only a store.FinishLeaser tells
// (as a finish that leases nothing); on another store it counts as
// released. A finish that released nothing needs no Notify: a fetch loop
// in a lease beside it, or leasing after it, finds what it would have
// found without it, and the worker slots it frees wake a loop that waits
// for them (leaseAndRun).
func (e *Engine) report(ctx context.Context, rs []Report, written func()) ([]Reported, bool, error) {
	if !e.jobs.CanReportLease() {
		done, err := e.jobs.report(ctx, rs, written)
		return done, true, err
	}
	released := true
	done, _, err := e.jobs.reportLease(ctx, rs, LeaseParams{Released: func(r bool) { released = r }}, written)
	return done, released, err
}

// allBatch reports whether every result is a batch-lane job's: only then
// is their finish a batch-lane write.
func allBatch(batch []result) bool {
	for _, r := range batch {
		if r.job.Lane != job.LaneBatch {
			return false
		}
	}
	return true
}

// heartbeatLoop extends the leases of jobs running longer than one tick and
// cancels the handlers whose lease was lost or whose job was cancelled.
func (e *Engine) heartbeatLoop() {
	defer e.wg.Done()
	tick := time.NewTicker(e.cfg.HeartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
			cpulabel.Set(cpulabel.Maintain)
			e.heartbeat()
		}
	}
}

func (e *Engine) heartbeat() {
	now := e.cfg.Now()
	// Attempts past their maximum run time are not renewed: their lease
	// runs out unless the engine records their timeout first.
	due := e.overrun(now)
	for _, r := range due {
		_, err := e.jobs.Heartbeat(e.ctx, r.job.ID, r.job.LeaseToken, e.cfg.LeaseFor)
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			r.cancel(errLeaseLost)
			if lo := e.leaseObserver(); lo != nil && errors.Is(err, store.ErrConflict) {
				lo.OutcomeRefused(OpHeartbeat)
			}
		} else if err != nil && e.ctx.Err() == nil {
			e.log.Warn("heartbeat failed", "job_id", r.job.ID, "err", err)
		}
	}
}

// maintainLoop recovers expired leases, expires deadlines, retries pending
// publications and prunes finished jobs past retention.
func (e *Engine) maintainLoop() {
	defer e.wg.Done()
	tick := time.NewTicker(e.cfg.ReapEvery)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		cpulabel.Set(cpulabel.Maintain)
		if _, err := e.Reap(e.ctx); err != nil && e.ctx.Err() == nil {
			e.log.Error("reap", "err", err)
		}
		if n%30 == 29 || e.publishRetryDue() {
			e.publishPending()
		}
		if n%600 == 0 {
			e.prune()
		}
	}
}

// Reap finishes every expired lease with a lease_expired outcome (one
// transient attempt; the job returns to waiting) and ends jobs past their
// deadline. It returns how many leases it recovered.
//
// Selecting the expired leases and recovering them are two store calls;
// a worker may complete, heartbeat or be re-leased in between. Each
// recovery is therefore a guarded transition on the lease token the
// selection saw and on the lease still being expired at now, so it either
// wins whole or conflicts and changes nothing.
func (e *Engine) Reap(ctx context.Context) (int, error) {
	now := e.cfg.Now()
	if _, err := e.cfg.Store.ExpireDeadlines(ctx, now); err != nil {
		return 0, err
	}
	total := 0
	defer func() {
		if lo := e.leaseObserver(); lo != nil && total > 0 {
			lo.LeasesRecovered(total)
		}
	}()
	for {
		expired, err := e.cfg.Store.Expired(ctx, now, e.cfg.MaxBatch)
		if err != nil || len(expired) == 0 {
			return total, err
		}
		if e.reapHook != nil {
			e.reapHook(expired)
		}
		ts := make([]store.Transition, len(expired))
		for i, j := range expired {
			ts[i] = Decide(j, job.Outcome{Class: job.ClassLeaseExpired, Err: "lease expired"}, now, false, e.cfg.Backoff, 0)
			ts[i].LeaseExpiredBy = now
		}
		errs, err := e.cfg.Store.Finish(ctx, ts)
		if err != nil {
			return total, err
		}
		conflicts := 0
		for i, j := range expired {
			if errs[i] == nil {
				total++
				e.log.Warn("lease expired; job returned to waiting", "job_id", j.ID, "kind", j.Kind, "attempt", j.Attempt)
			} else {
				conflicts++
			}
		}
		// A selection of jobs that all conflicted (completed or renewed
		// since) would be selected again only if they were still expired
		// under the same token, which the guard just refuted; stop rather
		// than spin.
		if len(expired) < e.cfg.MaxBatch || conflicts == len(expired) {
			e.noteWake(wakeReap)
			e.Notify()
			return total, nil
		}
	}
}

func (e *Engine) prune() {
	before := e.cfg.Now().Add(-e.cfg.Retention)
	for e.ctx.Err() == nil {
		n, err := e.cfg.Store.Prune(e.ctx, before)
		if err != nil || n == 0 {
			return
		}
		e.log.Info("pruned finished jobs", "count", n)
	}
}
