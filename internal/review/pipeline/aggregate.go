package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/store"
)

// Publisher delivers a validated review (the parent job, its Result in
// j.Result). It must be idempotent: after a crash it may run again.
type Publisher interface {
	Publish(ctx context.Context, j *job.Job) error
}

// AggregatorConfig configures an Aggregator.
type AggregatorConfig struct {
	// Store is the region's store (required).
	Store store.Store
	// Jobs is the region's writer of job state (the engine's), through
	// which a parent is advanced and its publication recorded; nil makes
	// one over Store.
	Jobs *engine.Jobs
	// Publisher delivers aggregated reviews (required).
	Publisher Publisher
	// MaxFindings caps a review's findings; 0 means finding.DefaultMaxFindings.
	MaxFindings int
	// SweepEvery is how often every accepted review is checked, which
	// repairs anything a missed wake-up or a crash left behind; default 2 s.
	SweepEvery time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives ids, never content; default slog.Default().
	Logger *slog.Logger
}

// Aggregator finishes reviews whose parts are all final. Start it once;
// Stop is idempotent. Wake, Check and Sweep are safe for concurrent use:
// the parent's transition is a guarded write and its publication a
// compare-and-set, so running twice for one review is harmless.
type Aggregator struct {
	cfg      AggregatorConfig
	wake     chan string
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// NewAggregator returns an aggregator ready to Start.
func NewAggregator(cfg AggregatorConfig) *Aggregator {
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Jobs == nil {
		// NewJobs fails only without a store, which NewAggregator's
		// callers always pass; a nil writer then fails at first use.
		cfg.Jobs, _ = engine.NewJobs(engine.JobsConfig{Store: cfg.Store, Now: cfg.Now, Logger: cfg.Logger})
	}
	return &Aggregator{cfg: cfg, wake: make(chan string, 1024), stop: make(chan struct{})}
}

// Start sweeps once (the crash-recovery pass) and then serves wake-ups and
// the periodic sweep on one goroutine until Stop.
func (a *Aggregator) Start(ctx context.Context) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.loop(ctx)
	}()
}

func (a *Aggregator) loop(ctx context.Context) {
	a.sweep(ctx)
	tick := time.NewTicker(a.cfg.SweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-ctx.Done():
			return
		case id := <-a.wake:
			if err := a.Check(ctx, id); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("review aggregation failed; the sweep will retry", "job_id", id, "err", err)
			}
		case <-tick.C:
			a.sweep(ctx)
		}
	}
}

// Stop stops the aggregator and waits for it. It is idempotent.
func (a *Aggregator) Stop() {
	a.stopOnce.Do(func() { close(a.stop) })
	a.wg.Wait()
}

// Wake asks for the review parentID to be checked soon. It never blocks:
// when the queue is full the periodic sweep catches up.
func (a *Aggregator) Wake(parentID string) {
	select {
	case a.wake <- parentID:
	default:
	}
}

func (a *Aggregator) sweep(ctx context.Context) {
	if err := a.Sweep(ctx); err != nil && ctx.Err() == nil {
		a.cfg.Logger.Warn("review sweep failed", "err", err)
	}
}

// Sweep checks every accepted review of the region.
func (a *Aggregator) Sweep(ctx context.Context) error {
	after := ""
	for {
		js, err := a.cfg.Store.List(ctx, store.ListParams{Kind: KindReview, State: job.StateAccepted, After: after, Limit: 500})
		if err != nil || len(js) == 0 {
			return err
		}
		for _, j := range js {
			if err := a.Check(ctx, j.ID); err != nil {
				return err
			}
		}
		after = js[len(js)-1].ID
	}
}

// Check aggregates review id if all its parts are final, and publishes it
// if it is validated. It does nothing for a review that is still running
// or already finished.
func (a *Aggregator) Check(ctx context.Context, id string) error {
	parent, err := a.cfg.Store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if parent.Kind != KindReview {
		return nil
	}
	if parent.State == job.StateAccepted {
		if parent, err = a.aggregate(ctx, parent); err != nil || parent == nil {
			return err
		}
	}
	if parent.State == job.StateValidated {
		return a.publish(ctx, parent)
	}
	return nil
}

