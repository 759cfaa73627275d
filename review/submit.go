package review

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/report"
	"github.com/ratelane/ratelane/internal/store"
)

// Request is a review to run.
type Request struct {
	Region string
	// Tenant defaults to "default"; Lane to interactive.
	Tenant string
	Lane   ratelane.Lane
	Repo   string
	// Change is the pull request number or ref.
	Change  string
	BaseSHA string
	HeadSHA string
	// Diff is the unified diff. It is stored once in the region's store
	// and referenced by the jobs; it never enters a payload or a log.
	Diff []byte
	// Depth is auto (default), full or fast.
	Depth string
	// Provider names a profile of the region; default the region's default.
	Provider       string
	Publish        Publish
	IdempotencyKey string
}

// Status is a review's progress, and its result once aggregated.
type Status struct {
	ID             string         `json:"id"`
	Region         string         `json:"region"`
	Tenant         string         `json:"tenant"`
	State          ratelane.State `json:"state"`
	Reason         string         `json:"reason,omitempty"`
	Repo           string         `json:"repo,omitempty"`
	Change         string         `json:"change,omitempty"`
	DepthRequested string         `json:"depth_requested"`
	Depth          string         `json:"depth"`
	Provider       string         `json:"provider"`
	Publish        Publish        `json:"publish"`
	Parts          Progress       `json:"parts"`
	Result         *Result        `json:"result,omitempty"`
	CreatedAt      time.Time      `json:"created_at"`
	UpdatedAt      time.Time      `json:"updated_at"`
}

// Submit stores the diff in the region, splits it into parts and inserts
// the review (accepted) and its parts (waiting) in one write through the
// region's writer. The depth auto becomes fast when the predicted wait on
// the provider's keys exceeds the lane's budget. A submission with the
// IdempotencyKey of an earlier one of the same tenant returns that review.
func (p *Plugin) Submit(ctx context.Context, r Request) (Status, error) {
	rt, err := p.runtime(r.Region)
	if err != nil {
		return Status{}, err
	}
	pr, err := rt.providerFor(r.Provider)
	if err != nil {
		return Status{}, err
	}
	r.Lane = cmp.Or(r.Lane, ratelane.LaneInteractive)
	if r.Lane == ratelane.LaneInteractive {
		// In flight from here, not only once the insert is written: see
		// PluginRegion.InteractiveArriving. The insert ends it.
		var end func()
		ctx, end = rt.r.InteractiveArriving(ctx)
		defer end()
	}
	sub, err := rt.submission(ctx, pr, r)
	if err != nil {
		return Status{}, err
	}
	plan, err := pipeline.NewPlan(sub, func() string { return uuid.Must(uuid.NewV7()).String() })
	if err != nil {
		return Status{}, err
	}
	return rt.insertPlan(ctx, plan)
}

func (rt *regionRT) submission(ctx context.Context, p Provider, r Request) (pipeline.Submission, error) {
	cfg := rt.r.Config()
	args := pipeline.Args{Repo: r.Repo, Change: r.Change, BaseSHA: r.BaseSHA, HeadSHA: r.HeadSHA,
		DepthRequested: r.Depth, Publish: r.Publish}
	args.DepthRequested = cmp.Or(args.DepthRequested, pipeline.DepthAuto)
	if err := rt.publisher.CheckPublish(args); err != nil {
		return pipeline.Submission{}, err
	}
	if err := rt.checkTarget(ctx, r.Tenant, r.Publish); err != nil {
		return pipeline.Submission{}, err
	}
	wait := time.Duration(0)
	if args.DepthRequested == pipeline.DepthAuto {
		// The one prediction the HTTP API's overload check uses too.
		pred, err := rt.r.Jobs().PredictWait(ctx, engine.PredictParams{
			Kind: KindPart, Lane: r.Lane, Keys: p.Profile().WithDefaults().LimitKeys(), Default: cfg.DefaultLimit,
		})
		if err != nil {
			return pipeline.Submission{}, err
		}
		wait = pred.Wait
	}
	budget := cfg.BatchBudget
	if r.Lane == ratelane.LaneInteractive {
		budget = cfg.InteractiveBudget
	}
	depth, err := pipeline.ResolveDepth(args.DepthRequested, wait, budget)
	if err != nil {
		return pipeline.Submission{}, err
	}
	args.Depth = depth
	return pipeline.Submission{ID: uuid.Must(uuid.NewV7()).String(), Region: rt.region, Tenant: r.Tenant, Lane: r.Lane,
		Diff: r.Diff, Args: args, Profile: p.Profile(), MaxPartTokens: rt.cfg.MaxPartTokens,
		IdempotencyKey: r.IdempotencyKey, Now: cfg.Now()}, nil
}

// errNoTarget marks a webhook publish target that is not the tenant's
// subscriber.
var errNoTarget = errors.New("unknown webhook subscriber")

