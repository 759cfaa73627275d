package store

import (
	"context"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

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
	// InsertWithObjects stores os (as PutObjects) and then inserts jobs
	// (as Insert), for jobs that reference the objects: no job of jobs is
	// ever stored, nor leased, without them. A single-writer store does
	// both in one transaction, one commit where a PutObjects and an
	// Insert made two, one after the other, each queued at the writer (an
	// interactive review's part waited through both before it could be
	// leased; docs/benchmarks.md, "Session 19 (s19h5)"); others may write
	// the objects first in a transaction of their own, so that a failed
	// insert can leave them stored, unreferenced, as the two calls did.
	// Results and errors are Insert's.
	InsertWithObjects(ctx context.Context, os []Object, jobs []*job.Job, def admission.Config) ([]InsertResult, error)
}
