package pipeline

import (
	"context"
	"strconv"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/chunk"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/provider"
)

// InlineOptions configures Inline.
type InlineOptions struct {
	// Depth is full (default) or fast.
	Depth string
	// MaxPartTokens is the part budget; 0 means chunk.DefaultMaxTokens.
	MaxPartTokens int
	// MaxFindings caps the findings; 0 means finding.DefaultMaxFindings.
	MaxFindings int
}

// Inline reviews a diff in the caller's goroutine, with no queue: parse,
// split, one provider call per part, validate, verify, aggregate. A part
// whose call fails is not retried (the inline path has nobody to
// reschedule it); it is recorded as failed and the result is partial. It
// is the `ratelane review` command's path, for small tools and local use.
func Inline(ctx context.Context, p provider.Provider, text []byte, o InlineOptions) (Result, error) {
	d, err := diff.Parse(text)
	if err != nil {
		return Result{}, err
	}
	if o.Depth == "" {
		o.Depth = DepthFull
	}
	mode := chunk.ModeFull
	if o.Depth == DepthFast {
		mode = chunk.ModeFast
	}
	parts, err := chunk.Split(d, chunk.Options{MaxTokens: o.MaxPartTokens, Mode: mode})
	if err != nil {
		return Result{}, err
	}
	args := Args{Depth: o.Depth, Parts: len(parts), Provider: p.Profile().Name}
	jobs := make([]*job.Job, len(parts))
	for i, part := range parts {
		jobs[i] = inlinePart(ctx, p, part, o.Depth)
	}
	return Build(args, jobs, finding.AggregateOptions{MaxFindings: o.MaxFindings})
}

// inlinePart reviews one part and records it as the job Build expects.
func inlinePart(ctx context.Context, p provider.Provider, part chunk.Part, depth string) *job.Job {
	j := &job.Job{ID: "part-" + strconv.Itoa(part.Index), State: job.StateTerminal, Reason: job.ReasonPermanentError}
	j.Payload, _ = jsonMarshal(PartArgs{Index: part.Index, Depth: depth})
	pd, err := diff.Parse([]byte(part.Text))
	if err != nil {
		return j
	}
	res, out := ReviewPart(ctx, p, pd, depth)
	if out.Class != job.ClassSuccess {
		j.Reason = job.Reason(out.Class)
		return j
	}
	j.State = job.StatePublished
	j.Result, _ = jsonMarshal(res)
	return j
}
