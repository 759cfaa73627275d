package sqlite

import (
	"context"
	"errors"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// gapWait bounds how long a long batch-lane write waits for a gap in the
// interactive work (writeInGap) before it runs whatever is about, so that
// a batch lane beside interactive work that never pauses still moves. A
// variable for this package's tests.
var gapWait = 100 * time.Millisecond

// errPutOff is a gap write the writer came to while interactive work was
// about: it wrote nothing and is queued again after the next gap opens.
var errPutOff = errors.New("sqlite: interactive work about; the write waits for a gap")

// writeInGap is write for a batch-lane write that holds the writer long
// and cannot be split into pieces (PlanBatchChunk: a chunk and its
// thousand items' move are one fact, one statement of 7-9 ms under a
// sweep, docs/benchmarks.md, "Session 33 (s33h2)"). The writer runs fn
// only when it comes to it with no interactive write queued and no
// watcher (WatchInteractive) reporting interactive work in flight: an
// interactive write arriving then would wait behind all of it, where
// behind the batch lane's other writes it waits for a piece. Put off, fn
// has written nothing (the check comes first); the write waits, off the
// writer, for the watchers to report a gap and is queued again. Past
// gapWait it runs regardless. Atomicity is write's: fn runs once, whole,
// in one transaction. An interactive write, or a store without watchers,
// runs as write.
func (s *Store) writeInGap(ctx context.Context, fn func(tx *writeTx) error) error {
	if store.LaneOf(ctx) != job.LaneBatch {
		return s.write(ctx, fn)
	}
	deadline := time.Now().Add(gapWait)
	for {
		if err := s.waitGap(ctx, deadline); err != nil {
			return err // not queued: nothing written
		}
		err := s.write(ctx, func(tx *writeTx) error {
			if time.Now().Before(deadline) {
				if s.interactiveAbout() {
					s.gapPutOff.Add(1)
					noteWrite(&writeReq{lane: job.LaneBatch, kind: "GAP put-off"}, 0, 0)
					return errPutOff
				}
			} else {
				s.gapLate.Add(1)
				noteWrite(&writeReq{lane: job.LaneBatch, kind: "GAP late"}, 0, 0)
			}
			return fn(tx)
		})
		if !errors.Is(err, errPutOff) {
			return err
		}
	}
}

// waitGap returns once no interactive work is about (interactiveAbout),
// or at deadline, asking every holdPoll as the writer's hold does; ctx's
// end ends the wait with its error.
func (s *Store) waitGap(ctx context.Context, deadline time.Time) error {
	var t *time.Timer
	if cpulabel.On && s.interactiveAbout() {
		t0 := time.Now()
		defer func() { noteWrite(&writeReq{lane: job.LaneBatch, kind: "GAP waited"}, time.Since(t0), 0) }()
	}
	for s.interactiveAbout() {
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil
		}
		wait = min(wait, holdPoll)
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
