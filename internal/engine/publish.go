package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
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
//
// The pool. A Publisher is an outbound call (a GitHub review, a webhook
// insert) that may take seconds. Run inside the finish loop it held every
// outcome of the engine behind it, so the finish loop, the aggregation
// loop and the maintenance sweep only queue a validated job's id, and
// Config.Publishers goroutines publish from that queue. The claim is what
// makes this safe: two of the pool's goroutines, or this node and another,
// never both deliver one job. The queue is bounded (publishQueueLen); a
// job that finds it full stays validated and the sweep, asked for one reap
// tick later, queues it again. Ids queued or being published are
// remembered, so the sweep does not queue them twice.

// DefaultPublishers is Config.Publishers' default: enough that one slow
// Publisher (an upstream taking seconds to answer) leaves others running,
// few enough that a burst of validated jobs does not open a burst of
// outbound calls.
const DefaultPublishers = 4

// publishQueueLen bounds the ids of each lane waiting for the publication pool. Past it
// validated jobs wait in the store for the sweep, which costs them a reap
// tick but keeps memory and the finish loop's work bounded.
const publishQueueLen = 1024

// PublishObserver is an optional extension of Observer: an Observer that
// also implements it is told how publications went. Metrics implement it;
// implementations must be fast and safe for concurrent use.
type PublishObserver interface {
	// Publication reports one publication attempt of a job of kind and
	// how it ended: PublishPublished, PublishFailed, PublishHeld or
	// PublishLost.
	Publication(kind, result string)
	// PublicationsQueued reports a change (+1 or -1) of the publications
	// queued for or running on the engine's pool.
	PublicationsQueued(delta int)
}

// Publication results reported to PublishObserver.Publication.
const (
	// PublishPublished: the Publisher succeeded (or the kind has none)
	// and validated -> published was recorded.
	PublishPublished = "published"
	// PublishFailed: the Publisher returned an error (or the engine
	// stopped while it ran); the claim was released and the job stays
	// validated for a later sweep.
	PublishFailed = "failed"
	// PublishHeld: another caller (a live node, or a dead one whose claim
	// has not run out) holds the claim; nothing ran here.
	PublishHeld = "held"
	// PublishLost: the claim was lost while the Publisher ran (a renewal
	// was refused), so its context was cancelled.
	PublishLost = "lost"
)

// errClaimLost is the cause of a Publisher's context cancelled because a
// renewal of its claim was refused.
var errClaimLost = errors.New("publication claim lost")

// pubPool is the engine's publication pool: a bounded queue of validated
// job ids and the goroutines that publish them.
type pubPool struct {
	// q holds the interactive lane's ids and bq the batch lane's: a
	// publisher takes from q first, so an interactive job's publication
	// never waits behind a sweep's queued publications, only behind the
	// ones already running (Config.Publishers).
	q, bq chan pubItem
	// mu guards pending and closed, and every send on q (so that none
	// comes after the close).
	mu      sync.Mutex
	pending map[string]struct{} // queued or being published
	closed  bool
	wg      sync.WaitGroup
	// ctx is the Publishers' context: it outlives the engine's own (a
	// graceful Stop lets queued publications finish) and is cancelled
	// when Stop's deadline passes.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (p *pubPool) init() {
	p.q, p.bq, p.pending = make(chan pubItem, publishQueueLen), make(chan pubItem, publishQueueLen), map[string]struct{}{}
}

// pubItem is a validated job queued for the pool: its id, its lane and
// when it was queued (for StagePublishWait).
type pubItem struct {
	id   string
	lane job.Lane
	at   time.Time
}

// publishes reports whether any kind of the engine has a publication step.
func (e *Engine) publishes() bool {
	for _, k := range e.cfg.Kinds {
		if k.Publisher != nil || k.Aggregate != nil {
			return true
		}
	}
	return false
}

// startPublishers starts the pool, if any kind publishes. Publishers'
// contexts carry ctx's values but not its cancellation (stopPublishers
// ends them).
func (e *Engine) startPublishers(ctx context.Context) {
	if !e.publishes() {
		return
	}
	e.pub.mu.Lock()
	e.pub.ctx, e.pub.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	e.pub.mu.Unlock()
	// Workers publishers take only interactive publications, beside the
	// Publishers shared by both lanes: interactive publications are
	// bounded by the interactive jobs (at most Workers run at once), and
	// with only the shared few a review's two publications (its part's
	// and its own) queued behind each other for seconds under a sweep on a
	// loaded machine (docs/benchmarks.md, "Session 11 (s11h5)").
	for range e.cfg.Workers {
		e.pub.wg.Add(1)
		go e.publishLoop(true)
	}
	for range e.cfg.Publishers {
		e.pub.wg.Add(1)
		go e.publishLoop(false)
	}
}