// Parts returns every part job of review parent, oldest first. A job that
// names the review as its parent but belongs to another tenant or region
// is not one of its parts (ratelane never creates one; a forged or buggy
// row must not add findings to, or fail, someone else's review) and is
// left out.
func Parts(ctx context.Context, st store.Store, parent *job.Job) ([]*job.Job, error) {
	var all []*job.Job
	after := ""
	for {
		js, err := st.List(ctx, store.ListParams{Parent: parent.ID, Kind: KindPart, After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, pj := range js {
			if pj.Tenant == parent.Tenant && pj.Region == parent.Region {
				all = append(all, pj)
			}
		}
		if len(js) < 1000 {
			break
		}
		after = js[len(js)-1].ID
	}
	return all, nil
}

// PartStates returns the parts of review parent as aggregation sees them:
// its part jobs (Parts) for an interactive review, its batch items for a
// review sent through the batch lane (Args.Batch). A batch of another
// tenant or region than the review contributes nothing (ErrForeignBatch).
func PartStates(ctx context.Context, st store.Store, parent *job.Job, args Args) ([]PartState, error) {
	if args.Batch == "" {
		parts, err := Parts(ctx, st, parent)
		if err != nil {
			return nil, err
		}
		return JobStates(parts), nil
	}
	b, err := st.GetBatch(ctx, args.Batch)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("review %s: %w", parent.ID, ErrBatchNotFound)
	} else if err != nil {
		return nil, err
	}
	if b.Tenant != parent.Tenant || b.Region != parent.Region {
		return nil, fmt.Errorf("review %s: %w", parent.ID, ErrForeignBatch)
	}
	var out []PartState
	after := ""
	for {
		items, err := st.BatchItems(ctx, store.BatchItemParams{BatchID: b.ID, JobID: parent.ID, After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			out = append(out, ItemState(it))
		}
		if len(items) < 1000 {
			return out, nil
		}
		after = items[len(items)-1].CustomID
	}
}

// ErrBatchNotFound is a batch-lane review whose batch is not recorded:
// the batch is written right after its reviews, so for a young review it
// is still coming; for an old one a crash lost it.
var ErrBatchNotFound = errors.New("review names a batch that is not recorded")

// BatchGrace is how long a batch-lane review waits for its batch record
// before it is ended as orphaned.
const BatchGrace = time.Minute

// ErrForeignBatch is a batch-lane review whose batch is missing or belongs
// to another tenant or region: ratelane never creates one, and it must not
// take findings from someone else's batch.
var ErrForeignBatch = errors.New("review names a batch that is not its own")

// aggregate advances an accepted parent whose parts are all final; it
// returns nil when some part is still running.
func (a *Aggregator) aggregate(ctx context.Context, parent *job.Job) (*job.Job, error) {
	args, err := decode[Args](parent.Payload)
	if err != nil {
		return nil, fmt.Errorf("review %s: payload: %w", parent.ID, err)
	}
	if args.DiffObject != "" && args.DiffObject != parent.ID {
		// A review's diff object is named after the review; any other
		// name is another review's diff.
		return a.end(ctx, parent, "review names another review's diff")
	}
	parts, err := PartStates(ctx, a.cfg.Store, parent, args)
	if errors.Is(err, ErrBatchNotFound) && a.cfg.Now().Sub(parent.CreatedAt) < BatchGrace {
		return nil, nil // the batch record is being written
	} else if errors.Is(err, ErrBatchNotFound) {
		return a.end(ctx, parent, "review's batch was never recorded (a crash during submission)")
	}
	if errors.Is(err, ErrForeignBatch) {
		return a.end(ctx, parent, "review names a batch of another tenant or region")
	} else if err != nil {
		return nil, err
	}
	res, err := BuildStates(args, parts, finding.AggregateOptions{MaxFindings: a.cfg.MaxFindings})
	if err != nil || res.Parts.Pending > 0 || len(parts) < args.Parts {
		return nil, err
	}
	p := store.AdvanceParams{ID: parent.ID, From: job.StateAccepted, To: job.StateValidated, Now: a.cfg.Now(),
		Record: job.AttemptRecord{At: a.cfg.Now(), Outcome: job.ClassSuccess,
			Why: fmt.Sprintf("aggregated %d parts (%d failed)", res.Parts.Total, res.Parts.Failed)}}
	if res.Parts.Total > 0 && res.Parts.Succeeded == 0 {
		// Nothing was reviewed: there is nothing to publish.
		p.To, p.Reason = job.StateTerminal, job.Reason(res.FailedParts[0].Reason)
	}
	if p.Result, err = json.Marshal(res); err != nil {
		return nil, err
	}
	j, err := a.cfg.Jobs.Advance(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		return a.cfg.Store.Get(ctx, parent.ID) // someone else aggregated it
	}
	if err == nil {
		a.cfg.Logger.Info("review aggregated", "job_id", parent.ID, "parts", res.Parts.Total,
			"failed_parts", res.Parts.Failed, "findings", len(res.Findings), "quarantined", len(res.Quarantined))
	}
	return j, err
}

// end ends an accepted review terminal with permanent_error and why.
func (a *Aggregator) end(ctx context.Context, parent *job.Job, why string) (*job.Job, error) {
	now := a.cfg.Now()
	j, err := a.cfg.Jobs.Advance(ctx, store.AdvanceParams{ID: parent.ID, From: job.StateAccepted, To: job.StateTerminal,
		Reason: job.ReasonPermanentError, Now: now, Record: job.AttemptRecord{At: now, Outcome: job.ClassPermanent, Error: why}})
	if errors.Is(err, store.ErrConflict) {
		return a.cfg.Store.Get(ctx, parent.ID)
	}
	return j, err
}

func (a *Aggregator) publish(ctx context.Context, parent *job.Job) error {
	if err := a.cfg.Publisher.Publish(ctx, parent); err != nil {
		return fmt.Errorf("publish review %s: %w", parent.ID, err)
	}
	crashpoint.Hit(crashpoint.PublishBeforeCAS)
	if err := a.cfg.Jobs.Published(ctx, parent.ID); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	return nil
}

// PartState is one part of a review as aggregation sees it, from a part
// job or a batch item: final when State is published, validated (with its
// PartResult in Result) or terminal (with Reason).
type PartState struct {
	Index  int
	ID     string
	State  job.State
	Reason string
	Result json.RawMessage
}

// JobStates returns the PartStates of part jobs.
func JobStates(parts []*job.Job) []PartState {
	out := make([]PartState, len(parts))
	for i, pj := range parts {
		pa, _ := decode[PartArgs](pj.Payload)
		out[i] = PartState{Index: pa.Index, ID: pj.ID, State: pj.State, Reason: string(pj.Reason), Result: pj.Result}
	}
	return out
}

// ItemState returns the PartState of a batch item: succeeded is a
// published part, failed and canceled a terminal one, anything else
// pending.
func ItemState(it store.BatchItem) PartState {
	ps := PartState{Index: it.Index, ID: it.CustomID, State: job.StateWaiting, Reason: it.Reason, Result: it.Result}
	switch it.State {
	case store.ItemSucceeded:
		ps.State = job.StatePublished
	case store.ItemFailed, store.ItemCanceled:
		ps.State = job.StateTerminal
	}
	return ps
}

// partOutcome is where a part stands for its review.
type partOutcome int

const (
	partPending partOutcome = iota
	partSucceeded
	partFailed
)

// outcome says whether the part succeeded (validated or published: it has
// a result), failed (terminal) or is still pending.
func (ps PartState) outcome() partOutcome {
	switch ps.State {
	case job.StatePublished, job.StateValidated:
		return partSucceeded
	case job.StateTerminal:
		return partFailed
	default:
		return partPending
	}
}

// CountParts counts a review's parts by outcome without decoding their
// results: what BuildStates reports as Result.Parts, for a list that shows
// progress only. Total is the number of parts the review was split into,
// or the parts found if more.
func CountParts(args Args, parts []PartState) Progress {
	p := Progress{Total: max(args.Parts, len(parts))}
	for _, ps := range parts {
		switch ps.outcome() {
		case partSucceeded:
			p.Succeeded++
		case partFailed:
			p.Failed++
		default:
			p.Pending++
		}
	}
	return p
}

// Build merges the part jobs of a review into its Result (BuildStates).
func Build(args Args, parts []*job.Job, opts finding.AggregateOptions) (Result, error) {
	return BuildStates(args, JobStates(parts), opts)
}

// BuildStates merges the parts of a review into its Result. Parts not yet
// final count as pending; it never fails on a part's content.
func BuildStates(args Args, parts []PartState, opts finding.AggregateOptions) (Result, error) {
	res := Result{SchemaVersion: "v1", Depth: args.Depth, Findings: []finding.Finding{}, Quarantined: []Quarantined{}}
	res.Parts = CountParts(args, parts)
	var lists [][]finding.Finding
	for _, pj := range parts {
		switch pj.outcome() {
		case partSucceeded:
			pr, err := decode[PartResult](pj.Result)
			if err != nil {
				return res, fmt.Errorf("part %s: result: %w", pj.ID, err)
			}
			lists = append(lists, pr.Findings)
			res.Quarantined = append(res.Quarantined, pr.Quarantined...)
			res.Usage = res.Usage.Add(pr.Usage)
		case partFailed:
			res.FailedParts = append(res.FailedParts, PartFailure{Index: pj.Index, JobID: pj.ID, Reason: pj.Reason})
		}
	}
	res.Partial = res.Parts.Failed > 0
	agg, err := finding.Aggregate(lists, opts)
	if err != nil {
		return res, err
	}
	if agg.Findings != nil {
		res.Findings = agg.Findings
	}
	res.Capped, res.Dropped = agg.Capped, agg.Dropped
	return res, nil
}
