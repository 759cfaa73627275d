package llmbatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/ratelane/ratelane/internal/ratelimit"
)

// Anthropic is Anthropic's Message Batches API through the official SDK:
// the requests go in the create body, results stream back as JSONL from
// the batch's results endpoint for 29 days after creation.
type Anthropic struct {
	cfg    Config
	client anthropic.Client
}

// NewAnthropic returns an Anthropic provider; the SDK's retries are off.
func NewAnthropic(cfg Config) *Anthropic {
	cfg = cfg.withDefaults(AnthropicLimits)
	opts := []option.RequestOption{option.WithMaxRetries(0), option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTPClient), option.WithRequestTimeout(cfg.Timeout)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return &Anthropic{cfg: cfg, client: anthropic.NewClient(opts...)}
}

// Name returns "anthropic".
func (*Anthropic) Name() string { return "anthropic" }

// Limits returns the configured limits (default [AnthropicLimits]).
func (a *Anthropic) Limits() Limits { return a.cfg.Limits }

// NeedsUpload returns false: the requests go in the create body.
func (*Anthropic) NeedsUpload() bool { return false }

// Upload does nothing: Anthropic has no input files.
func (*Anthropic) Upload(context.Context, string, []Item) (string, error) { return "", nil }

func anthropicRequest(it Item) anthropic.MessageBatchNewParamsRequest {
	p := anthropic.MessageBatchNewParamsRequestParams{
		Model:     anthropic.Model(it.Request.Model),
		MaxTokens: it.Request.MaxTokens,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(it.Request.Prompt))},
	}
	if it.Request.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: it.Request.System}}
	}
	if f := it.Request.Format; f != nil {
		// Anthropic's structured outputs (output_config.format) take the
		// schema alone; the name is OpenAI's.
		p.OutputConfig = anthropic.OutputConfigParam{Format: anthropic.JSONOutputFormatParam{Schema: f.Schema}}
	}
	return anthropic.MessageBatchNewParamsRequest{CustomID: it.CustomID, Params: p}
}

// EncodedSize is the length of item's element of requests[].
func (*Anthropic) EncodedSize(it Item) (int64, error) {
	b, err := json.Marshal(anthropicRequest(it))
	return int64(len(b)), err
}

// Create submits items as one Message Batch. Anthropic batches carry no
// metadata, so the chunk key is not sent (see Find).
func (a *Anthropic) Create(ctx context.Context, key, _ string, items []Item) (string, error) {
	reqs := make([]anthropic.MessageBatchNewParamsRequest, len(items))
	for i, it := range items {
		reqs[i] = anthropicRequest(it)
	}
	b, err := a.client.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: reqs})
	if err != nil {
		return "", a.wrap("create "+key, err)
	}
	return b.ID, nil
}

// Find lists batches newest first back to q.Since (less a minute) and
// returns the oldest one with q.Count requests. Anthropic's batch object
// carries neither metadata nor custom_ids, so this is a heuristic: two
// chunks of the same size submitted within the same minute by crashed
// creates could be confused. Reconciliation still joins on custom_id, so
// such a mix-up costs a requeue, never a wrong or duplicated result.
func (a *Anthropic) Find(ctx context.Context, q FindQuery) (string, bool, error) {
	pager := a.client.Messages.Batches.ListAutoPaging(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(100)})
	oldest := q.Since.Add(-time.Minute)
	found := ""
	for pager.Next() {
		b := pager.Current()
		if b.CreatedAt.Before(oldest) {
			break
		}
		c := b.RequestCounts
		if int(c.Processing+c.Succeeded+c.Errored+c.Canceled+c.Expired) == q.Count {
			found = b.ID // keep going: the oldest match is the first create
		}
	}
	if err := pager.Err(); err != nil {
		return "", false, a.wrap("find "+q.Key, err)
	}
	return found, found != "", nil
}

// Poll retrieves the batch.
func (a *Anthropic) Poll(ctx context.Context, id string) (Status, error) {
	b, err := a.client.Messages.Batches.Get(ctx, id, anthropic.MessageBatchGetParams{})
	if err != nil {
		return Status{}, a.wrap("poll "+id, err)
	}
	return anthropicStatus(b), nil
}

