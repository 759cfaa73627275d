package batchlane

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/store"
)

// Limits of one manifest.
const (
	// MaxReviews is the most reviews one manifest may hold.
	MaxReviews = 10_000
	// DefaultMaxAttempts is how many provider batches one item may go
	// out in (a first submission and two requeues).
	DefaultMaxAttempts = 3
	// DefaultDeadline is a batch's deadline when the manifest sets none:
	// two of the providers' 24 h windows, so an expired chunk can run again.
	DefaultDeadline = 48 * time.Hour
)

// Review is one review of a manifest.
type Review struct {
	Repo    string
	Change  string
	BaseSHA string
	HeadSHA string
	// Diff is the unified diff; stored once as a region object.
	Diff    []byte
	Publish pipeline.Publish
}

// Manifest is a batch to plan: what the API or library was given, with
// the provider profile resolved.
type Manifest struct {
	// ID is the batch id, chosen by the caller.
	ID      string
	Region  string
	Tenant  string
	Profile provider.Profile
	Reviews []Review
	// Extractions are generic LLM extraction items; a manifest carries
	// reviews or extractions, not both.
	Extractions []Extraction
	// Deadline is when every item must be final; zero means
	// Now + DefaultDeadline.
	Deadline time.Time
	// MaxAttempts bounds an item's provider batches; 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
	// MaxPartTokens is the token budget of one part; 0 means the
	// pipeline's default.
	MaxPartTokens int
	// Depth is full (the default: nobody waits on a batch) or fast, what
	// an intake that degrades a late manifest plans it at.
	Depth string
	Now   time.Time
	// Yield, when set, is called between the pieces of NewPlan's work,
	// every buildPiece reviews planned: an intake paces its planning
	// there (engine.Yield in the intake's batch-lane context; review's
	// SubmitBatch). Nil: the plan is made in one piece.
	Yield func()
}

// Plan is what a manifest becomes: objects to store first, then the jobs
// (the two drivers and one accepted review parent per review) in one
// write, then the batch and its items.
type Plan struct {
	Objects []store.Object
	Jobs    []*job.Job
	Batch   *store.Batch
	Items   []store.BatchItem
	// Summary is what Batch.Summary holds, decoded.
	Summary Summary
}

// Work is the plan's batch work for the intake prediction: its items and
// their estimated tokens.
func (p Plan) Work() admission.BatchWork {
	return admission.BatchWork{Requests: int64(len(p.Items)), Tokens: p.Summary.Tokens}
}

// SetIntake records the prediction the batch is accepted with in its
// summary.
func (p *Plan) SetIntake(in Intake) error {
	p.Summary.Intake = &in
	b, err := json.Marshal(p.Summary)
	if err != nil {
		return err
	}
	p.Batch.Summary = b
	return nil
}

// ReviewError is a manifest entry that cannot be planned; its message
// names the entry and never quotes the diff.
type ReviewError struct {
	Index int
	Err   error
}

func (e *ReviewError) Error() string { return fmt.Sprintf("reviews[%d].diff: %v", e.Index, e.Err) }

func (e *ReviewError) Unwrap() error { return e.Err }

