package ratelane

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ratelane/ratelane/internal/httpapi"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/pipeline"
)

// reviewAdapter serves /v1/reviews from the client's review runtimes. It
// maps the client's errors onto the API's: a region without HandleReviews
// wraps httpapi.ErrReviewsNotConfigured (501) and a refused field is an
// *httpapi.ReviewInputError (400). Neither ever quotes the diff.
type reviewAdapter struct{ c *Client }

func (a reviewAdapter) SubmitReview(ctx context.Context, sub httpapi.ReviewSubmission) (httpapi.Review, error) {
	rt, err := a.c.reviewRT(sub.Region)
	if err != nil {
		return httpapi.Review{}, apiReviewError(err)
	}
	// Checked here too so that the caller's mistakes answer 400 with the
	// field to fix rather than 500.
	if _, err := rt.providerFor(sub.Provider); err != nil {
		return httpapi.Review{}, &httpapi.ReviewInputError{Field: "provider", Err: err}
	}
	args := pipeline.Args{Repo: sub.Repo, Change: sub.Change, Publish: sub.Publish}
	if err := rt.publisher.CheckPublish(args); err != nil {
		return httpapi.Review{}, &httpapi.ReviewInputError{Field: "publish", Err: err}
	}
	if err := a.c.checkReviewTarget(ctx, sub.Region, sub.Tenant, sub.Publish); errors.Is(err, errNoReviewTarget) {
		return httpapi.Review{}, &httpapi.ReviewInputError{Field: "publish.target", Err: err}
	} else if err != nil {
		return httpapi.Review{}, err
	}
	s, err := a.c.SubmitReview(ctx, ReviewRequest{Region: sub.Region, Tenant: sub.Tenant, Lane: sub.Lane, Repo: sub.Repo,
		Change: sub.Change, BaseSHA: sub.BaseSHA, HeadSHA: sub.HeadSHA, Diff: sub.Diff, Depth: sub.Depth,
		Provider: sub.Provider, Publish: sub.Publish, IdempotencyKey: sub.IdempotencyKey})
	var pe *diff.ParseError
	switch {
	case errors.As(err, &pe), errors.Is(err, diff.ErrNoFiles):
		return httpapi.Review{}, &httpapi.ReviewInputError{Field: "diff", Err: contentFree{err}}
	case err != nil:
		return httpapi.Review{}, apiReviewError(err)
	}
	return apiReview(s, sub.Tenant), nil
}

func (a reviewAdapter) Review(ctx context.Context, region, id string) (httpapi.Review, error) {
	if _, err := a.c.reviewRT(region); err != nil {
		return httpapi.Review{}, apiReviewError(err)
	}
	j, err := a.c.Job(ctx, region, id)
	if err != nil {
		return httpapi.Review{}, err
	}
	if j.Kind != pipeline.KindReview {
		return httpapi.Review{}, ErrNotFound
	}
	s, err := a.c.Review(ctx, region, id)
	if err != nil {
		return httpapi.Review{}, apiReviewError(err)
	}
	return apiReview(s, j.Tenant), nil
}

func (a reviewAdapter) ReviewSARIF(ctx context.Context, region, id string, w io.Writer) error {
	return apiReviewError(a.c.ReviewSARIF(ctx, region, id, w))
}

func apiReview(s ReviewStatus, tenant string) httpapi.Review {
	return httpapi.Review{ID: s.ID, Region: s.Region, Tenant: tenant, State: s.State, Reason: s.Reason, Repo: s.Repo,
		Change: s.Change, DepthRequested: s.DepthRequested, Depth: s.Depth, Provider: s.Provider, Publish: s.Publish,
		Parts: s.Parts, Result: s.Result, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

func apiReviewError(err error) error {
	if errors.Is(err, ErrReviewsNotConfigured) {
		return fmt.Errorf("%w: %w", httpapi.ErrReviewsNotConfigured, err)
	}
	return err
}

// contentFree shows a diff error's message (a line number and a fixed
// reason) and hides the parser error it wraps, which may quote the diff.
type contentFree struct{ err error }

func (e contentFree) Error() string { return e.err.Error() }