// checkTarget refuses a webhook publication to a subscriber that is not
// the tenant's own in the region: the delivery would be signed with that
// subscriber's secret. An unknown subscriber and another tenant's are
// refused alike, so subscriber ids of other tenants cannot be probed.
func (rt *regionRT) checkTarget(ctx context.Context, tenant string, p Publish) error {
	if p.Kind != pipeline.PublishWebhook {
		return nil
	}
	tenant = cmp.Or(tenant, job.DefaultTenant)
	owner, err := rt.r.Subscribers().SubscriberTenant(ctx, p.Target)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && owner != tenant:
		return fmt.Errorf("%w: publish.target %q is not a webhook subscriber of tenant %q in region %s",
			errNoTarget, p.Target, tenant, rt.region)
	case err != nil:
		return err
	}
	return nil
}

func (rt *regionRT) insertPlan(ctx context.Context, plan pipeline.Plan) (Status, error) {
	// One write: the review's content (its diff and each part's text),
	// the review (accepted) and its parts (waiting); the engine aggregates
	// it when they are final (at once with no part). The part cannot be
	// leased before its insert commits, and each write ahead of the insert
	// was a commit through a single-writer store's queue, counted in the
	// part's queued stage: one PutObject per object made three commits
	// before a one-file review's part existed (docs/benchmarks.md,
	// "Session 13 (s13h5)"), one PutObjects then the insert two
	// ("Session 19 (s19h5)").
	res, err := rt.r.Jobs().InsertPartsWithObjects(ctx, plan.Objects, plan.Parent, plan.Parts, rt.r.Config().DefaultLimit)
	if err != nil {
		return Status{}, fmt.Errorf("review: insert review: %w", err)
	}
	if res[0].Existing {
		// An idempotent replay: the first review stands (its parts dedupe by
		// derived keys), so the copy of the diff stored above is unreferenced.
		for _, o := range plan.Objects {
			_ = rt.st.DeleteObject(ctx, o.Kind, o.ID)
		}
	}
	rt.r.Notify()
	return rt.status(ctx, res[0].Job.ID)
}

// Get returns a review's status and, once aggregated, its result;
// ratelane.ErrNotFound for an id that is not a review of the region.
func (p *Plugin) Get(ctx context.Context, region, id string) (Status, error) {
	rt, err := p.runtime(region)
	if err != nil {
		return Status{}, err
	}
	return rt.status(ctx, id)
}

func (rt *regionRT) status(ctx context.Context, id string) (Status, error) {
	j, err := rt.st.Get(ctx, id)
	if err != nil {
		return Status{}, err
	}
	if j.Kind != KindReview {
		return Status{}, ratelane.ErrNotFound
	}
	var args pipeline.Args
	_ = json.Unmarshal(j.Payload, &args) // the parent's payload is the plug-in's own
	s := Status{ID: j.ID, Region: j.Region, Tenant: j.Tenant, State: j.State, Reason: string(j.Reason), Repo: args.Repo,
		Change: args.Change, DepthRequested: args.DepthRequested, Depth: args.Depth, Provider: args.Provider,
		Publish: args.Publish, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
	parts, err := rt.partStates(ctx, j, args)
	if err != nil {
		return Status{}, err
	}
	res, err := pipeline.BuildStates(args, parts, finding.AggregateOptions{MaxFindings: rt.cfg.MaxFindings})
	if err != nil {
		return Status{}, err
	}
	s.Parts = res.Parts
	if len(j.Result) > 0 {
		var final Result
		if err := json.Unmarshal(j.Result, &final); err != nil {
			return Status{}, fmt.Errorf("review %s: decode result: %w", j.ID, err)
		}
		s.Result = &final
	}
	return s, nil
}

// partStates returns a review's parts as its status counts them: its part
// jobs, or its batch items for a review sent through the batch lane. A
// batch-lane review whose batch is missing or not its own shows no parts
// (the review kind's aggregate ends it).
func (rt *regionRT) partStates(ctx context.Context, j *job.Job, args pipeline.Args) ([]pipeline.PartState, error) {
	if args.Batch == "" {
		parts, err := rt.r.Jobs().Parts(ctx, j, []string{KindPart})
		if err != nil {
			return nil, err
		}
		return pipeline.JobStates(parts), nil
	}
	parts, err := pipeline.PartStates(ctx, rt.st, j, args)
	if errors.Is(err, pipeline.ErrForeignBatch) || errors.Is(err, pipeline.ErrBatchNotFound) {
		return nil, nil
	}
	return parts, err
}

// SARIF writes a finished review's findings as SARIF 2.1.0;
// ratelane.ErrConflict while it has no result.
func (p *Plugin) SARIF(ctx context.Context, region, id string, w io.Writer) error {
	s, err := p.Get(ctx, region, id)
	if err != nil {
		return err
	}
	if s.Result == nil {
		return fmt.Errorf("%w: review %s is %s and has no result yet", ratelane.ErrConflict, id, s.State)
	}
	return report.WriteSARIF(w, ratelane.Version, s.Result.Findings)
}
