package engine

import (
	"context"
	"sync"
)

// SweepMemo holds reads that the Aggregators of one periodic sweep pass
// share. A pass asks every accepted parent of an aggregating kind whether
// it is ready; when thousands of parents wait on a few shared records
// (a batch-lane review's batch and its items), reading those records once
// per pass instead of once per parent is most of the pass's cost
// (session 10: the sweep was 28 % of the 10,000-file batch-isolation
// run's CPU). What a memo holds may be as old as its pass: an Aggregator
// may use it only to conclude "not ready yet", which the next pass or the
// parent's wake-up (PartsChangedIn, read without a memo) corrects.
//
// A SweepMemo is safe for concurrent use. The zero value is not usable;
// the engine makes one per pass.
type SweepMemo struct {
	mu sync.Mutex
	m  map[any]*memoEntry
}

type memoEntry struct {
	once sync.Once
	v    any
	err  error
}

type sweepMemoKey struct{}

// WithSweepMemo returns ctx carrying a new memo for one sweep pass. The
// engine calls it at the start of each pass; a plug-in's tests call it to
// run their Aggregator as a pass does.
func WithSweepMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, sweepMemoKey{}, &SweepMemo{m: map[any]*memoEntry{}})
}

// SweepMemoFrom returns the memo of the sweep pass ctx belongs to, or nil
// when ctx is not a sweep's (a wake-up, a direct AggregateParent): then
// the caller reads afresh.
func SweepMemoFrom(ctx context.Context) *SweepMemo { return valueOf[SweepMemo](ctx, sweepMemoKey{}) }

// valueOf returns ctx's *T under key, or nil.
func valueOf[T any](ctx context.Context, key any) *T {
	v, _ := ctx.Value(key).(*T)
	return v
}

// Load returns the value stored under key, calling load to make it the
// first time key is asked for in the pass (concurrent callers of one key
// wait for that one call). An error is remembered too: the pass does not
// retry a failed read for every parent.
func (m *SweepMemo) Load(key any, load func() (any, error)) (any, error) {
	m.mu.Lock()
	e, ok := m.m[key]
	if !ok {
		e = &memoEntry{}
		m.m[key] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.v, e.err = load() })
	return e.v, e.err
}

// GroupMemo holds reads that the Aggregators of one woken batch group
// share (the parents the batch lane's aggregation loop takes together,
// up to 32, aggregated one after the other under one turn). It lives
// for one group only: a woken parent must see its
// parts at least as fresh as its wake-up (which says they changed), so
// nothing read before the group was formed may serve it. The
// parents of a group usually share one batch, so a read of its head per
// parent was most of what a group allocated (docs/benchmarks.md,
// "Session 22 (s22h4)": 14.6 % of the 10,000-file sweep's bytes).
//
// Only successful loads are remembered: a failed read (a batch not yet
// recorded) is tried again by the next parent, as without a memo.
//
// A GroupMemo is safe for concurrent use. The zero value is not usable;
// the engine makes one per group.
//
// A memo also names the group's parents (Parents), so that an
// Aggregator may read what changes — a batch's items — once for all of
// them at the group's start rather than once per parent: every parent
// of a group was woken before the group was formed, so such a read is at
// least as fresh as each one's wake-up, and a change after it wakes its
// parent again, into a later group (docs/benchmarks.md, "Session 41
// (s41h2)").
type GroupMemo struct {
	mu      sync.Mutex
	m       map[any]any
	parents []string
}

type groupMemoKey struct{}

// WithGroupMemo returns ctx carrying a new memo for one woken batch
// group of parents (their ids, in the group's order). The engine calls it
// for each group, once every wake-up that formed it was taken; a plug-in's
// tests call it to run their Aggregator as a group does.
func WithGroupMemo(ctx context.Context, parents ...string) context.Context {
	return context.WithValue(ctx, groupMemoKey{}, &GroupMemo{m: map[any]any{}, parents: parents})
}

// Parents returns the ids of the group's parents, all woken before the
// group began (see GroupMemo); the caller must not modify it.
func (m *GroupMemo) Parents() []string { return m.parents }

// GroupMemoFrom returns the memo of the woken batch group ctx belongs to,
// or nil when ctx is not a group's (a sweep pass, which has a SweepMemo;
// an interactive wake-up; a direct AggregateParent).
func GroupMemoFrom(ctx context.Context) *GroupMemo { return valueOf[GroupMemo](ctx, groupMemoKey{}) }

// Load returns the value stored under key, calling load to make it when
// key has none yet; an error is returned and not remembered. Concurrent
// callers of a missing key may each call load (a group's aggregations run
// one after the other, so they do not).
func (m *GroupMemo) Load(key any, load func() (any, error)) (any, error) {
	m.mu.Lock()
	v, ok := m.m[key]
	m.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := load()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.m[key] = v
	m.mu.Unlock()
	return v, nil
}
