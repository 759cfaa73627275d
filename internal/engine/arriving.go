package engine

import (
	"context"
	"sync/atomic"
)

// An arriving review (or any request that will end in an interactive
// insert) is interactive work before its insert is written: its request
// validates its fields, reads the predicted wait, parses its diff and
// plans its parts, a few milliseconds in which, counted only from its
// insert (queuedWork) or its insert's lease (beginInsertLease), the batch
// lane saw no interactive work and started what the insert then queued
// behind: s34h3 found interactive inserts still behind 5 of 50 long
// batch-lane plans that wait for a gap (docs/benchmarks.md, "Session 34
// (s34h3)"). Arriving counts it in the engine's one count of interactive
// work in flight (inFlight) from the request's start, so that every
// consumer of that count sees it: the batch pacer, the yield gate, the
// batch budget and a single-writer store's watcher (the SQLite writer's
// hold, gap checkpoint and gap writes).

// arrivingKey is the context key of an arrival (Engine.Arriving).
type arrivingKey struct{}

// arrival is one piece of arriving interactive work counted in flight,
// ended exactly once: by the insert it led to (arrived) or by its
// caller's end, whichever comes first.
type arrival struct {
	c    *inFlight
	done atomic.Bool
}

// end leaves the count, once.
func (a *arrival) end() {
	if a.done.CompareAndSwap(false, true) {
		a.c.leave()
	}
}

// Arriving counts the caller's work as interactive work in flight from
// now until the interactive insert it leads to is durable (Jobs.Insert and
// the parts' inserts end it then, once the jobs inserted are counted as
// queued or running) or end is called, whichever comes first. Call end
// exactly once, on every path (defer it): a request that fails before its
// insert ends it there, and an end after the insert's does nothing. A ctx
// already arriving is returned as it is with an end that does nothing, so
// nested callers (an API route and the plug-in it calls) count one piece.
//
// It widens the count's meaning to "in flight from the start of the
// request that will insert it": call it only for work that will end in an
// interactive insert, as soon as that is known, and not for batch-lane
// work.
func (e *Engine) Arriving(ctx context.Context) (_ context.Context, end func()) {
	if _, held := ctx.Value(arrivingKey{}).(*arrival); held {
		return ctx, noLeave
	}
	a := &arrival{c: e.interactive}
	e.interactive.enter()
	return context.WithValue(ctx, arrivingKey{}, a), a.end
}

// arrived ends ctx's arrival, if it has one: its insert is durable, and
// the jobs it inserted are counted in flight by then (queued, or running
// when the insert leased them), so the count does not fall between them.
func arrived(ctx context.Context) {
	if a, ok := ctx.Value(arrivingKey{}).(*arrival); ok {
		a.end()
	}
}

// InteractiveInFlight is the engine's count of interactive work in flight
// now (handlers, queued interactive jobs, aggregations, publications and
// arriving requests): what the batch lane's policies and a single-writer
// store's watcher read. A test waits for it to return to zero to show
// that no piece of work leaked its count.
func (e *Engine) InteractiveInFlight() int { return e.interactive.count() }
