package store

import (
	"errors"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

// FinishTx is what a driver provides inside one write transaction so that the
// shared Finish logic can run on it.
type FinishTx interface {
	// EndAttempts applies each transition to its job, guarded on (id,
	// running, lease token, attempt when Record.Attempt is set, and lease
	// expiry when LeaseExpiredBy is set), appends its Record to the job's history, and
	// returns, in the same order, the job's limit keys and group, or
	// Conflict when the guard failed. The transitions name distinct jobs.
	// One call per batch lets a driver write the batch in one statement or
	// one round trip instead of two per job.
	EndAttempts(ts []Transition) ([]Ended, error)
	// LockKeysWait returns the named keys' states, locked; it waits for
	// locks held by others (lease transactions never wait, so no cycle).
	LockKeysWait(names []string) (map[string]*admission.State, error)
	// SaveKeys writes back the given key states.
	SaveKeys(keys []*admission.State) error
	// GroupReady records that the group has a job eligible at at.
	GroupReady(group int64, at time.Time) error
	// GroupUnblock clears the group's blocked-until (see
	// LeaseTx.TouchGroups), so that the next lease looks at it again.
	GroupUnblock(group int64) error
	// AdvanceParent writes p, the advance of the parent of part partID
	// whose transition EndAttempts just wrote, under ParentAdvance's
	// guard (ParentAdvanceQuery), and returns the parent as it left it;
	// nil, and no error, when the guard failed and it wrote nothing.
	AdvanceParent(partID string, p *ParentAdvance) (*job.Job, error)
	// ReadKeys returns the named keys' states without locking them (a key
	// with no row is missing). Finish reads only their configuration from
	// them, before EndAttempts (see PacedRetry), so that the job rows are
	// still written before any key is locked.
	ReadKeys(names []string) (map[string]*admission.State, error)
}

// Ended is what FinishTx.EndAttempts reports of one transition.
type Ended struct {
	Keys  []string
	Group int64
	// Cost is the job's cost, what its lease took from its keys' shapes:
	// the finish gives it back to their windows' flights (see
	// admission.State.End).
	Cost int64
	// Conflict means the guard failed: the job is not running under the
	// transition's lease token (or does not exist).
	Conflict bool
}

// PacedRetryWhy is the AttemptRecord.Why of a retry that its keys pace
// (see PacedRetry, PacedFault).
const PacedRetryWhy = "key pacing"

// PacedRetry reports whether a job refused without a retry delay (a 429,
// or a 503 without Retry-After) needs no backoff of its own: every one of
// its keys that the refusal applies to (scope, or all of them when scope
// is empty; at least one) has a row and slows itself on such a refusal
// (admission.State.PacesRefusals). The key's new pacing then spaces the
// retry like any other start, while a backoff on top would idle the job
// 0.5-1.5 s after its key was ready again. A key with a fixed limit pauses
// for the job's backoff instead, and a job with no such key has nothing
// but its backoff to slow it: both keep it.
func PacedRetry(states map[string]*admission.State, jobKeys, scope []string) bool {
	n := 0
	for _, name := range jobKeys {
		if len(scope) > 0 && !slices.Contains(scope, name) {
			continue
		}
		st := states[name]
		if st == nil || !st.PacesRefusals() {
			return false
		}
		n++
	}
	return n > 0
}

// PacedFault reports whether one of a job's first transient failures (a
// 5xx without Retry-After, a timeout; store.KeyEffect.Fault) needs no backoff
// of its own: every one of the job's keys (at least one) has a row and
// spaces its starts (admission.State.PacesStarts). The retry then goes
// back to its keys' queue and starts when they admit it, like any other
// job: the upstream sees no more than the keys' pace, retries or not,
// while a backoff on top idled the job 0.5-1.5 s after a key that had
// been ready all along (the issue mix's half-none: a random 503 near the
// end set the makespan, docs/benchmarks.md, session 15, s15h6). A job with
// a key that spaces nothing (a concurrency cap alone, no shape), or with
// no key, keeps its backoff: nothing else would slow a storm of retries.
// So does a job's third fault and every later one (engine.Decide sets
// Fault on the first engine.PacedFaults only, two since session 18): a
// run of failures still backs off.
func PacedFault(states map[string]*admission.State, jobKeys []string) bool {
	for _, name := range jobKeys {
		if st := states[name]; st == nil || !st.PacesStarts() {
			return false
		}
	}
	return len(jobKeys) > 0
}

// pacedRetries makes the retries that their keys pace (see PacedRetry,
// PacedFault) eligible at the refusal or fault, with a record that says so: the configuration is
// read before the job rows are written, unlocked (a reconfiguration racing
// the finish is read either way: a retry let through against a key that
// just stopped adapting waits behind that key's pause, which Throttled
// then applies for the backoff).
func pacedRetries(tx FinishTx, ts []Transition) error {
	var names []string
	for i := range ts {
		if throttledRetry(&ts[i]) || faultRetry(&ts[i]) {
			names = append(names, ts[i].Keys.JobKeys...)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	states, err := tx.ReadKeys(slices.Compact(names))
	if err != nil {
		return err
	}
	for i := range ts {
		t := &ts[i]
		if throttledRetry(t) && PacedRetry(states, t.Keys.JobKeys, t.Keys.Scope) ||
			faultRetry(t) && PacedFault(states, t.Keys.JobKeys) {
			t.EligibleAt, t.Record.Delay, t.Record.Why = t.Keys.Now, 0, PacedRetryWhy
		}
	}
	return nil
}

// throttledRetry reports a retry after a refusal that named no delay, on
// a job whose keys the engine named.
func throttledRetry(t *Transition) bool {
	return t.To == job.StateRetryScheduled && t.Keys.RateLimited && t.Keys.Backoff && len(t.Keys.JobKeys) > 0 &&
		t.Record.Why != PacedRetryWhy
}

// faultRetry reports a retry after one of a job's first transient
// failures (KeyEffect.Fault), on a
// job whose keys the engine named.
func faultRetry(t *Transition) bool {
	return t.To == job.StateRetryScheduled && t.Keys.Fault && len(t.Keys.JobKeys) > 0 &&
		t.Record.Why != PacedRetryWhy
}

// splitRepeats splits the second and later transitions of a job id in
// batch (idx: their indexes in the caller's list) off into later, for the
// next round. Without a repeat, the usual case, batch and idx are returned
// as they are, not copied.
func splitRepeats(batch []Transition, idx []int) (now []Transition, nowIdx []int, later []Transition, laterIdx []int) {
	ids := make(map[string]bool, len(batch))
	first := -1 // the first repeat
	for k := range batch {
		if ids[batch[k].ID] {
			first = k
			break
		}
		ids[batch[k].ID] = true
	}
	if first < 0 {
		return batch, idx, nil, nil
	}
	now, nowIdx = slices.Clone(batch[:first]), slices.Clone(idx[:first])
	for k := first; k < len(batch); k++ {
		if ids[batch[k].ID] {
			later, laterIdx = append(later, batch[k]), append(laterIdx, idx[k])
			continue
		}
		ids[batch[k].ID] = true
		now, nowIdx = append(now, batch[k]), append(nowIdx, idx[k])
	}
	return now, nowIdx, later, laterIdx
}

// Finish applies a batch of transitions on a driver's transaction: all job
// rows first, then every touched key once, in name order, so that two
// concurrent finishes on a multi-node driver lock keys in the same order.
// A retry that its keys pace is made eligible at once first (see
// PacedRetry), in ts.
func Finish(tx FinishTx, ts []Transition) ([]error, error) {
	errs, _, err := FinishReleased(tx, ts)
	return errs, err
}

// FinishReleased is Finish that also reports whether the finish released
// something: whether a lease after it (or beside it, on a multi-node
// driver) may take a job that a lease before it could not. That is when a
// job went back to waiting or to a retry (its group is readied), or an
// ended attempt held a key that is not unpaced (its in-flight count, a
// window's flight or its pacing changed, and a multi-node driver locked it
// exclusively, so a lease beside the finish skipped its groups), or an
// outcome may have written an unpaced key (KeyEffect.Disturbs: also locked
// exclusively). A finish of attempts whose keys are all unpaced (or none)
// and that succeeded or failed for good releases nothing: an unpaced key
// admits by its pause alone, which such an outcome leaves as it was.
// Conflicts released nothing either: nothing was written for them.
func FinishReleased(tx FinishTx, ts []Transition) (errs []error, released bool, err error) {
	if err := pacedRetries(tx, ts); err != nil {
		return nil, false, err
	}
	for i := range ts {
		if ts[i].Parent != nil {
			ts[i].Parent.Job = nil // a driver may run a finish again (a retried transaction)
		}
	}
	errs = make([]error, len(ts))
	type applied struct {
		t     *Transition
		keys  []string
		cost  int64
		group int64
	}
	var done []applied
	var names []string
	// Valid transitions go to EndAttempts together, a job at most once per
	// call: a second transition of the same job in one batch would have met
	// a finished attempt, so it goes in a later call and conflicts there.
	// Sized once: a Transition is several hundred bytes, and growing these
	// by append copied each one about twice more (docs/benchmarks.md,
	// "Session 15 (s15h5)").
	idx := make([]int, 0, len(ts))
	batch := make([]Transition, 0, len(ts))
	for i := range ts {
		t := &ts[i]
		if !job.CanTransition(job.StateRunning, t.To) {
			errs[i] = errors.New("finish: running -> " + string(t.To) + " is not a transition")
			continue
		}
		idx, batch = append(idx, i), append(batch, *t)
	}
	for len(batch) > 0 {
		now, nowIdx, later, laterIdx := splitRepeats(batch, idx)
		ended, err := tx.EndAttempts(now)
		if err != nil {
			return nil, false, err
		}
		for k, e := range ended {
			i := nowIdx[k]
			t := &ts[i]
			if e.Conflict {
				errs[i] = ErrConflict
				continue
			}
			if t.To == job.StateWaiting || t.To == job.StateRetryScheduled {
				if err := tx.GroupReady(e.Group, t.EligibleAt); err != nil {
					return nil, false, err
				}
				released = true
			}
			if len(e.Keys) > 0 && t.Keys.Disturbs() {
				released = true
			}
			if err := advanceParent(tx, t); err != nil {
				return nil, false, err
			}
			done = append(done, applied{t, e.Keys, e.Cost, e.Group})
			names = append(names, e.Keys...)
		}
		batch, idx = later, laterIdx
	}
	if len(done) == 0 {
		return errs, released, nil
	}
	slices.Sort(names)
	names = slices.Compact(names)
	states, err := tx.LockKeysWait(names)
	if err != nil {
		return nil, false, err
	}
	// An unpaced key is written only when an outcome changed it (a pause);
	// a plain success or failure leaves it as it was.
	before := make(map[string]admission.State, len(states))
	for n, st := range states {
		if st != nil && st.Unpaced() {
			before[n] = *st
		}
	}
	var unblock []int64
	for _, a := range done {
		if atCap(states, a.keys) {
			unblock = append(unblock, a.group)
		}
		ApplyKeyEffect(states, a.keys, a.cost, a.t.Keys)
	}
	// A lease that met one of these keys at its cap blocked the group for
	// admission.CapRetry, though the cap frees exactly when a finish ends
	// a lease: the group is looked at again at once instead, so the next
	// job of a key held at a cap of one starts one write after the answer
	// (see FinishLeaser), not up to CapRetry later. It is a hint: the next
	// lease checks admission as always.
	slices.Sort(unblock)
	for _, g := range slices.Compact(unblock) {
		if err := tx.GroupUnblock(g); err != nil {
			return nil, false, err
		}
	}
	save := make([]*admission.State, 0, len(states))
	for _, n := range names {
		st := states[n]
		if st == nil {
			continue
		}
		if b, ok := before[n]; ok && unchanged(&b, st) {
			continue
		}
		save = append(save, st)
	}
	if len(save) == 0 {
		return errs, released, nil
	}
	if err := tx.SaveKeys(save); err != nil {
		return nil, false, err
	}
	return errs, true, nil // every paced key is saved: its start ended
}

// advanceParent writes t.Parent, when t has one and ends its job (the
// part) final, right after t was written: job rows first, as the lock
// order of Finish wants, and the parent's after its part's. It sets
// t.Parent.Job to the parent as written, nil when the guard failed.
func advanceParent(tx FinishTx, t *Transition) error {
	if t.Parent == nil {
		return nil
	}
	t.Parent.Job = nil
	if !t.To.Final() {
		return nil // not the part's end: its parent is not ready
	}
	if err := t.Parent.Check(); err != nil {
		return err
	}
	j, err := tx.AdvanceParent(t.ID, t.Parent)
	t.Parent.Job = j
	return err
}

// atCap reports whether one of the keys (those in states) has all the
// leases in flight its concurrency cap allows.
func atCap(states map[string]*admission.State, keys []string) bool {
	for _, name := range keys {
		if st := states[name]; st != nil {
			if c := st.InFlightCap(); c > 0 && st.InFlight >= c {
				return true
			}
		}
	}
	return false
}

// Disturbs reports whether a finished attempt's key effect may change an
// unpaced key: a refusal, a pause or a hint. Any other outcome (a success,
// a plain failure) leaves an unpaced key as it was, so a multi-node driver
// need not lock it exclusively for that attempt.
func (e KeyEffect) Disturbs() bool {
	return e.RateLimited || !e.PauseUntil.IsZero() || len(e.Hints) > 0
}

// endAt is when the attempt's start ends on its keys: e.Answered when it
// is known and not after e.Now, e.Now otherwise.
func (e KeyEffect) endAt() time.Time {
	if !e.Answered.IsZero() && e.Answered.Before(e.Now) {
		return e.Answered
	}
	return e.Now
}

// unchanged reports whether an unpaced key's stored state is the same
// after a finish as before it.
func unchanged(b, a *admission.State) bool {
	return b.PausedUntil.Equal(a.PausedUntil) && b.TAT.Equal(a.TAT) && b.LearnedRate == a.LearnedRate &&
		b.LastRefusal.Equal(a.LastRefusal)
}

// ApplyKeyEffect applies one finished attempt of a job of the given cost
// to its keys: the in-flight lease is ended on every key at e.Answered,
// or e.Now when that is unknown (admission.State.End: a window logs the
// start then, when its answer is known to be in, and no longer counts it
// in flight), then the outcome's effects (an adaptive key's probe upward,
// a pause and limit discovery, hints, cost reconciliation) are applied at
// e.Now. The answer was in when the handler returned, which is before the
// finish loop took the outcome and the transaction wrote it; the upstream
// counted the request before it answered, so logging the start at the
// handler's return keeps a window's guarantee and gives the start's slot
// back that much sooner (one finish-queue delay per window).
// Keys missing from states are ignored.
func ApplyKeyEffect(states map[string]*admission.State, jobKeys []string, cost int64, e KeyEffect) {
	scope := e.Scope
	if len(scope) == 0 {
		scope = jobKeys
	}
	for _, name := range jobKeys {
		st := states[name]
		if st == nil {
			continue
		}
		if st.Unpaced() {
			if !e.Disturbs() {
				continue
			}
			// Its in-flight count is not kept in its row (see
			// admission.Config.Unpaced): nothing to release.
		} else {
			st.End(e.endAt(), cost)
		}
		inScope := slices.Contains(scope, name)
		switch {
		case e.RateLimited && e.Backoff && inScope:
			st.Throttled(e.Now, e.PauseUntil, max(1, e.Estimated))
		case e.RateLimited && inScope:
			st.RateLimited(e.Now, e.PauseUntil, max(1, e.Estimated))
		case !e.PauseUntil.IsZero() && inScope:
			st.Pause(e.PauseUntil)
		case e.Success:
			st.Succeeded(e.Now)
		}
		for _, h := range e.Hints {
			if h.Key == "" || h.Key == name {
				st.Hint(e.Now, h)
			}
		}
		st.Reconcile(e.Now, e.Estimated, e.Actual)
	}
}