// stopPublishers closes the queue and waits for the pool to publish what
// is queued, up to ctx's deadline; past it the running Publishers'
// contexts are cancelled (their claims are released, the jobs stay
// validated) and the rest of the queue is dropped for the next start's
// sweep. Called by Stop once nothing queues any more.
func (e *Engine) stopPublishers(ctx context.Context) {
	p := &e.pub
	if p.cancel == nil { // never started
		return
	}
	p.mu.Lock()
	p.closed = true
	close(p.q)
	close(p.bq)
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		p.cancel(errStopping)
		<-done
	}
	p.cancel(nil)
}

// publishLoop is one of the pool's goroutines. An interactiveOnly one
// takes only interactive publications (a batch publication may wait for
// a turn of the batch budget); the others take interactive ones first.
func (e *Engine) publishLoop(interactiveOnly bool) {
	defer e.pub.wg.Done()
	obs := e.publishObserver()
	q, bq := e.pub.q, e.pub.bq
	if interactiveOnly {
		bq = nil
	}
	for q != nil || bq != nil {
		var it pubItem
		var ok bool
		from := &q
		select { // the interactive lane first
		case it, ok = <-q:
		default:
			select {
			case it, ok = <-q:
			case it, ok = <-bq:
				from = &bq
			}
		}
		if !ok { // closed and drained
			*from = nil
			continue
		}
		if e.pub.ctx.Err() == nil {
			if cpulabel.On {
				cpulabel.Set(publishLabel(it.lane))
			}
			start := e.cfg.Now()
			e.observeStage(it.id, "", "", it.lane, stPublishWait, it.at, start)
			e.publish(e.pub.ctx, it.id)
			e.observeStage(it.id, "", "", it.lane, stPublish, start, e.cfg.Now())
		}
		e.pub.mu.Lock()
		delete(e.pub.pending, it.id)
		e.pub.mu.Unlock()
		if obs != nil {
			obs.PublicationsQueued(-1)
		}
	}
}

// queuePublish hands validated job id to the pool without waiting. It
// returns false when the job was not queued: the queue is full (the sweep
// is asked for one reap tick later) or the engine is stopping. A job
// already queued or being published is not queued again.
func (e *Engine) queuePublish(id string, lane job.Lane) bool {
	p := &e.pub
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.pending[id]; dup {
		return true
	}
	if p.closed || p.cancel == nil {
		return false
	}
	q := p.q
	if lane == job.LaneBatch {
		q = p.bq
	}
	select {
	case q <- pubItem{id: id, lane: lane, at: e.cfg.Now()}:
		p.pending[id] = struct{}{}
	default:
		e.retryPublishAfter(e.cfg.ReapEvery)
		return false
	}
	if obs := e.publishObserver(); obs != nil {
		obs.PublicationsQueued(1)
	}
	return true
}

// publishQueued hands a validated job to the pool; an engine whose pool
// does not run (never started, or no kind publishes) publishes inline, as
// a caller of AggregateParent on such an engine expects.
func (e *Engine) publishQueued(ctx context.Context, id string, lane job.Lane) {
	if e.queuePublish(id, lane) {
		return
	}
	e.pub.mu.Lock()
	running := e.pub.cancel != nil
	e.pub.mu.Unlock()
	if !running {
		e.publish(ctx, id)
	}
}

func (e *Engine) publishObserver() PublishObserver {
	po, _ := e.jobs.cfg.Observer.(PublishObserver) // the writer's, as leaseObserver
	return po
}

func (e *Engine) observePublication(kind, result string) {
	if po := e.publishObserver(); po != nil {
		po.Publication(kind, result)
	}
}

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
// validated; publishPending retries it. The pool calls it with its own
// context; AggregateParent and SweepParents call it inline.
//
// A job with nothing to deliver (an aggregated parent of a kind without a
// Publisher, or one whose Publisher says so: Deliverer) takes no claim:
// the claim keeps a side effect from running twice, and without one the
// compare-and-set alone records the publication once. One store write
// instead of two for each such job: a review published nowhere, such as
// every review of a sweep whose results are read through the API
// (docs/benchmarks.md, "Session 20 (s20h5)").
func (e *Engine) publish(ctx context.Context, id string) {
	j, err := e.cfg.Store.Get(ctx, id)
	if err != nil || j.State != job.StateValidated {
		return
	}
	k, ok := e.cfg.Kinds[j.Kind]
	if !ok || k.Publisher == nil && k.Aggregate == nil {
		return
	}
	ctx = store.WithLane(ctx, j.Lane) // a batch job's publication yields to interactive writes
	if j.Lane == job.LaneBatch {
		defer e.batchPublication(ctx)() // and to interactive work in flight
		// A publication's turn is not a computing one the pacer rests
		// after (it mostly waits on a Publisher): its writes are charged.
		ctx = e.chargeWrites(ctx)
	} else {
		e.interactive.enter()
		defer e.interactive.leave()
	}
	if delivers(k.Publisher, j) && !e.deliver(ctx, k.Publisher, j) {
		return
	}
	crashpoint.Hit(crashpoint.PublishBeforeCAS)
	// Recorded even when ctx was cancelled meanwhile: the side effect
	// happened, and not recording it would deliver it again.
	if err := e.jobs.Published(context.WithoutCancel(ctx), id); err != nil && !errors.Is(err, store.ErrConflict) {
		e.log.Error("record publication", "job_id", id, "err", err)
	} else if err == nil {
		e.observePublication(j.Kind, PublishPublished)
		if j.ParentID != "" {
			e.jobs.partFinal(j.ParentID, j.Lane) // a part with a publication step is final now
		}
	}
}

