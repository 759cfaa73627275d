package llmbatch

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Journal persists chunks. Save must be durable when it returns: the
// Driver relies on it to record an intent before the call it announces.
type Journal interface {
	Save(ctx context.Context, c Chunk) error
}

// Sink receives a chunk's reconciliation. After a crash the Driver may
// deliver the same report again (collect is re-run), so Deliver must be
// idempotent per custom_id: publish an item's result at most once.
type Sink interface {
	Deliver(ctx context.Context, c Chunk, rep Report) error
}

// Driver moves chunks through their states, one provider call per Step.
// Its zero value is not usable; set Provider, Journal and Sink.
type Driver struct {
	Provider Provider
	Journal  Journal
	Sink     Sink
	// PollInterval is the wait between polls of a running batch; default 1 min.
	PollInterval time.Duration
	// MinBackoff is the wait after a 429 that gave no Retry-After; a
	// server-given delay always wins. Default 30 s.
	MinBackoff time.Duration
}

func (d *Driver) pollInterval() time.Duration {
	if d.PollInterval > 0 {
		return d.PollInterval
	}
	return time.Minute
}

func (d *Driver) minBackoff() time.Duration {
	if d.MinBackoff > 0 {
		return d.MinBackoff
	}
	return 30 * time.Second
}

// Step performs the chunk's next action at now and returns the new chunk
// (already saved) and the action taken. items are the chunk's items, in
// CustomIDs order (needed by Upload and Create only). What is persisted,
// and why a kill -9 anywhere loses and duplicates nothing:
//
//   - upload: the planned chunk (the intent, with its custom_ids) is
//     already saved; the file id is saved after the call. A crash between
//     the two uploads again (an orphaned file, never a batch).
//   - create: CreateStartedAt is saved before the call and the batch id
//     after. A crash between the two leaves CreateStartedAt set, so the
//     next Step is Find, which adopts the batch the call made instead of
//     creating a second one. A 429 clears it (nothing was created).
//   - poll and cancel: read-mostly; the status is saved after the call.
//   - collect: results are downloaded again whenever the chunk is
//     results_ready, reconciled, handed to the Sink, and only then the
//     chunk is saved reconciled. A crash before that save repeats the
//     download and the delivery, which the Sink absorbs per custom_id.
//
// An error from a call leaves the chunk as it was saved (plus any intent)
// and is returned; the caller tries again later. A *RateLimitedError from
// upload or create is not returned: it becomes NotBefore.
func (d *Driver) Step(ctx context.Context, now time.Time, c Chunk, items []Item) (Chunk, Action, error) {
	p := d.Provider
	a := c.Next(now, p.NeedsUpload())
	var err error
	switch a {
	case ActionDone, ActionWait:
		return c, a, nil
	case ActionUpload:
		var id string
		if id, err = p.Upload(ctx, c.Key, items); err == nil {
			c, err = c.Uploaded(id)
		} else {
			c, err = d.refused(c, now, err)
		}
	case ActionCreate:
		if c, err = c.BeginCreate(now, p.NeedsUpload()); err != nil {
			return c, a, err
		}
		if err = d.Journal.Save(ctx, c); err != nil {
			return c, a, fmt.Errorf("save create intent %s: %w", c.Key, err)
		}
		var id string
		if id, err = p.Create(ctx, c.Key, c.FileID, items); err == nil {
			c, err = c.Created(id)
		} else {
			c, err = d.refused(c, now, err)
		}
	case ActionFind:
		var id string
		var ok bool
		id, ok, err = p.Find(ctx, FindQuery{Key: c.Key, FileID: c.FileID, Count: len(c.CustomIDs), Since: c.CreateStartedAt})
		switch {
		case err != nil:
		case ok:
			c, err = c.Created(id)
		default:
			c, err = c.NotFound()
		}
	case ActionPoll:
		var st Status
		if st, err = p.Poll(ctx, c.BatchID); err == nil {
			c, err = c.Polled(st, now, d.pollInterval())
		}
	case ActionCancel:
		var st Status
		if st, err = p.Cancel(ctx, c.BatchID); err == nil {
			c, err = c.CancelAccepted(st)
		}
	case ActionCollect:
		var rs []Result
		if rs, err = p.Collect(ctx, c.BatchID); err == nil {
			c, err = d.reconcile(ctx, c, Reconcile(c.CustomIDs, c.Status, rs))
		}
	case ActionCancelLocal:
		c, err = d.reconcile(ctx, c, Reconcile(c.CustomIDs, Status{Phase: PhaseEnded, End: EndCancelled}, nil))
	}
	if err != nil {
		return c, a, err
	}
	if err := d.Journal.Save(ctx, c); err != nil {
		return c, a, fmt.Errorf("save chunk %s after %s: %w", c.Key, a, err)
	}
	return c, a, nil
}

// refused turns a 429 into a wait; other errors are returned as they are.
func (d *Driver) refused(c Chunk, now time.Time, err error) (Chunk, error) {
	var rl *RateLimitedError
	if !errors.As(err, &rl) {
		return c, err
	}
	delay := d.minBackoff()
	if rl.HasRetryAfter {
		delay = rl.RetryAfter
	}
	return c.RateLimited(now, delay)
}

func (d *Driver) reconcile(ctx context.Context, c Chunk, rep Report) (Chunk, error) {
	if err := rep.Check(c.CustomIDs); err != nil {
		return c, err
	}
	if err := d.Sink.Deliver(ctx, c, rep); err != nil {
		return c, fmt.Errorf("deliver %s: %w", c.Key, err)
	}
	return c.Reconciled(rep)
}