// NewPlan splits every review's diff into parts exactly as an interactive
// review's (pipeline.NewPlan, at m.Depth: full unless the intake degraded
// the manifest) and turns each part into a batch item. newID returns fresh
// ids.
func NewPlan(m Manifest, newID func() string) (Plan, error) {
	switch {
	case len(m.Reviews) > 0 && len(m.Extractions) > 0:
		return Plan{}, fmt.Errorf("a manifest carries reviews or extractions, not both: send two batches")
	case len(m.Reviews) == 0 && len(m.Extractions) == 0:
		return Plan{}, fmt.Errorf("a manifest needs at least one review or extraction")
	case len(m.Reviews) > MaxReviews:
		return Plan{}, fmt.Errorf("a manifest holds at most %d reviews, not %d: split the sweep", MaxReviews, len(m.Reviews))
	}
	if m.Deadline.IsZero() {
		m.Deadline = m.Now.Add(DefaultDeadline)
	}
	m.MaxAttempts = cmp.Or(m.MaxAttempts, DefaultMaxAttempts)
	m.Depth = cmp.Or(m.Depth, pipeline.DepthFull)
	prof := m.Profile.WithDefaults()
	sum := Summary{Reviews: len(m.Reviews), Depth: m.Depth, Provider: prof.Name, Kind: prof.Kind}
	var p Plan
	if len(m.Extractions) > 0 {
		objs, items, tokens, err := extractionObjects(m, prof.MaxOutputTokens)
		if err != nil {
			return Plan{}, err
		}
		p.Objects, p.Items = objs, items
		sum.Extractions, sum.Tokens = len(items), tokens
	}
	for i, r := range m.Reviews {
		if m.Yield != nil && pieceEnds(i) {
			m.Yield() // a thousand reviews' diffs split in one piece were ~30 ms of CPU
		}
		rp, err := pipeline.NewPlan(pipeline.Submission{ID: newID(), Region: m.Region, Tenant: m.Tenant, Lane: job.LaneBatch,
			Diff: r.Diff, Profile: prof, MaxPartTokens: m.MaxPartTokens, Now: m.Now,
			Args: pipeline.Args{Repo: r.Repo, Change: r.Change, BaseSHA: r.BaseSHA, HeadSHA: r.HeadSHA,
				DepthRequested: pipeline.DepthFull, Depth: m.Depth, Publish: r.Publish, Batch: m.ID}}, newID)
		if err != nil {
			return Plan{}, &ReviewError{Index: i, Err: err}
		}
		// The review is never leased (its parts are items, not jobs), so it
		// must not name the interactive lane's keys: it names the batch
		// collection key, the allowance its results arrive through.
		rp.Parent.LimitKeys = []string{CollectKey(prof)}
		p.Objects = append(p.Objects, rp.Objects...)
		p.Jobs = append(p.Jobs, rp.Parent)
		sum.ReviewIDs = append(sum.ReviewIDs, rp.Parent.ID)
		for _, pj := range rp.Parts {
			var pa pipeline.PartArgs
			if err := json.Unmarshal(pj.Payload, &pa); err != nil {
				return Plan{}, err
			}
			// The custom_id joins a provider's result line to its item:
			// review and part index, within ^[a-zA-Z0-9_-]{1,64}$.
			// A whole-diff part's item names the review's diff object: its
			// ObjectID is the review's id, its JobID (itemObject).
			obj := pa.Object
			if pa.WholeDiff {
				obj = rp.Parent.ID
			}
			p.Items = append(p.Items, store.BatchItem{CustomID: fmt.Sprintf("r%d-p%d", i, pa.Index), JobID: rp.Parent.ID,
				ObjectID: obj, Index: pa.Index})
			sum.Tokens += int64(pa.EstTokens + prof.MaxOutputTokens)
		}
	}
	sum.Items = len(p.Items)
	p.Summary = sum
	summary, err := json.Marshal(sum)
	if err != nil {
		return Plan{}, err
	}
	p.Batch = &store.Batch{ID: m.ID, Tenant: m.Tenant, Region: m.Region, Provider: prof.Name, State: store.BatchRunning,
		Deadline: m.Deadline, MaxAttempts: m.MaxAttempts, Summary: summary, CreatedAt: m.Now, UpdatedAt: m.Now}
	p.Batch.Tenant = cmp.Or(p.Batch.Tenant, job.DefaultTenant)
	drivers := make([]*job.Job, 0, 2)
	for _, d := range []struct{ kind, key string }{{KindSubmit, SubmitKey(prof)}, {KindCollect, CollectKey(prof)}} {
		payload, err := json.Marshal(Args{Batch: m.ID})
		if err != nil {
			return Plan{}, err
		}
		j := &job.Job{Kind: d.kind, Region: m.Region, Lane: job.LaneBatch, Tenant: p.Batch.Tenant, LimitKeys: []string{d.key},
			Payload: payload, IdempotencyKey: d.kind + ":" + m.ID}
		j.Prepare(newID(), m.Now, 0, false)
		if err := j.Validate(nil); err != nil {
			return Plan{}, err
		}
		drivers = append(drivers, j)
	}
	p.Jobs = append(drivers, p.Jobs...)
	return p, nil
}
