package ratelane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/review/report"
	"github.com/ratelane/ratelane/internal/store"
)

// ReviewProfile configures one review provider for one region: its kind
// (rules, openai, openai-compatible, anthropic), model, base URL, API key
// and limit keys.
type ReviewProfile = provider.Profile

// ReviewProvider is a reviewer bound to one region; make one with
// NewReviewProvider.
type ReviewProvider = provider.Provider

// ReviewPublish says where a finished review goes: none, rdjsonl (a file
// name in ReviewConfig.RDJSONLDir), webhook (a subscriber id) or github
// ("owner/repo#number").
type ReviewPublish = pipeline.Publish

// ReviewResult is a finished review: findings, quarantined findings with
// their reasons, parts, depth used and provider usage.
type ReviewResult = pipeline.Result

// NewReviewProvider returns the provider a profile describes. The SDK
// clients it builds never retry on their own.
func NewReviewProvider(p ReviewProfile) (ReviewProvider, error) { return provider.New(p) }

// ReviewConfig configures reviews in one region.
type ReviewConfig struct {
	// Providers are the region's providers, looked up by profile name. Each
	// must belong to the region: NewClient refuses one of another region.
	Providers []ReviewProvider
	// DefaultProvider is the profile used when a request names none;
	// default the first provider.
	DefaultProvider string
	// MaxPartTokens is the estimated-token budget of one part; default
	// 8000.
	MaxPartTokens int
	// MaxFindings caps a review's published findings; default 50.
	MaxFindings int
	// RDJSONLDir is where rdjsonl publications are written, each tenant's
	// in its own subdirectory (RDJSONLDir/<tenant>/<target>); empty
	// refuses them.
	RDJSONLDir string
	// GitHubBaseURL and GitHubToken configure GitHub publication; the base
	// URL defaults to https://api.github.com.
	GitHubBaseURL string
	GitHubToken   string
	// HTTPClient is used for GitHub; default a client with a 30 s timeout.
	HTTPClient *http.Client
	// SweepEvery is how often accepted reviews are re-checked; default 2 s.
	SweepEvery time.Duration
}

// HandleReviews enables reviews in a region: it registers the review
// kinds (the parent, its parts and GitHub publication) with their handler
// and publisher. Call it before NewClient, once per region.
func (c *Config) HandleReviews(region string, rc ReviewConfig) {
	if c.reviews == nil {
		c.reviews = map[string]*reviewRT{}
	}
	rt := &reviewRT{region: region, cfg: rc}
	c.reviews[region] = rt
	c.HandleIn(region, pipeline.KindPart, rtHandler{rt, rt.handlePart}, nil)
	c.HandleIn(region, pipeline.KindReview, rtHandler{rt, parentHandle}, rtPublisher{rt})
	c.HandleIn(region, pipeline.KindGitHub, rtHandler{rt, rt.handleGitHub}, nil)
	for _, p := range rc.Providers {
		c.bound = append(c.bound, boundResource{region: region, kind: pipeline.KindPart, handler: providerBound{p}})
	}
}

// reviewRT is one region's review runtime; its parts that need the store
// are bound in NewClient.
type reviewRT struct {
	region    string
	cfg       ReviewConfig
	st        store.Store
	parts     *pipeline.PartHandler
	github    *pipeline.GitHub
	publisher *pipeline.ReviewPublisher
	agg       *pipeline.Aggregator
}

func (rt *reviewRT) bind(c *Client, st store.Store) error {
	parts, err := pipeline.NewPartHandler(rt.region, st, rt.cfg.Providers)
	if err != nil {
		return err
	}
	rt.st, rt.parts = st, parts
	rt.github = &pipeline.GitHub{BaseURL: rt.cfg.GitHubBaseURL, Token: rt.cfg.GitHubToken, Client: rt.cfg.HTTPClient, Jobs: st, Now: c.cfg.Now}
	rt.publisher = &pipeline.ReviewPublisher{Region: rt.region, Jobs: st, DefaultLimit: c.cfg.DefaultLimit,
		RDJSONLDir: rt.cfg.RDJSONLDir, Now: c.cfg.Now}
	rt.agg = pipeline.NewAggregator(pipeline.AggregatorConfig{Store: st, Jobs: c.regions[rt.region].jobs, Publisher: rt.publisher,
		MaxFindings: rt.cfg.MaxFindings, SweepEvery: rt.cfg.SweepEvery, Now: c.cfg.Now, Logger: c.cfg.Logger})
	return nil
}

func (rt *reviewRT) handlePart(ctx context.Context, j *job.Job) job.Outcome {
	return rt.parts.Handle(ctx, j)
}

func (rt *reviewRT) handleGitHub(ctx context.Context, j *job.Job) job.Outcome {
	return rt.github.Handle(ctx, j)
}

// parentHandle runs only if an operator redrives a review's parent: the
// parent is aggregated, never run.
func parentHandle(context.Context, *job.Job) job.Outcome {
	return job.Outcome{Class: job.ClassPermanent, Err: "a review is aggregated from its parts; submit it again"}
}

