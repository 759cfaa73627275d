package store

import (
	"context"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// WriteCounts are a store's cumulative write figures since it was opened:
// Writes is the number of write calls (each one guarded write of the
// contract), Transactions the number of transactions that committed them
// (the SQLite writer commits every write queued at the moment together,
// one fsync each). Writes ÷ Transactions is the group commit's yield.
//
// Lanes, when the store keeps them (the SQLite driver), break the writes
// down by the lane class their caller marked with WithLane: how long each
// waited for the writer and how many of the other lane's writes it waited
// behind.
type WriteCounts struct {
	Writes       int64
	Transactions int64
	Lanes        map[job.Lane]LaneWrites
}

// LaneWrites are one lane's writes through a single-writer store.
type LaneWrites struct {
	// Wait is the time from each write's call to the moment the writer
	// started it, in seconds, over WaitBounds.
	Wait Histogram
	// Behind is, for each write, how many writes of the other lane the
	// writer ran between the write's call and its commit, over
	// BehindBounds. An interactive write waits behind at most the one
	// batch write that was running when it arrived.
	Behind Histogram
}

// WaitBounds are the upper bounds, in seconds, of LaneWrites.Wait's
// buckets: 0.1 ms to 2.5 s.
var WaitBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// BehindBounds are the upper bounds of LaneWrites.Behind's buckets, in
// writes of the other lane.
var BehindBounds = []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256}

// Histogram is a cumulative histogram over fixed bounds: Buckets[i]
// counts the observations at most Bounds[i] (Prometheus' cumulative
// form), Count all of them and Sum their total.
type Histogram struct {
	Bounds  []float64
	Buckets []uint64
	Count   uint64
	Sum     float64
}

// WriteCounter is implemented by a store that counts its writes (the
// SQLite driver); metrics and benchmarks read it when present.
type WriteCounter interface {
	WriteCounts() WriteCounts
}

type laneKey struct{}

// WithLane marks the store writes made with ctx as lane's. A store with a
// single writer (SQLite) serves the interactive lane's writes first: a
// batch-lane write joins a transaction only while no interactive write is
// waiting, so an interactive write waits behind at most the one batch
// write running when it arrived. Writes on an unmarked context are
// interactive: only the batch lane's own code paths (its intake, its
// handlers and its aggregation) mark theirs.
func WithLane(ctx context.Context, lane job.Lane) context.Context {
	return context.WithValue(ctx, laneKey{}, lane)
}

// LaneOf returns the lane WithLane marked ctx with, or job.LaneInteractive.
func LaneOf(ctx context.Context) job.Lane {
	if l, ok := ctx.Value(laneKey{}).(job.Lane); ok && l == job.LaneBatch {
		return job.LaneBatch
	}
	return job.LaneInteractive
}

type piecesKey struct{}

// WithPieces marks ctx's batch-lane writes of many rows as divisible: a
// store with a single writer (SQLite) may commit such a write in pieces of
// a few dozen rows, each atomic, so that interactive writes go in between
// the pieces rather than after the whole write (an interactive write
// waits behind the piece running, not behind a 1,000-job manifest). On an
// error the pieces before the failed one may stay committed; the caller
// must be able to live with a prefix (a manifest's jobs: its drivers find
// no batch and end it). A store whose writes run in parallel ignores it.
// PutObjects and SettleBatchItems in the batch lane are divisible without
// it: each object is an upsert and each settle is guarded.
func WithPieces(ctx context.Context) context.Context {
	return context.WithValue(ctx, piecesKey{}, true)
}

// InPieces reports whether WithPieces marked ctx.
func InPieces(ctx context.Context) bool {
	v, _ := ctx.Value(piecesKey{}).(bool)
	return v
}

type chargeKey struct{}

// WithWriteCharge asks a store with a single writer (SQLite) to tell
// charge how long its writer ran each batch-lane write made with ctx (the
// write itself, not its wait for the writer nor the commit it shares).
// The engine marks the batch-lane writes it makes outside a piece of
// batch work the pacer governs (a batch job's finish, after its handler
// gave its turn back), so that the pacer rests after the writer's time
// for them as it rests after a piece's own (docs/benchmarks.md, "Session
// 28 (s28h1)"). charge runs on the writer's goroutine: it must be quick
// and must not write. A store whose writes run in the caller's goroutine
// ignores it.
func WithWriteCharge(ctx context.Context, charge func(time.Duration)) context.Context {
	return context.WithValue(ctx, chargeKey{}, charge)
}

// WriteChargeOf returns the func WithWriteCharge marked ctx with, or nil.
func WriteChargeOf(ctx context.Context) func(time.Duration) {
	f, _ := ctx.Value(chargeKey{}).(func(time.Duration))
	return f
}
