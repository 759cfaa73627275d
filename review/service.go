package review

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/batchapi"
	"github.com/ratelane/ratelane/internal/review/batchlane"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/reviewapi"
)

// service serves the /v1/reviews routes (reviewapi.Service) from the
// plug-in's region runtimes. It maps the plug-in's errors onto the
// routes': a region without reviews wraps reviewapi.ErrNotConfigured (501)
// and a refused field is a *reviewapi.InputError (400). Neither ever
// quotes the diff. The plug-in's Request, Status and ProviderInfo have the
// fields of reviewapi's Submission, Review and ProviderInfo one for one
// (their tags and docs differ), as BatchReview and BatchListParams have
// batchapi's, so both services convert rather than copy field by field: a
// field added to one side only fails to compile here instead of going
// missing from the API.
type service struct{ p *Plugin }

func (s service) SubmitReview(ctx context.Context, sub reviewapi.Submission) (reviewapi.Review, error) {
	rt, err := s.p.runtime(sub.Region)
	if err != nil {
		return reviewapi.Review{}, apiError(err)
	}
	if cmp.Or(sub.Lane, ratelane.LaneInteractive) == ratelane.LaneInteractive {
		// An interactive review is in flight from the route's first look
		// at it (PluginRegion.InteractiveArriving); Submit's own raise
		// nests in this one, and its insert ends it.
		var end func()
		ctx, end = rt.r.InteractiveArriving(ctx)
		defer end()
	}
	// Checked here too so that the caller's mistakes answer 400 with the
	// field to fix rather than 500.
	if _, err := rt.providerFor(sub.Provider); err != nil {
		return reviewapi.Review{}, &reviewapi.InputError{Field: "provider", Err: err}
	}
	args := pipeline.Args{Repo: sub.Repo, Change: sub.Change, Publish: sub.Publish}
	if err := rt.publisher.CheckPublish(args); err != nil {
		return reviewapi.Review{}, &reviewapi.InputError{Field: "publish", Err: err}
	}
	if err := rt.checkTarget(ctx, sub.Tenant, sub.Publish); errors.Is(err, errNoTarget) {
		return reviewapi.Review{}, &reviewapi.InputError{Field: "publish.target", Err: err}
	} else if err != nil {
		return reviewapi.Review{}, err
	}
	st, err := s.p.Submit(ctx, Request(sub))
	var pe *diff.ParseError
	switch {
	case errors.As(err, &pe), errors.Is(err, diff.ErrNoFiles):
		return reviewapi.Review{}, &reviewapi.InputError{Field: "diff", Err: contentFree{err}}
	case err != nil:
		return reviewapi.Review{}, apiError(err)
	}
	return reviewapi.Review(st), nil
}

func (s service) Review(ctx context.Context, region, id string) (reviewapi.Review, error) {
	st, err := s.p.Get(ctx, region, id)
	if err != nil {
		return reviewapi.Review{}, apiError(err)
	}
	return reviewapi.Review(st), nil
}

func (s service) ReviewSARIF(ctx context.Context, region, id string, w io.Writer) error {
	return apiError(s.p.SARIF(ctx, region, id, w))
}

func (s service) Progress(ctx context.Context, parent *job.Job) (pipeline.Progress, error) {
	rt, err := s.p.runtime(parent.Region)
	if err != nil {
		return pipeline.Progress{}, apiError(err)
	}
	var args pipeline.Args
	_ = json.Unmarshal(parent.Payload, &args)      // the parent's payload is the plug-in's own
	parts, err := rt.partStates(ctx, parent, args) // the parts its GET counts
	if err != nil {
		return pipeline.Progress{}, err
	}
	return pipeline.CountParts(args, parts), nil
}

func apiError(err error) error {
	if errors.Is(err, ErrNotConfigured) {
		return fmt.Errorf("%w: %w", reviewapi.ErrNotConfigured, err)
	}
	return err
}

// contentFree shows a diff error's message (a line number and a fixed
// reason) and hides the parser error it wraps, which may quote the diff.
type contentFree struct{ err error }

func (e contentFree) Error() string { return e.err.Error() }

func (s service) Providers(_ context.Context, region string) ([]reviewapi.ProviderInfo, error) {
	ps, err := s.p.Providers(region)
	if err != nil {
		return nil, apiError(err)
	}
	out := make([]reviewapi.ProviderInfo, 0, len(ps))
	for _, pi := range ps {
		out = append(out, reviewapi.ProviderInfo(pi))
	}
	return out, nil
}

// batchService serves the /v1/batches routes (batchapi.Service) from the
// plug-in, mapping its errors as service does.
type batchService struct{ p *Plugin }

func (s batchService) SubmitBatch(ctx context.Context, sub batchapi.Submission) (batchapi.Batch, error) {
	req := BatchRequest{Region: sub.Region, Tenant: sub.Tenant, Provider: sub.Provider, Deadline: sub.Deadline, MaxAttempts: sub.MaxAttempts,
		OnOverload: sub.OnOverload}
	for _, r := range sub.Reviews {
		req.Reviews = append(req.Reviews, BatchReview(r))
	}
	req.Extractions = sub.Extractions
	b, err := s.p.SubmitBatch(ctx, req)
	var re *batchlane.ReviewError
	var pe *diff.ParseError
	switch {
	case errors.As(err, &re) && (errors.As(err, &pe) || errors.Is(err, diff.ErrNoFiles)):
		return b, &reviewapi.InputError{Field: fmt.Sprintf("reviews[%d].diff", re.Index), Err: contentFree{re.Err}}
	case errors.Is(err, ErrNoBatchProvider), errors.Is(err, errNoProvider):
		return b, &reviewapi.InputError{Field: "provider", Err: err}
	}
	return b, batchAPIError(err)
}

func (s batchService) Batch(ctx context.Context, region, id string) (batchapi.Batch, error) {
	b, err := s.p.GetBatch(ctx, region, id)
	return b, batchAPIError(err)
}

func (s batchService) BatchItems(ctx context.Context, region, id string, p batchapi.ItemParams) ([]batchapi.Item, error) {
	items, err := s.p.BatchItems(ctx, region, id, p.State, p.After, p.Limit)
	return items, batchAPIError(err)
}

func (s batchService) ListBatches(ctx context.Context, region string, p batchapi.ListParams) ([]batchapi.Batch, error) {
	bs, err := s.p.ListBatches(ctx, region, BatchListParams(p))
	return bs, batchAPIError(err)
}

func (s batchService) CancelBatch(ctx context.Context, region, id string) (batchapi.Batch, error) {
	b, err := s.p.CancelBatch(ctx, region, id)
	return b, batchAPIError(err)
}

// batchAPIError maps the plug-in's errors onto the batch routes': a done
// batch's cancel is a 409; not found (store.ErrNotFound) and not
// configured pass as they are.
func batchAPIError(err error) error {
	if errors.Is(err, ratelane.ErrConflict) {
		return fmt.Errorf("%w: %w", batchapi.ErrConflict, err)
	}
	return apiError(err)
}
