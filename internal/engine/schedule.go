package engine

import (
	"context"

	"github.com/ratelane/ratelane/internal/store"
)

// ClaimTick claims one tick of a schedule and inserts its job in one
// guarded write (store.Schedules.ClaimTick): the way a periodic producer
// (internal/schedule) creates jobs, so that they are counted like every
// other insert. ErrConflict when another node claimed the tick first.
func (w *Jobs) ClaimTick(ctx context.Context, p store.ClaimTickParams) (store.ClaimTickResult, error) {
	res, err := w.cfg.Store.ClaimTick(ctx, p)
	if err != nil {
		return res, err
	}
	if res.Job != nil && !res.Existing {
		w.mu.Lock()
		if w.stats != nil {
			w.stats.inserted(res.Job)
		}
		w.mu.Unlock()
	}
	return res, nil
}
