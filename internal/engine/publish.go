package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Publication (invariant 2). A validated job is published by running its
// kind's Publisher and then recording the compare-and-set validated ->
// published. Several callers may find the same job validated at once: the
// engine that validated it, a parent's aggregation woken twice, the
// maintenance sweep of this or another node. Recording once is not enough,
// since each of them would run the side effect first, so every caller
// first takes the job's publication claim (store.ClaimPublish) and only
// its holder runs the Publisher. The claim is a lease on the publication:
// held for LeaseFor, renewed every HeartbeatEvery while the Publisher
// runs, released when it fails, cleared by the publication. A holder that
// dies leaves a claim that runs out, and the next sweep publishes again:
// across crashes publication is at least once, which is why publishers
// reuse the job's idempotency key; among live callers it is exactly once.

// claimPrefix returns a random prefix that makes this engine's claim
// tokens unique among every node of the region.
func claimPrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// publish delivers a validated job's result once: it claims the
// publication, runs the kind's Publisher and records validated ->
// published. A Publisher failure releases the claim and leaves the job
// validated; publishPending retries it.
func (e *Engine) publish(ctx context.Context, id string) {
	j, err := e.cfg.Store.Get(ctx, id)
	if err != nil || j.State != job.StateValidated {
		return
	}
	k, ok := e.cfg.Kinds[j.Kind]
	if !ok || k.Publisher == nil && k.Aggregate == nil {
		return
	}
	token := fmt.Sprintf("%s-%d", e.claimPrefix, e.claims.Add(1))
	if err := e.jobs.ClaimPublish(ctx, id, token, e.cfg.Now().Add(e.cfg.LeaseFor)); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// Another caller holds it. If that caller dies, its claim
			// runs out; look again then.
			e.retryPublishAfter(e.cfg.LeaseFor + e.cfg.ReapEvery)
		} else if !errors.Is(err, store.ErrNotFound) {
			e.log.Error("claim publication", "job_id", id, "err", err)
		}
		return
	}
	// An aggregated parent without a publisher has nothing to deliver:
	// its publication is only recorded.
	if k.Publisher != nil {
		if err := e.runPublisher(ctx, k.Publisher, j, token); err != nil {
			e.log.Warn("publish failed; will retry", "job_id", id, "kind", j.Kind, "err", err)
			if err := e.jobs.ClaimPublish(ctx, id, token, e.cfg.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
				e.log.Warn("release publication claim", "job_id", id, "err", err)
			}
			return
		}
	}
	crashpoint.Hit(crashpoint.PublishBeforeCAS)
	if err := e.jobs.Published(ctx, id); err != nil && !errors.Is(err, store.ErrConflict) {
		e.log.Error("record publication", "job_id", id, "err", err)
	} else if err == nil && j.ParentID != "" {
		e.jobs.partFinal(j.ParentID, j.Lane) // a part with a publication step is final now
	}
}

// runPublisher runs p while renewing the publication claim every
// HeartbeatEvery. Losing the claim (a renewal refused: the holder was
// too slow and another caller took over) cancels p's context.
func (e *Engine) runPublisher(ctx context.Context, p Publisher, j *job.Job, token string) error {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(e.cfg.HeartbeatEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-pctx.Done():
				return
			case <-tick.C:
				err := e.jobs.ClaimPublish(ctx, j.ID, token, e.cfg.Now().Add(e.cfg.LeaseFor))
				if errors.Is(err, store.ErrConflict) {
					cancel(errors.New("publication claim lost"))
					return
				} else if err != nil {
					e.log.Warn("renew publication claim", "job_id", j.ID, "err", err)
				}
			}
		}
	}()
	err := p.Publish(pctx, j)
	close(done)
	<-renewed
	if err == nil && context.Cause(pctx) != nil && ctx.Err() == nil {
		err = context.Cause(pctx)
	}
	return err
}

// retryPublishAfter asks maintainLoop to run publishPending once d has
// passed (the earliest such request wins until it runs).
func (e *Engine) retryPublishAfter(d time.Duration) {
	at := e.cfg.Now().Add(d).UnixNano()
	for {
		cur := e.publishRetryAt.Load()
		if cur != 0 && cur <= at {
			return
		}
		if e.publishRetryAt.CompareAndSwap(cur, at) {
			return
		}
	}
}

// publishRetryDue reports whether a requested publishPending is due now,
// and clears the request if so.
func (e *Engine) publishRetryDue() bool {
	at := e.publishRetryAt.Load()
	return at != 0 && e.cfg.Now().UnixNano() >= at && e.publishRetryAt.CompareAndSwap(at, 0)
}

// publishPending publishes every validated job of this engine's kinds, e.g.
// after a crash between validation and publication.
func (e *Engine) publishPending() {
	ctx := context.WithoutCancel(e.ctx)
	for kind, k := range e.cfg.Kinds {
		if k.Publisher == nil && k.Aggregate == nil {
			continue
		}
		after := ""
		for {
			jobs, err := e.cfg.Store.List(ctx, store.ListParams{State: job.StateValidated, Kind: kind, After: after, Limit: 500})
			if err != nil || len(jobs) == 0 {
				break
			}
			for _, j := range jobs {
				e.publish(ctx, j.ID)
			}
			after = jobs[len(jobs)-1].ID
		}
	}
}