// rtHandler adapts a runtime method to Handler and says which region it
// belongs to.
type rtHandler struct {
	rt *reviewRT
	fn func(context.Context, *job.Job) job.Outcome
}

func (h rtHandler) Work(ctx context.Context, j *Job) (any, error) {
	return nil, errors.New("use HandleOutcome")
}
func (h rtHandler) HandleOutcome(ctx context.Context, j *Job) Outcome { return h.fn(ctx, j) }
func (h rtHandler) Region() string                                    { return h.rt.region }

// rtPublisher publishes a review's parent through the region's publisher.
type rtPublisher struct{ rt *reviewRT }

func (p rtPublisher) Publish(ctx context.Context, j *Job) error {
	return p.rt.publisher.Publish(ctx, j)
}
func (p rtPublisher) Region() string { return p.rt.region }

// providerBound makes a provider's region visible to the start-up check.
type providerBound struct{ p ReviewProvider }

func (providerBound) Work(context.Context, *Job) (any, error) {
	return nil, errors.New("not a handler")
}
func (b providerBound) Region() string { return b.p.Region() }

// ReviewRequest is a review to run.
type ReviewRequest struct {
	Region string
	// Tenant defaults to "default"; Lane to interactive.
	Tenant string
	Lane   Lane
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
	Publish        ReviewPublish
	IdempotencyKey string
}

// ReviewStatus is a review's progress, and its result once aggregated.
type ReviewStatus struct {
	ID             string         `json:"id"`
	Region         string         `json:"region"`
	State          State          `json:"state"`
	Reason         string         `json:"reason,omitempty"`
	Repo           string         `json:"repo,omitempty"`
	Change         string         `json:"change,omitempty"`
	DepthRequested string         `json:"depth_requested"`
	Depth          string         `json:"depth"`
	Provider       string         `json:"provider"`
	Publish        ReviewPublish  `json:"publish"`
	Parts          ReviewProgress `json:"parts"`
	Result         *ReviewResult  `json:"result,omitempty"`
	CreatedAt      time.Time      `json:"created_at"`
	UpdatedAt      time.Time      `json:"updated_at"`
}

// ReviewProgress counts a review's parts.
type ReviewProgress = pipeline.Progress

// ErrReviewsNotConfigured is returned for a region without HandleReviews.
var ErrReviewsNotConfigured = errors.New("ratelane: reviews are not configured in this region")

// SubmitReview stores the diff in the region, splits it into parts and
// inserts the review (accepted) and its parts (waiting) in one write. The
// depth auto becomes fast when the predicted wait on the provider's keys
// exceeds the lane's budget.
func (c *Client) SubmitReview(ctx context.Context, r ReviewRequest) (ReviewStatus, error) {
	rt, err := c.reviewRT(r.Region)
	if err != nil {
		return ReviewStatus{}, err
	}
	p, err := rt.providerFor(r.Provider)
	if err != nil {
		return ReviewStatus{}, err
	}
	if r.Lane == "" {
		r.Lane = LaneInteractive
	}
	sub, err := c.submission(ctx, rt, p, r)
	if err != nil {
		return ReviewStatus{}, err
	}
	plan, err := pipeline.NewPlan(sub, func() string { return uuid.Must(uuid.NewV7()).String() })
	if err != nil {
		return ReviewStatus{}, err
	}
	return c.insertPlan(ctx, rt, plan)
}

func (c *Client) submission(ctx context.Context, rt *reviewRT, p ReviewProvider, r ReviewRequest) (pipeline.Submission, error) {
	now := c.cfg.Now()
	args := pipeline.Args{Repo: r.Repo, Change: r.Change, BaseSHA: r.BaseSHA, HeadSHA: r.HeadSHA,
		DepthRequested: r.Depth, Publish: r.Publish}
	if args.DepthRequested == "" {
		args.DepthRequested = pipeline.DepthAuto
	}
	if err := rt.publisher.CheckPublish(args); err != nil {
		return pipeline.Submission{}, err
	}
	if err := c.checkReviewTarget(ctx, r.Region, r.Tenant, r.Publish); err != nil {
		return pipeline.Submission{}, err
	}
	wait := time.Duration(0)
	if args.DepthRequested == pipeline.DepthAuto {
		var err error
		// The one prediction the HTTP API's overload check uses too.
		pred, err := c.regions[rt.region].jobs.PredictWait(ctx, engine.PredictParams{
			Kind: pipeline.KindPart, Lane: r.Lane, Keys: p.Profile().WithDefaults().LimitKeys(), Default: c.cfg.DefaultLimit,
		})
		if err != nil {
			return pipeline.Submission{}, err
		}
		wait = pred.Wait
	}
	budget := c.cfg.BatchBudget
	if r.Lane == LaneInteractive {
		budget = c.cfg.InteractiveBudget
	}
	depth, err := pipeline.ResolveDepth(args.DepthRequested, wait, budget)
	if err != nil {
		return pipeline.Submission{}, err
	}
	args.Depth = depth
	return pipeline.Submission{ID: uuid.Must(uuid.NewV7()).String(), Region: r.Region, Tenant: r.Tenant, Lane: r.Lane,
		Diff: r.Diff, Args: args, Profile: p.Profile(), MaxPartTokens: rt.cfg.MaxPartTokens,
		IdempotencyKey: r.IdempotencyKey, Now: now}, nil
}