// Cancel cancels the batch; an ended batch answers with its status.
func (a *Anthropic) Cancel(ctx context.Context, id string) (Status, error) {
	b, err := a.client.Messages.Batches.Cancel(ctx, id, anthropic.MessageBatchCancelParams{})
	if err != nil {
		return Status{}, a.wrap("cancel "+id, err)
	}
	return anthropicStatus(b), nil
}

func anthropicStatus(b *anthropic.MessageBatch) Status {
	c := b.RequestCounts
	st := Status{ID: b.ID, Counts: Counts{Processing: int(c.Processing), Succeeded: int(c.Succeeded),
		Errored: int(c.Errored), Expired: int(c.Expired), Canceled: int(c.Canceled)}}
	st.Counts.Total = st.Counts.Processing + st.Counts.Succeeded + st.Counts.Errored + st.Counts.Expired + st.Counts.Canceled
	switch b.ProcessingStatus {
	case anthropic.MessageBatchProcessingStatusCanceling:
		st.Phase = PhaseCanceling
	case anthropic.MessageBatchProcessingStatusEnded:
		st.Phase, st.End = PhaseEnded, EndCompleted
		switch {
		case !b.CancelInitiatedAt.IsZero():
			st.End = EndCancelled
		case c.Expired > 0:
			st.End = EndExpired
		}
	default:
		st.Phase = PhaseInProgress
	}
	return st
}

// Collect streams the results of an ended batch.
func (a *Anthropic) Collect(ctx context.Context, id string) ([]Result, error) {
	stream := a.client.Messages.Batches.ResultsStreaming(ctx, id, anthropic.MessageBatchResultsParams{},
		option.WithRequestTimeout(10*a.cfg.Timeout))
	defer stream.Close()
	var out []Result
	for stream.Next() {
		yieldEvery(ctx, len(out)) // a piece of lines at a time, as OpenAI's
		out = append(out, anthropicResult(stream.Current()))
	}
	if err := stream.Err(); err != nil {
		return nil, a.wrap("collect "+id, err)
	}
	return out, nil
}

func anthropicResult(l anthropic.MessageBatchIndividualResponse) Result {
	r := Result{CustomID: l.CustomID}
	switch v := l.Result.AsAny().(type) {
	case anthropic.MessageBatchSucceededResult:
		var text strings.Builder
		for _, b := range v.Message.Content {
			if b.Type == "text" {
				text.WriteString(b.Text)
			}
		}
		r.Kind, r.Body = KindSucceeded, []byte(text.String())
		r.InputTokens, r.OutputTokens = v.Message.Usage.InputTokens, v.Message.Usage.OutputTokens
	case anthropic.MessageBatchErroredResult:
		typ := v.Error.Error.Type
		r.Kind, r.ErrorType = KindErrored, typ
		// Only a request the API judged malformed is permanent.
		r.Retryable = typ != "invalid_request_error" && typ != "permission_error" && typ != "authentication_error"
	case anthropic.MessageBatchCanceledResult:
		r.Kind = KindCanceled
	case anthropic.MessageBatchExpiredResult:
		r.Kind = KindExpired
	default:
		r.Kind, r.ErrorType, r.Retryable = KindErrored, "unknown_result_type", true
	}
	return r
}

// wrap turns a 429 (or 503 with Retry-After) into a RateLimitedError.
func (a *Anthropic) wrap(op string, err error) error {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) && apiErr.Response != nil && congested(apiErr.StatusCode, apiErr.Response.Header) {
		info := ratelimit.Parse(apiErr.Response.Header, a.cfg.Now())
		return fmt.Errorf("anthropic %s: %w", op, &RateLimitedError{Status: apiErr.StatusCode,
			RetryAfter: info.RetryAfter, HasRetryAfter: info.HasRetryAfter})
	}
	return fmt.Errorf("anthropic %s: %w", op, err)
}