// Deliverer is an optional extension of Publisher: a Publisher that
// delivers nothing for some jobs (a review published nowhere) says which,
// and the engine records their publication without claiming it first.
// Delivers must be fast, must not write, and must be true whenever
// Publish(ctx, j) could have any effect or fail.
type Deliverer interface {
	Delivers(j *job.Job) bool
}

// delivers reports whether publishing j runs p's side effect: false for
// no Publisher (an aggregated parent's publication is only recorded) and
// for a Deliverer that says so.
func delivers(p Publisher, j *job.Job) bool {
	if p == nil {
		return false
	}
	d, ok := p.(Deliverer)
	return !ok || d.Delivers(j)
}

// deliver claims j's publication and runs p under the claim. It reports
// whether the publication is to be recorded: false when another caller
// holds the claim or p failed (its claim then released).
func (e *Engine) deliver(ctx context.Context, p Publisher, j *job.Job) bool {
	id := j.ID
	token := fmt.Sprintf("%s-%d", e.claimPrefix, e.claims.Add(1))
	if err := e.jobs.ClaimPublish(ctx, id, token, e.cfg.Now().Add(e.cfg.LeaseFor)); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// Another caller holds it. If that caller dies, its claim
			// runs out; look again then.
			e.observePublication(j.Kind, PublishHeld)
			e.retryPublishAfter(e.cfg.LeaseFor + e.cfg.ReapEvery)
		} else if !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
			e.log.Error("claim publication", "job_id", id, "err", err)
		}
		return false
	}
	if err := e.runPublisher(ctx, p, j, token); err != nil {
		result := PublishFailed
		if errors.Is(err, errClaimLost) {
			result = PublishLost
		}
		e.observePublication(j.Kind, result)
		e.log.Warn("publish failed; will retry", "job_id", id, "kind", j.Kind, "err", err)
		// Released even when ctx was cancelled (Stop's deadline), so
		// that the next sweep need not wait for the claim to run out.
		rctx := context.WithoutCancel(ctx)
		if err := e.jobs.ClaimPublish(rctx, id, token, e.cfg.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
			e.log.Warn("release publication claim", "job_id", id, "err", err)
		}
		return false
	}
	return true
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
					cancel(errClaimLost)
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
	cause := context.Cause(pctx)
	switch {
	case !errors.Is(cause, errClaimLost):
		return err
	case err == nil:
		// Delivered, but another caller may be delivering too: not
		// recorded here (publishers are idempotent; the holder records).
		return cause
	default:
		return fmt.Errorf("%w: %w", cause, err)
	}
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

// publishPending queues every validated job of this engine's kinds (and
// lanes: a node serving the other lane publishes that one's) for
// the pool, e.g. after a crash between validation and publication, or a
// Publisher that failed. It stops at a full queue (queuePublish then asks
// for another pass a reap tick later) or when the engine stops.
func (e *Engine) publishPending() {
	e.pub.mu.Lock()
	ctx := e.pub.ctx
	e.pub.mu.Unlock()
	if ctx == nil { // no kind publishes
		return
	}
	for kind, k := range e.cfg.Kinds {
		if k.Publisher == nil && k.Aggregate == nil {
			continue
		}
		after := ""
		for {
			jobs, err := e.cfg.Store.List(ctx, store.ListParams{State: job.StateValidated, Kind: kind, Lane: e.lane, After: after, Limit: 500})
			if err != nil || len(jobs) == 0 {
				break
			}
			for _, j := range jobs {
				if !e.queuePublish(j.ID, j.Lane) {
					return
				}
			}
			after = jobs[len(jobs)-1].ID
		}
	}
}
