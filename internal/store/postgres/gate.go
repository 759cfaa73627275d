package postgres

import (
	"slices"
	"sync"

	"github.com/ratelane/ratelane/internal/store"
)

// leaseGate lets a lease of this Store (this node) come back empty at once,
// without a transaction, while another lease of the Store with the same
// filter holds every ready group it would look at.
//
// A lease locks the ready groups it reads (FOR NO KEY UPDATE SKIP LOCKED)
// until its commit, and reads up to 2*Max+16 of them: on a workload with
// fewer ready groups than that (bench throughput: 16 keys, leases of
// ~30 jobs) it locks them all. A second lease of the same filter started
// meanwhile, which the engine's second fetch loop (engine.Config.InFlight
// 2 on PostgreSQL) does at every finish, skips them all and commits
// nothing: in bench throughput's drain 57 % of the lease transactions
// (825 of 1,450) were such empty ones, two round trips and about eight
// statements each (docs/benchmarks.md, session 11 s11h3). The gate gives
// the same answer, nothing, without asking the server.
//
// It does not make the second lease wait for the first's commit: that was
// tried, and the waiting lease held the worker slots its caller had
// reserved for it while the slots freed meanwhile waited for the next
// call, so leases got smaller (23 jobs against 32) and the drain read
// lower. An empty answer hands the slots back and the engine leases again
// at the next finish's wake-up, as it did after an empty transaction.
//
// A lease holds the gate from its start (before its first round trip it
// may be about to lock every group) until its commit, unless one of its
// ready-groups reads returns as many groups as it asked for: others may be
// left, and it releases the hold at once. Only leases with the same filter
// are turned away: kinds or tenant that differ select other groups. Other
// nodes are not involved: their leases still meet these groups' row locks
// and skip them, as before.
type leaseGate struct {
	mu sync.Mutex
	// holds are the leases of this Store that hold, or may be about to
	// hold, every ready group of their filter.
	holds []*gateHold
}

// gateHold is one lease's hold on the gate.
type gateHold struct {
	f store.GroupFilter
}

// acquire returns the lease's hold, or nil when another lease of the
// filter f holds the gate: the lease would find every group locked.
func (g *leaseGate) acquire(f store.GroupFilter) *gateHold {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.ContainsFunc(g.holds, func(o *gateHold) bool { return sameFilter(o.f, f) }) {
		return nil
	}
	h := &gateHold{f: f}
	g.holds = append(g.holds, h)
	return h
}

// release ends h's hold (once; nil is a no-op).
func (g *leaseGate) release(h *gateHold) {
	if h == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holds = slices.DeleteFunc(g.holds, func(o *gateHold) bool { return o == h })
}

func sameFilter(a, b store.GroupFilter) bool {
	return a.Tenant == b.Tenant && slices.Equal(a.Kinds, b.Kinds)
}
