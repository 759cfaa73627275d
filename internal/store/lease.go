package store

import (
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

// Group is the set of waiting jobs that share lane, tenant, kind and limit
// keys. Such jobs are admitted by exactly the same keys, so the scheduler
// looks at the head of each ready group rather than scanning jobs: a group
// whose key has no token is skipped without blocking the others (no
// head-of-line blocking), and groups are served round-robin, so one tenant's
// backlog never delays another tenant's job by more than a round.
type Group struct {
	ID     int64
	Lane   job.Lane
	Tenant string
	Kind   string
	Keys   []string
}

// Candidate is a job at the head of a group.
type Candidate struct {
	ID   string
	Cost int64
}

// GroupFilter narrows the groups a lease looks at. Zero fields match all.
type GroupFilter struct {
	Kinds  []string
	Tenant string
}

// GroupTouch is what one lease call learned about a group it examined.
type GroupTouch struct {
	ID           int64
	BlockedUntil time.Time
	// Empty means the group had no eligible job.
	Empty bool
}

// Leased is a candidate admitted by all its keys, with its new lease token.
type Leased struct {
	ID    string
	Token string
}

// LeaseTx is what a driver provides inside one write transaction so that the
// shared Lease logic can run on it. On a multi-node driver every method
// locks what it returns for the rest of the transaction.
type LeaseTx interface {
	// PromoteDue moves retry_scheduled jobs whose eligible_at has come to
	// waiting.
	PromoteDue(now time.Time) error
	// OldestReady returns the eligible_at of the oldest eligible waiting job
	// of the lane; ok is false when there is none.
	OldestReady(lane job.Lane, now time.Time) (at time.Time, ok bool, err error)
	// ReadyGroups returns up to limit groups of the lane that may have an
	// eligible job and are not known to be blocked, least recently served
	// first. Groups locked by another transaction are skipped.
	ReadyGroups(lane job.Lane, f GroupFilter, now time.Time, limit int) ([]Group, error)
	// Heads returns up to limit eligible waiting jobs of the group in
	// scheduling order: priority (high first), eligible_at, id.
	Heads(g Group, now time.Time, limit int) ([]Candidate, error)
	// LockKeys returns the states of the named keys, locked. A key locked by
	// another transaction may be left out; the caller then skips the group.
	// An unpaced key (admission.Config.Unpaced) is never written by a
	// lease, so a multi-node driver need only lock it against a
	// reconfiguration, not against other leases and finishes.
	LockKeys(names []string) (map[string]*admission.State, error)
	// SaveKeys writes back the given key states.
	SaveKeys(keys []*admission.State) error
	// TouchGroups marks groups as served now (they move to the back of the
	// round, in the given order), records when each is blocked until, and
	// for each empty one recomputes when it next has an eligible job.
	TouchGroups(touches []GroupTouch) error
	// MarkLeased moves the jobs to running with their tokens and lease
	// expiry, counts an attempt, and returns them.
	MarkLeased(jobs []Leased, now, until time.Time) ([]*job.Job, error)
}

// ManyHeadsTx is an optional extension of LeaseTx for drivers where each
// call is a network round trip: the heads of several groups at once, keyed
// by group id, each as Heads would return them.
type ManyHeadsTx interface {
	ManyHeads(gs []Group, now time.Time, limit int) (map[int64][]Candidate, error)
}

// KeysHeadsTx is an optional extension of ManyHeadsTx: LockKeys(names) and
// then ManyHeads(gs, now, limit), in one round trip.
type KeysHeadsTx interface {
	ManyHeadsTx
	LockKeysManyHeads(names []string, gs []Group, now time.Time, limit int) (map[string]*admission.State, map[int64][]Candidate, error)
}

// Lease runs ratelane's scheduling order on a driver's transaction: batch's
// minimum share first (only while interactive work is within its budget),
// then interactive, then batch; within a lane, groups round-robin; a job is
// taken only when every one of its keys admits it.
func Lease(tx LeaseTx, p LeaseParams, newToken func() string) ([]*job.Job, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	if err := tx.PromoteDue(p.Now); err != nil {
		return nil, err
	}
	batchCap := p.BatchLaneCap()
	batchFirst := min(p.BatchMin, batchCap)
	switch p.Lane {
	case job.LaneInteractive:
		batchCap, batchFirst = 0, 0
	case job.LaneBatch:
		// No interactive work to share the slots with: the last step
		// takes the batch lane's whole bound, and the interactive lane's
		// age is not read.
		batchFirst = 0
	}
	if batchFirst > 0 && p.InteractiveBudget > 0 {
		oldest, ok, err := tx.OldestReady(job.LaneInteractive, p.Now)
		if err != nil {
			return nil, err
		}
		if ok && p.Now.Sub(oldest) > p.InteractiveBudget {
			batchFirst = 0
		}
	}
	l := &leaser{tx: tx, p: p, keys: map[string]*admission.State{}, taken: map[string]bool{}, newToken: newToken, counted: p.BatchCap()}
	steps := []struct {
		lane job.Lane
		n    int
	}{{job.LaneBatch, batchFirst}, {job.LaneInteractive, p.Max}, {job.LaneBatch, batchCap}}
	batchTook := 0
	for i, s := range steps {
		if i == 2 && l.batchEmpty {
			// The first step found no ready batch group at this now; a
			// second look in the same call would only cost a query.
			break
		}
		if p.Lane != "" && s.lane != p.Lane {
			continue
		}
		n := s.n
		if s.lane == job.LaneBatch {
			n -= batchTook
		}
		if want := min(n, p.Max-len(l.chosen)); want > 0 {
			before, counting := len(l.chosen), l.counted > 0
			if err := l.lane(s.lane, want); err != nil {
				return nil, err
			}
			if s.lane == job.LaneBatch {
				if took := len(l.chosen) - before; counting && l.counted <= 0 && took < want && len(p.BatchMaxKinds) > 0 && len(p.Kinds) > 0 {
					// The counted kinds' bound was reached on groups that
					// may have hidden the other kinds' (a look is 2*want+16
					// groups): look again for those alone (with Kinds
					// empty no filter can name them, and the same groups
					// would come back).
					if err := l.lane(s.lane, want-took); err != nil {
						return nil, err
					}
				}
				batchTook += len(l.chosen) - before
			}
		}
	}
	if p.NextAdmission != nil && !l.wake.IsZero() {
		p.NextAdmission(l.wake)
	}
	if len(l.chosen) == 0 {
		return nil, nil
	}
	// Only keys that admitted a start changed; the others were read (and
	// locked) to decide, and need no write.
	if err := tx.SaveKeys(l.changed); err != nil {
		return nil, err
	}
	return tx.MarkLeased(l.chosen, p.Now, p.Now.Add(p.LeaseFor))
}

type leaser struct {
	tx       LeaseTx
	p        LeaseParams
	keys     map[string]*admission.State
	changed  []*admission.State // keys a start was taken from, once each
	chosen   []Leased
	taken    map[string]bool // a lane may be visited twice in one call
	newToken func() string
	wake     time.Time // the earliest blocked-until of the groups skipped
	// batchEmpty: the batch lane had no ready group in this call (its
	// kinds filter only narrows as counted falls, so a second look would
	// find none either).
	batchEmpty bool
	// counted is how many more batch-lane jobs of the kinds BatchMax
	// counts the call may take.
	counted int
	// keyBuf is lockKeys' result, reused from one call to the next.
	keyBuf []*admission.State
}

// capped reports whether c is a batch-lane group of a kind BatchMax
// counts whose bound the call has reached.
func (l *leaser) capped(c *groupCursor) bool {
	return c.g.Lane == job.LaneBatch && l.counted <= 0 && l.p.BatchCounts(c.g.Kind)
}

type groupCursor struct {
	g       Group
	heads   []Candidate
	next    int
	fetched bool
	more    bool // the last fetch was full: the group may have more heads
	limit   int  // how many heads the next fetch asks for
	empty   bool
	blocked time.Time
	took    int // starts taken from the group in this call
}

// lane takes up to want jobs from the lane's ready groups, one job per group
// per pass, so the groups share the slots evenly.
func (l *leaser) lane(lane job.Lane, want int) error {
	kinds := l.p.Kinds
	if lane == job.LaneBatch {
		kinds = l.p.BatchKinds(l.counted)
		if len(l.p.Kinds) > 0 && len(kinds) == 0 {
			return nil // every kind is counted, and the bound is reached
		}
	}
	groups, err := l.tx.ReadyGroups(lane, GroupFilter{Kinds: kinds, Tenant: l.p.Tenant}, l.p.Now, 2*want+16)
	if err != nil {
		return err
	}
	if len(groups) == 0 {
		l.batchEmpty = l.batchEmpty || lane == job.LaneBatch
		return nil
	}
	cursors := make([]*groupCursor, len(groups))
	first := want/len(groups) + 1 // a fair share of the slots, then more on demand
	var names []string
	for i, g := range groups {
		cursors[i] = &groupCursor{g: g, limit: first}
		names = append(names, g.Keys...)
	}
	// The first pass visits at least the first want groups; fetch their
	// heads together where the driver can, and with the keys where it can.
	mh, many := l.tx.(ManyHeadsTx)
	kh, keysHeads := l.tx.(KeysHeadsTx)
	many = many && len(cursors) > 1
	if !many || !keysHeads || len(l.missing(names)) == 0 {
		if _, err := l.lockKeys(names); err != nil { // one round trip for every group's keys
			return err
		}
		keysHeads = false
	}
	if many {
		pre := cursors[:min(len(cursors), want)]
		gs := make([]Group, len(pre))
		for i, c := range pre {
			gs[i] = c.g
		}
		limit := min(first, want)
		var heads map[int64][]Candidate
		var err error
		if keysHeads {
			missing := l.missing(names)
			var got map[string]*admission.State
			if got, heads, err = kh.LockKeysManyHeads(missing, gs, l.p.Now, limit); err == nil {
				for _, n := range missing {
					l.keys[n] = got[n] // nil records "unavailable", as in lockKeys
				}
			}
		} else {
			heads, err = mh.ManyHeads(gs, l.p.Now, limit)
		}
		if err != nil {
			return err
		}
		for _, c := range pre {
			c.heads, c.fetched = heads[c.g.ID], true
			c.more = len(c.heads) == limit
			c.limit *= 4
		}
	}
	active := cursors
	for want > 0 && len(active) > 0 {
		var still []*groupCursor
		for _, c := range active {
			if want == 0 {
				break
			}
			if l.capped(c) {
				continue // left for a lease with a turn free
			}
			took, err := l.step(c, want)
			if err != nil {
				return err
			}
			if took {
				want--
				still = append(still, c)
			}
		}
		active = still
	}
	// Groups not examined keep their place in the round. Examined groups
	// are touched in two runs: those that got no start first, then those
	// served, so a served group goes behind every group it was preferred
	// to. (Touching them all in round order kept the first group first
	// forever on a key that admits one start per call: it was served, the
	// others refused, and the order came back unchanged.)
	var touches, served []GroupTouch
	for _, c := range cursors {
		if !c.blocked.IsZero() && (l.wake.IsZero() || c.blocked.Before(l.wake)) {
			l.wake = c.blocked
		}
		if !c.fetched {
			continue
		}
		t := GroupTouch{ID: c.g.ID, BlockedUntil: c.blocked, Empty: c.empty}
		if c.took > 0 {
			served = append(served, t)
		} else {
			touches = append(touches, t)
		}
	}
	touches = append(touches, served...)
	if len(touches) == 0 {
		return nil
	}
	return l.tx.TouchGroups(touches)
}

// step tries to admit the next head of one group.
func (l *leaser) step(c *groupCursor, want int) (bool, error) {
	for {
		for c.next < len(c.heads) && l.taken[c.heads[c.next].ID] {
			c.next++
		}
		if c.next < len(c.heads) || (c.fetched && !c.more) {
			break
		}
		// Fetch again, larger: jobs taken so far are still waiting in the
		// table until MarkLeased, and are skipped above.
		limit := min(c.limit, len(c.heads)+want)
		heads, err := l.tx.Heads(c.g, l.p.Now, limit)
		if err != nil {
			return false, err
		}
		c.heads, c.next, c.fetched, c.more = heads, 0, true, len(heads) == limit
		c.limit *= 4
	}
	if c.next >= len(c.heads) {
		c.empty = len(c.heads) == 0
		return false, nil
	}
	keys, err := l.lockKeys(c.g.Keys)
	if err != nil || keys == nil {
		return false, err
	}
	cand := c.heads[c.next]
	for _, k := range keys {
		if ok, next := k.Check(l.p.Now, cand.Cost); !ok {
			if next.After(c.blocked) {
				c.blocked = next
			}
		}
	}
	if !c.blocked.IsZero() {
		return false, nil
	}
	for _, k := range keys {
		if k.Unpaced() {
			// A start changes nothing an unpaced key decides on: no
			// write, and on a multi-node driver no exclusive lock.
			continue
		}
		if !slices.Contains(l.changed, k) {
			l.changed = append(l.changed, k)
		}
		k.Take(l.p.Now, cand.Cost)
	}
	c.next++
	c.took++
	if c.g.Lane == job.LaneBatch && l.p.BatchCounts(c.g.Kind) {
		l.counted--
	}
	l.taken[cand.ID] = true
	l.chosen = append(l.chosen, Leased{ID: cand.ID, Token: l.newToken()})
	return true, nil
}

// missing returns the names not loaded yet in this transaction, once each.
func (l *leaser) missing(names []string) []string {
	var missing []string
	seen := map[string]bool{}
	for _, n := range names {
		if _, ok := l.keys[n]; !ok && !seen[n] {
			seen[n] = true
			missing = append(missing, n)
		}
	}
	return missing
}

// lockKeys returns the group's key states, loading and locking those not
// seen yet in this transaction; nil when one is locked elsewhere or missing.
func (l *leaser) lockKeys(names []string) ([]*admission.State, error) {
	if missing := l.missing(names); len(missing) > 0 {
		got, err := l.tx.LockKeys(missing)
		if err != nil {
			return nil, err
		}
		for _, n := range missing {
			st := got[n]
			l.keys[n] = st // nil records "unavailable" for the rest of the call
		}
	}
	// The slice is the leaser's, reused by the next call: step reads it
	// before it asks again.
	out := l.keyBuf[:0]
	for _, n := range names {
		st := l.keys[n]
		if st == nil {
			return nil, nil
		}
		out = append(out, st)
	}
	l.keyBuf = out
	return out, nil
}
