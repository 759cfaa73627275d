package postgres

import (
	"context"
	"slices"
	"sync"

	"github.com/ratelane/ratelane/internal/store"
)

// leaseGate makes a lease wait for a lease of the same Store (the same
// node) that holds every ready group it could take, instead of running a
// transaction that can only come back empty.
//
// A lease locks the ready groups it reads (FOR NO KEY UPDATE SKIP LOCKED)
// until its commit, and reads up to 2*Max+16 of them: on a workload with
// fewer ready groups than that (bench throughput: 16 keys, leases of
// ~30 jobs) it locks them all. A second lease of the same filter started
// meanwhile, which the engine's second fetch loop (engine.Config.InFlight
// 2 on PostgreSQL) does at every finish, skips them all and commits
// nothing: in bench throughput's drain 57 % of the lease transactions
// (825 of 1,450) were such empty ones, two round trips and about eight
// statements each (docs/benchmarks.md, session 11 s11h3). Waiting for the holder's commit instead costs the
// waiting lease at most one lease's duration, in which it would have found
// nothing, and it then sees the groups the holder did not use.
//
// A lease holds the gate from its start (before its first round trip it
// may be about to lock every group) until its commit, unless one of its
// ready-groups reads returns as many groups as it asked for: others may be
// left, and it releases the hold at once. It is waited for only by leases
// with the same filter: kinds or tenant that differ select other groups.
// A waiting lease holds no connection and no lock, and a holder never
// waits for the gate, so the wait is bounded by the holder's transaction,
// which itself never waits on a lock. The waiting lease's now was read by
// its caller before the wait, as before a wait for a pooled connection.
// Other nodes are not involved: their leases still meet these groups' row
// locks and skip them, as before.
type leaseGate struct {
	mu sync.Mutex
	// holds are the leases of this Store between acquire and release, in
	// arrival order; of each filter, the active ones run and the others
	// queue behind them.
	holds []*gateHold
}

// gateHold is one lease's place at the gate.
type gateHold struct {
	f      store.GroupFilter
	active bool          // running: holds, or may be about to hold, every ready group of f
	ready  chan struct{} // closed when the hold becomes active
}

// acquire returns the lease's hold once no earlier lease of the filter f
// holds the gate (first come, first served), or ctx's error.
func (g *leaseGate) acquire(ctx context.Context, f store.GroupFilter) (*gateHold, error) {
	h := &gateHold{f: f, ready: make(chan struct{})}
	g.mu.Lock()
	queued := slices.ContainsFunc(g.holds, func(o *gateHold) bool { return sameFilter(o.f, f) })
	g.holds = append(g.holds, h)
	if !queued {
		g.activate(h)
	}
	g.mu.Unlock()
	select {
	case <-h.ready:
		return h, nil
	case <-ctx.Done():
		g.release(h) // or hand on the turn it was given meanwhile
		return nil, ctx.Err()
	}
}

func (g *leaseGate) activate(h *gateHold) {
	h.active = true
	close(h.ready)
}

// release ends h's hold (once; nil is a no-op) and lets the next queued
// lease of its filter run when no other of the filter is active.
func (g *leaseGate) release(h *gateHold) {
	if h == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holds = slices.DeleteFunc(g.holds, func(o *gateHold) bool { return o == h })
	if !h.active {
		return
	}
	for _, o := range g.holds {
		if sameFilter(o.f, h.f) {
			if !o.active {
				g.activate(o)
			}
			return
		}
	}
}

func sameFilter(a, b store.GroupFilter) bool {
	return a.Tenant == b.Tenant && slices.Equal(a.Kinds, b.Kinds)
}