// checkReviewTarget refuses a webhook publication to a subscriber that is
// not the tenant's own in the region: the delivery would be signed with
// that subscriber's secret. An unknown subscriber and another tenant's are
// refused alike, so subscriber ids of other tenants cannot be probed.
func (c *Client) checkReviewTarget(ctx context.Context, region, tenant string, p ReviewPublish) error {
	if p.Kind != pipeline.PublishWebhook {
		return nil
	}
	if tenant == "" {
		tenant = job.DefaultTenant
	}
	rt, ok := c.regions[region]
	if !ok || rt.hooks == nil {
		return fmt.Errorf("ratelane: unknown region %q", region)
	}
	rec, err := rt.hooks.Get(ctx, p.Target)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && rec.Tenant != tenant:
		return fmt.Errorf("%w: publish.target %q is not a webhook subscriber of tenant %q in region %s",
			errNoReviewTarget, p.Target, tenant, region)
	case err != nil:
		return err
	}
	return nil
}

// errNoReviewTarget marks a webhook publish target that is not the
// tenant's subscriber.
var errNoReviewTarget = errors.New("unknown webhook subscriber")

func (c *Client) insertPlan(ctx context.Context, rt *reviewRT, plan pipeline.Plan) (ReviewStatus, error) {
	for _, o := range plan.Objects {
		if err := rt.st.PutObject(ctx, o); err != nil {
			return ReviewStatus{}, fmt.Errorf("ratelane: store review content: %w", err)
		}
	}
	res, err := rt.st.Insert(ctx, append([]*job.Job{plan.Parent}, plan.Parts...), c.cfg.DefaultLimit)
	if err != nil {
		return ReviewStatus{}, fmt.Errorf("ratelane: insert review: %w", err)
	}
	if res[0].Existing {
		// An idempotent replay: the first review stands (its parts dedupe by
		// derived keys), so the copy of the diff stored above is unreferenced.
		for _, o := range plan.Objects {
			_ = rt.st.DeleteObject(ctx, o.Kind, o.ID)
		}
	}
	c.notify(rt.region)
	rt.agg.Wake(res[0].Job.ID) // a review with no reviewable part is done at once
	return c.Review(ctx, rt.region, res[0].Job.ID)
}

// Review returns a review's status and, once aggregated, its result.
func (c *Client) Review(ctx context.Context, region, id string) (ReviewStatus, error) {
	rt, err := c.reviewRT(region)
	if err != nil {
		return ReviewStatus{}, err
	}
	j, err := rt.st.Get(ctx, id)
	if err != nil {
		return ReviewStatus{}, err
	}
	if j.Kind != pipeline.KindReview {
		return ReviewStatus{}, ErrNotFound
	}
	args, _ := decodeArgs(j)
	s := ReviewStatus{ID: j.ID, Region: j.Region, State: j.State, Reason: string(j.Reason), Repo: args.Repo, Change: args.Change,
		DepthRequested: args.DepthRequested, Depth: args.Depth, Provider: args.Provider, Publish: args.Publish,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
	parts, err := pipeline.Parts(ctx, rt.st, j)
	if err != nil {
		return ReviewStatus{}, err
	}
	res, err := pipeline.Build(args, parts, finding.AggregateOptions{MaxFindings: rt.cfg.MaxFindings})
	if err != nil {
		return ReviewStatus{}, err
	}
	s.Parts = res.Parts
	if len(j.Result) > 0 {
		final, err := decodeResult(j)
		if err != nil {
			return ReviewStatus{}, err
		}
		s.Result = &final
	}
	return s, nil
}

// ReviewSARIF writes a finished review's findings as SARIF 2.1.0.
func (c *Client) ReviewSARIF(ctx context.Context, region, id string, w io.Writer) error {
	s, err := c.Review(ctx, region, id)
	if err != nil {
		return err
	}
	if s.Result == nil {
		return fmt.Errorf("%w: review %s is %s and has no result yet", ErrConflict, id, s.State)
	}
	return report.WriteSARIF(w, Version, s.Result.Findings)
}

func (c *Client) reviewRT(region string) (*reviewRT, error) {
	if _, err := c.store(region); err != nil {
		return nil, err
	}
	rt := c.cfg.reviews[region]
	if rt == nil || rt.st == nil {
		return nil, fmt.Errorf("%w: %q", ErrReviewsNotConfigured, region)
	}
	return rt, nil
}

func (rt *reviewRT) providerFor(name string) (ReviewProvider, error) {
	if name == "" {
		name = rt.cfg.DefaultProvider
	}
	if name == "" && len(rt.cfg.Providers) > 0 {
		name = rt.cfg.Providers[0].Profile().Name
	}
	if p, ok := rt.parts.Provider(name); ok {
		return p, nil
	}
	return nil, fmt.Errorf("ratelane: no review provider %q in region %q", name, rt.region)
}
