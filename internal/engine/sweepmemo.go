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
// up to 32, aggregated one after the other under one turn). Unlike a
// SweepMemo it is for records that do not change while a group is
// aggregated — a batch's tenant and region, not its items' states, which
// each woken parent must read afresh (a wake-up says they changed). The
// parents of a group usually share one batch, so a read of its head per
// parent was most of what a group allocated (docs/benchmarks.md,
// "Session 22 (s22h4)": 14.6 % of the 10,000-file sweep's bytes).
//
// Only successful loads are remembered: a failed read (a batch not yet
// recorded) is tried again by the next parent, as without a memo.
//
// A GroupMemo is safe for concurrent use. The zero value is not usable;
// the engine makes one per group.
type GroupMemo struct {
	mu sync.Mutex
	m  map[any]any
}

type groupMemoKey struct{}

// WithGroupMemo returns ctx carrying a new memo for one woken batch
// group. The engine calls it for each group; a plug-in's tests call it
// to run their Aggregator as a group does.
func WithGroupMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, groupMemoKey{}, &GroupMemo{m: map[any]any{}})
}

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
