package store

import "context"

// BatchSettles is the grouped side of the batch lane's store contract, for
// a sweep's volume: a provider batch's results (up to thousands of items)
// are settled a group at a time rather than in one transaction each, and
// a batch-lane review's aggregation reads its batch's owner without
// counting the batch's items.
//
// A settled item goes through the region's one writer (SQLite) or one
// transaction (PostgreSQL) like any write; settling a 1,000-item chunk an
// item at a time made a sweep about 1,000 serial commits per chunk queued
// beside the interactive lane's writes (docs/benchmarks.md, "Batch never
// hurts interactive").
type BatchSettles interface {
	// SettleBatchItems applies each of ps exactly as SettleBatchItem
	// would (guarded on the item still being in p.From and, when
	// p.ChunkKey is set, in that chunk), all in one transaction, and
	// reports for each whether it applied. It is all or nothing: when one
	// write fails (a row the schema refuses) none is kept and the error
	// is returned. Callers keep groups to a few hundred items so that the
	// transaction stays short. In the batch lane (WithLane) a
	// single-writer store may commit a group in pieces (see WithPieces):
	// on an error the items before the refused one's piece may be
	// settled, and none at or after it is. An empty ps writes nothing.
	SettleBatchItems(ctx context.Context, ps []SettleBatchItemParams) ([]bool, error)
	// GetBatchHead returns one batch without its item counts (Counts is
	// zero), or ErrNotFound. It is what a reader that only needs a
	// batch's owner and state wants: GetBatch counts every item of the
	// batch, which for a review of a 1,000-item batch costs a thousand
	// index entries per aggregation.
	GetBatchHead(ctx context.Context, id string) (*Batch, error)
}
