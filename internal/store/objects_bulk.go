package store

import "context"

// ObjectsBulk stores many region objects in one write: a batch manifest of
// 1,000 reviews is 2,000 objects (each review's diff and its part), which
// one PutObject each made 2,000 serial commits through the region's one
// writer, queued beside the interactive lane's writes.
type ObjectsBulk interface {
	// PutObjects stores each of os as PutObject would (replacing any
	// previous one), all in one transaction: all or nothing. Callers keep
	// groups to a few hundred objects so that the transaction stays
	// short. In the batch lane (WithLane) a single-writer store may commit
	// a group in pieces (see WithPieces): on an error a prefix of the
	// group may be stored. An empty os writes nothing.
	PutObjects(ctx context.Context, os []Object) error
}
