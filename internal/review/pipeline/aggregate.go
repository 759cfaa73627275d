package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/store"
)

// BatchReader reads the batch lane's records (the region's store): a
// review sent through the batch lane (Args.Batch) has no part jobs; its
// parts are its batch items.
type BatchReader interface {
	// GetBatchHead, not GetBatch: a review needs its batch's owner, not
	// the batch's item counts, which cost a read of every item of the
	// batch per review aggregated.
	GetBatchHead(ctx context.Context, id string) (*store.Batch, error)
	BatchItems(ctx context.Context, p store.BatchItemParams) ([]store.BatchItem, error)
}

// AggregateConfig configures Aggregate.
type AggregateConfig struct {
	// MaxFindings caps a review's findings; 0 means
	// finding.DefaultMaxFindings.
	MaxFindings int
	// Batches reads the items of batch-lane reviews (the region's store);
	// nil ends every batch-lane review terminal, as it cannot be read.
	Batches BatchReader
	// Now is the clock (BatchGrace); default time.Now.
	Now func() time.Time
}

// Aggregate returns the review kind's aggregator (the engine's parts
// capability calls it once every part job of a review is final): it
// merges the valid findings of the succeeded parts (finding.Aggregate, at
// most cfg.MaxFindings) into the review's Result, partial when a part
// failed. The review then goes validated and its Publisher delivers it
// once; a review none of whose parts succeeded ends terminal with the
// first failed part's reason (its Result names the failed parts), and one
// whose payload names another review's diff (a forged row) ends terminal
// with permanent_error and no result.
//
// A review sent through the batch lane (Args.Batch) has no part jobs, so
// the engine asks at once and at every sweep; its parts are its batch
// items, and until they are all final (and while its batch record is
// still being written, BatchGrace) the outcome is ClassPending, which
// decides nothing and leaves the review accepted (the batch lane calls
// engine.Jobs.PartsChangedIn when an item of the review settles). So a
// batch review is aggregated by the same engine path, once, and published
// once, as an interactive one.
//
// It is a function of the review, its parts and (for a batch review) its
// batch items, with no side effect, so running it again after a crash or
// on two nodes at once is harmless.
func Aggregate(cfg AggregateConfig) engine.AggregatorFunc {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return func(ctx context.Context, parent *job.Job, parts []*job.Job) job.Outcome {
		args, err := decode[Args](parent.Payload)
		if err != nil {
			return permanent("review payload does not decode")
		}
		if args.DiffObject != "" && args.DiffObject != parent.ID {
			// A review's diff object is named after the review; any other
			// name is another review's diff.
			return permanent("review names another review's diff")
		}
		states := JobStates(parts)
		if args.Batch != "" {
			var o job.Outcome
			if states, o = batchStates(ctx, cfg, parent, args); o.Class != "" {
				return o
			}
		}
		res, err := BuildStates(args, states, finding.AggregateOptions{MaxFindings: cfg.MaxFindings})
		if err != nil {
			// BuildStates's error names the part, never its content.
			return permanent("aggregate the parts: " + err.Error())
		}
		if args.Batch != "" && (res.Parts.Pending > 0 || len(states) < args.Parts) {
			// Some items are still with the provider (the engine waits
			// for part jobs itself).
			return job.Outcome{Class: job.ClassPending, Err: "batch items not final"}
		}
		out, err := json.Marshal(res)
		if err != nil {
			return permanent("review result is not JSON")
		}
		if res.Parts.Total > 0 && res.Parts.Succeeded == 0 {
			// Nothing was reviewed: there is nothing to publish.
			o := permanent("no part of the review succeeded")
			if len(res.FailedParts) > 0 {
				o.Reason = job.Reason(res.FailedParts[0].Reason)
			}
			o.Result = out
			return o
		}
		return job.Outcome{Class: job.ClassSuccess, Result: out}
	}
}

// batchStates returns a batch review's items as its parts, or the outcome
// that decides (or defers) the review without them: pending while a young
// review's batch record is still being written, permanent for a batch
// never recorded or one of another tenant or region, transient for a
// read that failed.
func batchStates(ctx context.Context, cfg AggregateConfig, parent *job.Job, args Args) ([]PartState, job.Outcome) {
	if cfg.Batches == nil {
		return nil, permanent("batch-lane review in a region without a batch store")
	}
	states, err := PartStates(ctx, cfg.Batches, parent, args)
	switch {
	case errors.Is(err, ErrBatchNotFound) && cfg.Now().Sub(parent.CreatedAt) < BatchGrace:
		return nil, job.Outcome{Class: job.ClassPending, Err: "batch not recorded yet"}
	case errors.Is(err, ErrBatchNotFound):
		return nil, permanent("review's batch was never recorded (a crash during submission)")
	case errors.Is(err, ErrForeignBatch):
		return nil, permanent("review names a batch of another tenant or region")
	case err != nil:
		return nil, job.Outcome{Class: job.ClassTransient, Err: "read the review's batch items"}
	}
	return states, job.Outcome{}
}

