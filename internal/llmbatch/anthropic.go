package llmbatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
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
	schema schemaCache // the last Format's, for EncodedSize
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

// EncodedSize is the length of item's element of requests[], counted
// from its fields as the SDK encodes anthropicRequest (requestSize), not
// by encoding it: the SDK's encoding of one review item made ~140
// allocations and ~64 KB (docs/benchmarks.md, "Session 41 (s41h3)").
func (a *Anthropic) EncodedSize(it Item) (int64, error) {
	n, err := a.requestSize(it)
	return int64(n), err
}

// Fixed parts of a request, around its fields (the SDK's order: keys
// sorted, empty optional fields omitted).
const (
	requestFixed      = `{"custom_id":,"params":{"max_tokens":,"messages":[{"content":[{"text":,"type":"text"}],"role":"user"}]}}`
	requestModel      = `,"model":`
	requestFormat     = `,"output_config":{"format":{"schema":,"type":"json_schema"}}`
	requestSystemText = `,"system":[{"text":,"type":"text"}]`
)

// requestSize is the length of anthropicRequest(it) as the SDK encodes it
// (TestAnthropicRequestSize and FuzzAnthropicRequestSize hold the two
// together): its strings escaped as encoding/json does (jsonStringLen),
// the schema as json.Marshal writes it. The SDK omits the output config
// of a Format without a schema.
func (a *Anthropic) requestSize(it Item) (int, error) {
	r := it.Request
	var digits [20]byte
	n := len(requestFixed) + jsonStringLen(it.CustomID) + len(strconv.AppendInt(digits[:0], r.MaxTokens, 10)) +
		jsonStringLen(r.Prompt)
	if r.Model != "" {
		n += len(requestModel) + jsonStringLen(r.Model)
	}
	if f := r.Format; f != nil && f.Schema != nil {
		schema, err := a.schema.encode(f)
		if err != nil {
			return 0, err
		}
		n += len(requestFormat) + len(schema)
	}
	if r.System != "" {
		n += len(requestSystemText) + jsonStringLen(r.System)
	}
	return n, nil
}

// Create submits items as one Message Batch. Anthropic batches carry no
// metadata, so the chunk key is not sent (see Find).
//
// The body is createBody's, sent through the SDK's own call (its path,
// headers, timeout and error handling): the empty params only name the
// request, and the body option replaces what the SDK would encode from
// them ("{}"). The SDK's telemetry span, if one is recorded, then counts
// no requests.
func (a *Anthropic) Create(ctx context.Context, key, _ string, items []Item) (string, error) {
	body, err := a.createBody(items)
	if err != nil {
		return "", fmt.Errorf("anthropic create %s: %w", key, err)
	}
	b, err := a.client.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{},
		option.WithRequestBody("application/json", body))
	if err != nil {
		return "", a.wrap("create "+key, err)
	}
	return b.ID, nil
}

// Fixed parts of the create body, around its requests.
const (
	createOpen  = `{"requests":[`
	createClose = `]}`
)

// createBody returns the create request's body for items: the bytes the
// SDK writes for MessageBatchNewParams{Requests: anthropicRequest(it)...}
// (TestAnthropicCreateBodyMatchesTheSDK and FuzzAnthropicRequestSize pin
// them), encoded in one pass into one buffer of the size requestSize
// counts. Through the SDK's types each request's MarshalJSON encoded
// every nested param on its own and copied it into its parent: ~139
// allocations and ~74 KB per review item (docs/benchmarks.md,
// "Session 41 (s41h3)" and "Session 42 (s42h1)").
func (a *Anthropic) createBody(items []Item) ([]byte, error) {
	n := len(createOpen) + len(createClose) + max(len(items)-1, 0)
	for _, it := range items {
		m, err := a.requestSize(it)
		if err != nil {
			return nil, err
		}
		n += m
	}
	buf := bytes.NewBuffer(make([]byte, 0, n)) // the encoder's newline after the last request takes the place of "]}"
	buf.WriteString(createOpen)
	enc := json.NewEncoder(buf)
	r := new(anthropicReq) // one value for all: encoded through a pointer, it is not copied into an interface each time
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := a.fill(r, it); err != nil {
			return nil, err
		}
		if err := enc.Encode(r); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1) // the encoder's newline
	}
	buf.WriteString(createClose)
	return buf.Bytes(), nil
}

// anthropicReq is one element of the create body's requests: the fields
// of the SDK's MessageBatchNewParamsRequest that ratelane sets, in the
// order and encoding it writes them (keys sorted, empty optional fields
// omitted; requestFixed and its neighbours are the same layout).
type anthropicReq struct {
	CustomID string          `json:"custom_id"`
	Params   anthropicParams `json:"params"`
}

type anthropicParams struct {
	MaxTokens    int64                  `json:"max_tokens"`
	Messages     [1]anthropicMessage    `json:"messages"`
	Model        string                 `json:"model,omitzero"`
	OutputConfig *anthropicOutputConfig `json:"output_config,omitzero"`
	System       []anthropicText        `json:"system,omitzero"`
	// output and system are what OutputConfig and System point at, kept
	// with the request so that filling it allocates nothing.
	output anthropicOutputConfig
	system [1]anthropicText
}

type anthropicMessage struct {
	Content [1]anthropicText `json:"content"`
	Role    string           `json:"role"`
}

type anthropicText struct {
	Text string `json:"text"`
	Type string `json:"type"`
}

type anthropicOutputConfig struct {
	Format anthropicFormat `json:"format"`
}

