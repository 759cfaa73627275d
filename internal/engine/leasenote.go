package engine

import (
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// Why an engine's own code woke its fetch loop (noteWake); wakeNotify, the
// zero value, is a Notify from outside the engine (an insert, a submit)
// or none recorded.
const (
	wakeNotify uint32 = iota
	wakeTurn
	wakeFinishReleased
	wakeFinishFull
	wakeReap
)

// wakeNames are the wake reasons' names, in the lease statistics
// (leasestats_on.go) and in StageSpan.Via ("wake:<name>").
var wakeNames = [...]string{"notify", "turn", "finish-released", "finish-full", "reap"}

// noteWake records why the fetch loop is about to be woken: one atomic
// store, in every build, so that a traced queued stage (StageSpan.Via)
// can name the wake-up that leased it.
func (e *Engine) noteWake(why uint32) { e.wakeWhy.Store(why) }

// wakeReason is the reason noteWake last recorded, "notify" when none,
// and forgets it.
func (e *Engine) wakeReason() string { return wakeNames[e.wakeWhy.Swap(wakeNotify)] }

// leaseNote says how a lease came about, for the queued stage of the jobs
// it took (StageSpan.Via, Asked, Woke). Only an engine with a StageTrace
// reads the clock for it (Engine.traced).
type leaseNote struct {
	via   string    // the lease's trigger: insert, start, again, poll, wake:<reason>, finish:<lane>
	asked time.Time // when the lease's write (or the insert's) was called
	woke  time.Time // when the fetch loop's wait ended (a wake-up or poll); zero otherwise
}

// traced reports whether the engine has a StageTrace, which alone pays
// for leaseNote's clock reads.
func (e *Engine) traced() bool { return e.cfg.StageTrace != nil }

// noteNow is the clock for a leaseNote: zero when untraced.
func (e *Engine) noteNow() time.Time {
	if !e.traced() {
		return time.Time{}
	}
	return e.cfg.Now()
}

// observeQueued records job j's queued stage, from when it became ready
// (the later of its creation and its eligible time) to its lease at now,
// with how the lease came about (n) when traced.
func (e *Engine) observeQueued(j *job.Job, now time.Time, n leaseNote) {
	ready := j.CreatedAt
	if j.EligibleAt.After(ready) {
		ready = j.EligibleAt
	}
	e.stages.observe(j.Lane, stQueued, now.Sub(ready))
	if e.traced() {
		e.cfg.StageTrace(StageSpan{ID: j.ID, Parent: j.ParentID, Kind: j.Kind, Lane: j.Lane, Stage: StageQueued,
			Start: ready, End: now, Via: n.via, Asked: n.asked, Woke: n.woke})
	}
}

// finishTrigger names a finish's lease for the lease statistics
// (leasestats_on.go) and a traced queued stage (StageSpan.Via): the lanes of the jobs it finished, and "-none" when
// the finish released nothing, so that the store ran no lease.
func finishTrigger(rs []Report, released bool) string {
	lane := ""
	for _, r := range rs {
		switch {
		case lane == "":
			lane = string(r.Job.Lane)
		case lane != string(r.Job.Lane):
			lane = "mixed"
		}
	}
	if !released {
		return "finish:" + lane + "-none"
	}
	return "finish:" + lane
}