// PartStates returns the batch items of a review sent through the batch
// lane (Args.Batch) as its parts; the parts of an interactive review are
// its part jobs (engine.Jobs.Parts, JobStates). A batch of another tenant
// or region than the review contributes nothing (ErrForeignBatch).
//
// Inside a periodic sweep pass (engine.SweepMemoFrom) the batch's head and
// all its items are read once for the pass and shared by its reviews
// (sweepBatch): a pass over 10,000 waiting reviews of 10 batches makes 20
// reads of this kind instead of 20,000. Inside a woken batch group
// (engine.GroupMemoFrom) the group's reviews share one read of a batch's
// head and one of the items of all the group's parents in that batch
// (groupItems), where each read its own: up to 32 statements a group.
//
// That shared read of items is as fresh for each review as its own was.
// A review's items change, and its wake-up says they did; but every
// parent of a group was woken — its items' change written — before the
// engine formed the group (engine.WithGroupMemo), and the read is made
// after, by the group's first review of the batch. So each review sees
// its items as of a moment after its wake-up, as a read of its own made
// later in the group did. What one made later could see and this one
// cannot, an item settled while the group runs, wakes its review again
// after its write, into a later group (or the sweep, if that wake-up is
// missed), as it did when the review's own read had just gone by.
func PartStates(ctx context.Context, st BatchReader, parent *job.Job, args Args) ([]PartState, error) {
	if m := engine.SweepMemoFrom(ctx); m != nil {
		v, err := m.Load(sweepBatchKey(args.Batch), func() (any, error) { return readSweepBatch(ctx, st, args.Batch) })
		if err != nil {
			if errors.Is(err, ErrBatchNotFound) {
				return nil, fmt.Errorf("review %s: %w", parent.ID, ErrBatchNotFound)
			}
			return nil, err
		}
		sb := v.(*sweepBatch)
		if sb.head.Tenant != parent.Tenant || sb.head.Region != parent.Region {
			return nil, fmt.Errorf("review %s: %w", parent.ID, ErrForeignBatch)
		}
		return sb.byJob[parent.ID], nil
	}
	b, err := batchHead(ctx, st, args.Batch)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("review %s: %w", parent.ID, ErrBatchNotFound)
	} else if err != nil {
		return nil, err
	}
	if b.Tenant != parent.Tenant || b.Region != parent.Region {
		return nil, fmt.Errorf("review %s: %w", parent.ID, ErrForeignBatch)
	}
	if m := engine.GroupMemoFrom(ctx); m != nil && slices.Contains(m.Parents(), parent.ID) {
		v, err := m.Load(groupItemsKey(b.ID), func() (any, error) {
			return itemsByJob(ctx, st, store.BatchItemParams{BatchID: b.ID, JobIDs: m.Parents()})
		})
		if err != nil {
			return nil, err
		}
		return v.(map[string][]PartState)[parent.ID], nil
	}
	byJob, err := itemsByJob(ctx, st, store.BatchItemParams{BatchID: b.ID, JobID: parent.ID})
	return byJob[parent.ID], err
}

// groupItemsKey keys, in a woken group's memo, the states of the items of
// a batch that belong to the group's parents, by review (PartStates).
type groupItemsKey string

// itemsByJob reads the items p selects, a page (store.BatchItemPage) at a
// time, and returns their states by review, each review's in custom_id
// order.
func itemsByJob(ctx context.Context, st BatchReader, p store.BatchItemParams) (map[string][]PartState, error) {
	byJob := map[string][]PartState{}
	p.Limit = store.BatchItemPage
	for {
		items, err := st.BatchItems(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			byJob[it.JobID] = append(byJob[it.JobID], ItemState(it))
		}
		if len(items) < store.BatchItemPage {
			return byJob, nil
		}
		p.After = items[len(items)-1].CustomID
	}
}

// groupHeadKey keys a batch's head in a woken group's memo.
type groupHeadKey string

// batchHead reads batch id's head, once per woken group (ctx's
// engine.GroupMemo) when there is one. Only the head's identity (ID,
// tenant, region) is used, which never changes, so a group's parents
// may share it.
func batchHead(ctx context.Context, st BatchReader, id string) (*store.Batch, error) {
	m := engine.GroupMemoFrom(ctx)
	if m == nil {
		return st.GetBatchHead(ctx, id)
	}
	v, err := m.Load(groupHeadKey(id), func() (any, error) { return st.GetBatchHead(ctx, id) })
	if err != nil {
		return nil, err
	}
	return v.(*store.Batch), nil
}

// sweepBatchKey keys a batch's sweepBatch in a sweep pass's memo.
type sweepBatchKey string

// sweepBatch is one batch as a sweep pass reads it: its head and its
// items' states grouped by review, each review's in custom_id order (as
// PartStates reads them one review at a time).
type sweepBatch struct {
	head  *store.Batch
	byJob map[string][]PartState
}

// readSweepBatch reads batch id's head and every item, a page at a time.
func readSweepBatch(ctx context.Context, st BatchReader, id string) (*sweepBatch, error) {
	b, err := st.GetBatchHead(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrBatchNotFound
	} else if err != nil {
		return nil, err
	}
	byJob, err := itemsByJob(ctx, st, store.BatchItemParams{BatchID: id})
	if err != nil {
		return nil, err
	}
	return &sweepBatch{head: b, byJob: byJob}, nil
}

// ErrBatchNotFound is a batch-lane review whose batch is not recorded:
// the batch is written right after its reviews, so for a young review it
// is still coming; for an old one a crash lost it.
var ErrBatchNotFound = errors.New("review names a batch that is not recorded")

// BatchGrace is how long a batch-lane review waits for its batch record
// before it is ended as orphaned.
const BatchGrace = time.Minute

// ErrForeignBatch is a batch-lane review whose batch belongs to another
// tenant or region: ratelane never creates one, and it must not take
// findings from someone else's batch.
var ErrForeignBatch = errors.New("review names a batch that is not its own")

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
				return res, fmt.Errorf("part %s: result does not decode", pj.ID)
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