// anthropicFormat is output_config.format: structured outputs take the
// schema alone (the Format's name is OpenAI's).
type anthropicFormat struct {
	Schema json.RawMessage `json:"schema"` // encoded once per Format: schemaCache
	Type   string          `json:"type"`
}

// fill sets r to it's request, as anthropicRequest builds it for the SDK:
// the output config only for a Format with a schema (the SDK omits an
// empty one), the system prompt only when there is one.
func (a *Anthropic) fill(r *anthropicReq, it Item) error {
	q := it.Request
	p := &r.Params
	r.CustomID = it.CustomID
	p.MaxTokens, p.Model = q.MaxTokens, q.Model
	p.Messages[0] = anthropicMessage{Content: [1]anthropicText{{Text: q.Prompt, Type: "text"}}, Role: "user"}
	p.OutputConfig, p.System = nil, nil
	if f := q.Format; f != nil && f.Schema != nil {
		schema, err := a.schema.encode(f)
		if err != nil {
			return err
		}
		p.output.Format = anthropicFormat{Schema: schema, Type: "json_schema"}
		p.OutputConfig = &p.output
	}
	if q.System != "" {
		p.system[0] = anthropicText{Text: q.System, Type: "text"}
		p.System = p.system[:]
	}
	return nil
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

// Collect reads the results of an ended batch: the SDK's request, its
// stream of lines decoded here (decodeAnthropicResults), not into the
// SDK's MessageBatchIndividualResponse (anthropicLine says why).
func (a *Anthropic) Collect(ctx context.Context, id string) ([]Result, error) {
	var resp *http.Response
	err := a.client.Get(ctx, "v1/messages/batches/"+url.PathEscape(id)+"/results", nil, &resp,
		option.WithHeader("Accept", "application/x-jsonl"), option.WithRequestTimeout(10*a.cfg.Timeout))
	if err != nil {
		return nil, a.wrap("collect "+id, err)
	}
	defer resp.Body.Close()
	out, err := decodeAnthropicResults(ctx, resp.Body)
	if err != nil {
		return nil, a.wrap("collect "+id, err)
	}
	return out, nil
}

// decodeAnthropicResults reads a results stream's lines. A line that is
// not JSON ends the read with an error, as the SDK's stream did; a line
// that is JSON of the wrong shape is its own unreadable result
// (anthropicLine.result).
func decodeAnthropicResults(ctx context.Context, r io.Reader) ([]Result, error) {
	var out []Result
	dec := json.NewDecoder(r)
	for {
		yieldEvery(ctx, len(out)) // a piece of lines at a time, as OpenAI's
		var l anthropicLine
		err := dec.Decode(&l)
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return out, nil
		case err != nil && !errors.As(err, &typeErr):
			return nil, fmt.Errorf("line %d: %w", len(out)+1, err)
		}
		out = append(out, l.result(err == nil))
	}
}

// anthropicLine is a line of a batch's results: the fields of the SDK's
// MessageBatchIndividualResponse that ratelane reads, and no others
// (TestAnthropicResultMatchesTheSDK decodes the same lines both ways).
// Not the SDK's type: its decoder (apijson, over gjson) kept every field
// of the message with its raw JSON and metadata, for five fields
// (docs/benchmarks.md, "Session 41 (s41h3)").
//
// On well-typed lines the two agree. On mistyped ones they differ: the
// SDK coerced or zeroed (a numeric text became its digits, a message
// that is not an object an empty answer), encoding/json refuses, so any
// field of the wrong type, and a succeeded result without a message, is
// "unreadable_response" here: retried, never a coerced success. A
// mistyped usage only loses the counts (anthropicUsage), never the answer.
type anthropicLine struct {
	CustomID string `json:"custom_id"`
	Result   struct {
		Type    string `json:"type"`
		Message *struct {
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			Usage anthropicUsage `json:"usage"`
		} `json:"message"`
		Error struct {
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
		} `json:"error"`
	} `json:"result"`
}

// anthropicUsage is a message's token usage.
type anthropicUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// UnmarshalJSON decodes the usage, or leaves it zero when it is not the
// object it should be: the counts are a report, and a malformed one must
// not turn an answer into an error.
func (u *anthropicUsage) UnmarshalJSON(b []byte) error {
	type plain anthropicUsage // without this method
	decodeOrZero(b, (*plain)(u))
	return nil
}

// result is the line's Result; wellTyped is false when a field had the
// wrong type (the decode's UnmarshalTypeError).
func (l *anthropicLine) result(wellTyped bool) Result {
	r := Result{CustomID: l.CustomID}
	res := &l.Result
	switch {
	case !wellTyped, res.Type == "succeeded" && res.Message == nil:
		r.Kind, r.ErrorType, r.Retryable = KindErrored, "unreadable_response", true
	case res.Type == "succeeded":
		n := 0
		for _, b := range res.Message.Content {
			if b.Type == "text" {
				n += len(b.Text)
			}
		}
		body := make([]byte, 0, n)
		for _, b := range res.Message.Content {
			if b.Type == "text" {
				body = append(body, b.Text...)
			}
		}
		r.Kind, r.Body = KindSucceeded, body
		r.InputTokens, r.OutputTokens = res.Message.Usage.InputTokens, res.Message.Usage.OutputTokens
	case res.Type == "errored":
		typ := res.Error.Error.Type
		r.Kind, r.ErrorType = KindErrored, typ
		// Only a request the API judged malformed is permanent.
		r.Retryable = typ != "invalid_request_error" && typ != "permission_error" && typ != "authentication_error"
	case res.Type == "canceled":
		r.Kind = KindCanceled
	case res.Type == "expired":
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
