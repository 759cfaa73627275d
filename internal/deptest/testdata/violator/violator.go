// Package violator writes job state around engine.Jobs, in each way
// TestOneJobWriter must catch; it is built only by that test (testdata is
// outside ./...).
package violator

import (
	"context"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
)

type wrapped struct{ store.Store }

// Write writes through the store four ways (and claims a publication),
// and reads once.
func Write(ctx context.Context, st store.Store, d *sqlite.Store, w *engine.Jobs) {
	_, _ = st.Insert(ctx, nil, admission.Config{})     // the interface
	_, _ = d.Cancel(ctx, "id", time.Time{})            // a driver type
	_, _ = wrapped{st}.Redrive(ctx, "id", time.Time{}) // an embedded store
	advance := w.Store().Advance                       // a method value, reached via engine.Jobs
	_, _ = advance(ctx, store.AdvanceParams{})
	_ = st.ClaimPublish(ctx, "id", "token", time.Time{}, time.Time{}) // a claim on a job's publication
	_, _, _ = d.FinishLease(ctx, nil, store.LeaseParams{})            // an optional interface's writer (store.FinishLeaser)
	_, _ = st.Get(ctx, "id")                                          // a read: allowed
}

// inserter is satisfied by a store: a store handed over as one writes
// around engine.Jobs.
type inserter interface {
	Insert(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error)
}

// getter is satisfied by a store too, but only reads: allowed.
type getter interface {
	Get(ctx context.Context, id string) (*job.Job, error)
}

// Hold keeps a store as an inserter and a getter.
func Hold(st store.Store) (any, getter) { return inserter(st), st }
