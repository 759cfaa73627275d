package llmbatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/ratelane/ratelane/internal/ratelimit"
)

// metadataKey is the batch metadata entry that names the chunk, so that
// Find recognises ratelane's own batches.
const metadataKey = "ratelane_chunk"

// OpenAI is the OpenAI Batch API over /v1/chat/completions, through the
// official SDK: items go up as a JSONL file (purpose=batch), the batch
// runs within the 24 h window, results come back as output and error
// files joined on custom_id.
type OpenAI struct {
	cfg    Config
	client openai.Client
	schema schemaCache // the last Format's: schemaJSON
}

// NewOpenAI returns an OpenAI provider; the SDK's retries are off (the
// queue owns retries).
func NewOpenAI(cfg Config) *OpenAI {
	cfg = cfg.withDefaults(OpenAILimits)
	opts := []option.RequestOption{option.WithMaxRetries(0), option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTPClient), option.WithRequestTimeout(cfg.Timeout)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return &OpenAI{cfg: cfg, client: openai.NewClient(opts...)}
}

// Name returns "openai".
func (*OpenAI) Name() string { return "openai" }

// Limits returns the configured limits (default [OpenAILimits]).
func (o *OpenAI) Limits() Limits { return o.cfg.Limits }

// NeedsUpload returns true: OpenAI batches read an uploaded file.
func (*OpenAI) NeedsUpload() bool { return true }

// openAILine is one line of a batch input file.
type openAILine struct {
	CustomID string     `json:"custom_id"`
	Method   string     `json:"method"`
	URL      string     `json:"url"`
	Body     openAIBody `json:"body"`
}

// openAIBody is the line's /v1/chat/completions request: the fields of
// the SDK's openai.ChatCompletionNewParams that ratelane sets, in its
// order and encoding (TestOpenAILineMatchesTheSDK pins the bytes). Not
// the SDK's type: its MarshalJSON encodes every nested union and param
// struct on its own and copies the result into its parent, so one line
// held the prompt five times over and a 10,000-file sweep allocated
// ~20 % of its bytes there (docs/benchmarks.md, "Session 22 (s22h4)");
// this struct is encoded in one pass, straight into the upload's buffer.
type openAIBody struct {
	Messages            []openAIMessage `json:"messages"`
	Model               string          `json:"model,omitzero"`
	MaxCompletionTokens int64           `json:"max_completion_tokens"`
	ResponseFormat      *openAIFormat   `json:"response_format,omitzero"`
}

type openAIMessage struct {
	Content string `json:"content"`
	Role    string `json:"role"`
}

// openAIFormat is response_format of type json_schema.
type openAIFormat struct {
	JSONSchema openAIJSONSchema `json:"json_schema"`
	Type       string           `json:"type"`
}

type openAIJSONSchema struct {
	Name   string          `json:"name"`
	Strict bool            `json:"strict"`
	Schema json.RawMessage `json:"schema"` // encoded once per Format: schemaJSON
}

// encodedSchema is a Format's schema encoded.
type encodedSchema struct {
	f   *Format
	raw json.RawMessage
}

// schemaCache keeps the last Format's schema encoded: a batch's review
// items share one Format, and encoding its map (keys sorted, level by
// level) was most of a line's allocations.
type schemaCache struct{ last atomic.Pointer[encodedSchema] }

// encode returns f's schema as json.Marshal encodes it.
func (c *schemaCache) encode(f *Format) (json.RawMessage, error) {
	if e := c.last.Load(); e != nil && e.f == f {
		return e.raw, nil
	}
	raw, err := json.Marshal(f.Schema)
	if err != nil {
		return nil, err
	}
	c.last.Store(&encodedSchema{f: f, raw: raw})
	return raw, nil
}

// schemaJSON returns f's schema encoded (schemaCache).
func (o *OpenAI) schemaJSON(f *Format) (json.RawMessage, error) { return o.schema.encode(f) }

// encodeLine writes item's JSONL line and its newline to enc.
func (o *OpenAI) encodeLine(enc *json.Encoder, it Item) error {
	msgs := make([]openAIMessage, 0, 2)
	if it.Request.System != "" {
		msgs = append(msgs, openAIMessage{Content: it.Request.System, Role: "system"})
	}
	msgs = append(msgs, openAIMessage{Content: it.Request.Prompt, Role: "user"})
	body := openAIBody{Messages: msgs, Model: it.Request.Model, MaxCompletionTokens: it.Request.MaxTokens}
	if f := it.Request.Format; f != nil {
		// Strict: the model's answer is constrained to the schema, as the
		// interactive lane asks (internal/review/provider).
		schema, err := o.schemaJSON(f)
		if err != nil {
			return err
		}
		body.ResponseFormat = &openAIFormat{Type: "json_schema", JSONSchema: openAIJSONSchema{Name: f.Name, Strict: true, Schema: schema}}
	}
	return enc.Encode(openAILine{CustomID: it.CustomID, Method: http.MethodPost, URL: "/v1/chat/completions", Body: body})
}

// EncodedSize is the length of item's JSONL line without its newline,
// counted from its fields as encodeLine's encoder writes them (lineSize),
// not by encoding it: the line was encoded twice, once here for Split and
// once for the upload (docs/benchmarks.md, "Session 40 (s40h3)").
func (o *OpenAI) EncodedSize(it Item) (int64, error) {
	n, err := o.lineSize(it)
	return int64(n), err
}

// Fixed parts of a line, around its fields (encodeLine's order).
const (
	lineFixed   = `{"custom_id":,"method":"POST","url":"/v1/chat/completions","body":{"messages":[],"max_completion_tokens":}}`
	systemFixed = `{"content":,"role":"system"},`
	userFixed   = `{"content":,"role":"user"}`
	modelFixed  = `,"model":`
	formatFixed = `,"response_format":{"json_schema":{"name":,"strict":true,"schema":},"type":"json_schema"}`
)

// lineSize is the length of the line encodeLine writes for item, without
// its newline (TestOpenAILineMatchesTheSDK and FuzzOpenAILineSize hold
// the two together). The schema is counted as schemaJSON's bytes: the
// encoder compacts a json.RawMessage, and json.Marshal's output is
// already compact and HTML-escaped, so it goes in unchanged.
func (o *OpenAI) lineSize(it Item) (int, error) {
	r := it.Request
	var digits [20]byte
	n := len(lineFixed) + jsonStringLen(it.CustomID) + len(strconv.AppendInt(digits[:0], r.MaxTokens, 10)) +
		len(userFixed) + jsonStringLen(r.Prompt)
	if r.System != "" {
		n += len(systemFixed) + jsonStringLen(r.System)
	}
	if r.Model != "" {
		n += len(modelFixed) + jsonStringLen(r.Model)
	}
	if f := r.Format; f != nil {
		schema, err := o.schemaJSON(f)
		if err != nil {
			return 0, err
		}
		n += len(formatFixed) + jsonStringLen(f.Name) + len(schema)
	}
	return n, nil
}

// jsonStringLen is the length of s as encoding/json encodes a string with
// HTML escaping (json.Encoder's default): quoted; \, \", \b, \f, \n, \r
// and \t as two bytes; other control bytes and <, >, & as \u00XX; each
// invalid UTF-8 byte as \ufffd; U+2028 and U+2029 as \u202X.
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			n += int(asciiWidth[c])
			i++
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1, c == '\u2028', c == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// asciiWidth is the encoded length of each ASCII byte in a JSON string.
var asciiWidth = func() (w [utf8.RuneSelf]uint8) {
	for c := range w {
		w[c] = 1
	}
	for c := 0; c < 0x20; c++ {
		w[c] = 6
	}
	for _, c := range "<>&" {
		w[c] = 6
	}
	for _, c := range "\\\"\b\f\n\r\t" {
		w[c] = 2
	}
	return w
}()

// Upload writes items as JSONL and uploads it with purpose=batch. The
// lines are encoded once, straight into the multipart body's one buffer
// (uploadBody): handed a file to read, the SDK copied it into a body
// buffer of its own that grew by doubling, and the lines' buffer before
// it did too (docs/benchmarks.md, "Session 39 (s39h1)").
func (o *OpenAI) Upload(ctx context.Context, key string, items []Item) (string, error) {
	body, contentType, err := o.uploadBody(ctx, key, items)
	if err != nil {
		return "", fmt.Errorf("openai upload %s: %w", key, err)
	}
	// The params name the request for the SDK; the body option replaces
	// what it would encode from them (a file-less form, a few bytes).
	f, err := o.client.Files.New(ctx, openai.FileNewParams{Purpose: openai.FilePurposeBatch},
		option.WithRequestBody(contentType, body))
	if err != nil {
		return "", o.wrap("upload "+key, err)
	}
	return f.ID, nil
}

// uploadBody returns the multipart/form-data body of items' file upload
// and its content type. The form is the SDK's own (FileNewParams'
// MarshalMultipartTo: the file part, then purpose); only the file's
// bytes come from linesFile, which encodes the lines into the part.
func (o *OpenAI) uploadBody(ctx context.Context, key string, items []Item) (*bytes.Buffer, string, error) {
	body := new(bytes.Buffer)
	body.Grow(o.fileSize(items) + 1024) // + the form's headers and boundaries
	w := multipart.NewWriter(body)
	file := &linesFile{ctx: ctx, o: o, items: items, name: key + ".jsonl"}
	if err := (openai.FileNewParams{File: file, Purpose: openai.FilePurposeBatch}).MarshalMultipartTo(w); err != nil {
		return nil, "", err
	}
	if err := w.Close(); err != nil {
		return nil, "", err
	}
	return body, w.FormDataContentType(), nil
}

// linesFile is items' JSONL file as the SDK's form encoder reads it: a
// named reader whose WriteTo (which io.Copy prefers) encodes the lines
// into the destination, so the file is never held apart from the body.
// Read, for a reader that does not use WriteTo, encodes the file once
// into a buffer of its own and reads from that.
type linesFile struct {
	ctx   context.Context
	o     *OpenAI
	items []Item
	name  string
	read  *bytes.Buffer // Read's copy; nil until the first Read
	err   error
}

// Filename is the form part's file name.
func (f *linesFile) Filename() string { return f.name }

// ContentType is the form part's content type.
func (*linesFile) ContentType() string { return "application/jsonl" }

// WriteTo writes the file's lines to w.
func (f *linesFile) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	err := f.o.writeLines(f.ctx, cw, f.items)
	return cw.n, err
}

// Read reads the file from an encoding of its own.
func (f *linesFile) Read(p []byte) (int, error) {
	if f.read == nil && f.err == nil {
		f.read, f.err = f.o.jsonl(f.ctx, f.items)
	}
	if f.err != nil {
		return 0, f.err
	}
	return f.read.Read(p)
}

// countWriter counts what it writes through to w.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// jsonl returns items' batch input file in a buffer of its own.
func (o *OpenAI) jsonl(ctx context.Context, items []Item) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	buf.Grow(o.fileSize(items))
	if err := o.writeLines(ctx, &buf, items); err != nil {
		return nil, err
	}
	return &buf, nil
}

// fileSize is the exact length of items' JSONL file: their lines and
// newlines. An item lineSize cannot size (its schema does not encode) is
// left out; encodeLine reports it.
func (o *OpenAI) fileSize(items []Item) int {
	n := 0
	for _, it := range items {
		if l, err := o.lineSize(it); err == nil {
			n += l + 1
		}
	}
	return n
}

// writeLines encodes items' lines to w, calling ctx's yield func
// (WithYield) every YieldPiece lines: a thousand lines in one piece were
// ~36 ms of CPU no pacer could rest (docs/benchmarks.md, "Session 26
// (s26h2)").
func (o *OpenAI) writeLines(ctx context.Context, w io.Writer, items []Item) error {
	enc := json.NewEncoder(w)
	for i, it := range items {
		yieldEvery(ctx, i)
		if err := o.encodeLine(enc, it); err != nil {
			return fmt.Errorf("encode %s: %w", it.CustomID, err)
		}
	}
	return nil
}

// Create starts a batch over the uploaded fileID, naming the chunk in its
// metadata.
func (o *OpenAI) Create(ctx context.Context, key, fileID string, _ []Item) (string, error) {
	b, err := o.client.Batches.New(ctx, openai.BatchNewParams{
		InputFileID:      fileID,
		Endpoint:         openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		Metadata:         shared.Metadata{metadataKey: key},
	})
	if err != nil {
		return "", o.wrap("create "+key, err)
	}
	return b.ID, nil
}

// Find lists batches newest first back to q.Since (less a minute) and
// returns the one over q.FileID. A file id belongs to one chunk and is
// used by one Create, so the match is exact.
func (o *OpenAI) Find(ctx context.Context, q FindQuery) (string, bool, error) {
	pager := o.client.Batches.ListAutoPaging(ctx, openai.BatchListParams{Limit: openai.Int(100)})
	oldest := q.Since.Add(-time.Minute).Unix()
	for pager.Next() {
		b := pager.Current()
		if b.CreatedAt < oldest {
			break
		}
		if b.InputFileID == q.FileID && (b.Metadata[metadataKey] == "" || b.Metadata[metadataKey] == q.Key) {
			return b.ID, true, nil
		}
	}
	if err := pager.Err(); err != nil {
		return "", false, o.wrap("find "+q.Key, err)
	}
	return "", false, nil
}

// Poll retrieves the batch.
func (o *OpenAI) Poll(ctx context.Context, id string) (Status, error) {
	b, err := o.client.Batches.Get(ctx, id)
	if err != nil {
		return Status{}, o.wrap("poll "+id, err)
	}
	return openAIStatus(b), nil
}

// Cancel cancels the batch; an ended batch is answered with its status.
func (o *OpenAI) Cancel(ctx context.Context, id string) (Status, error) {
	b, err := o.client.Batches.Cancel(ctx, id)
	var apiErr *openai.Error
	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict {
		return o.Poll(ctx, id)
	}
	if err != nil {
		return Status{}, o.wrap("cancel "+id, err)
	}
	return openAIStatus(b), nil
}

func openAIStatus(b *openai.Batch) Status {
	st := Status{ID: b.ID, Counts: Counts{Total: int(b.RequestCounts.Total),
		Succeeded: int(b.RequestCounts.Completed), Errored: int(b.RequestCounts.Failed)}}
	st.Counts.Processing = max(0, st.Counts.Total-st.Counts.Succeeded-st.Counts.Errored)
	switch b.Status {
	case openai.BatchStatusValidating:
		st.Phase = PhaseValidating
	case openai.BatchStatusInProgress:
		st.Phase = PhaseInProgress
	case openai.BatchStatusFinalizing:
		st.Phase = PhaseFinalizing
	case openai.BatchStatusCancelling:
		st.Phase = PhaseCanceling
	case openai.BatchStatusCompleted:
		st.Phase, st.End = PhaseEnded, EndCompleted
	case openai.BatchStatusExpired:
		st.Phase, st.End = PhaseEnded, EndExpired
	case openai.BatchStatusCancelled:
		st.Phase, st.End = PhaseEnded, EndCancelled
	case openai.BatchStatusFailed:
		st.Phase, st.End = PhaseEnded, EndFailed
	default:
		st.Phase = PhaseInProgress // an unknown status is treated as still running
	}
	if st.Ended() {
		st.Counts.Processing = 0
	}
	for _, e := range b.Errors.Data {
		code := e.Code
		if e.Line > 0 {
			code = fmt.Sprintf("%s@%d", e.Code, e.Line)
		}
		st.Errors = append(st.Errors, code)
	}
	return st
}

// Collect downloads the output and error files of an ended batch.
func (o *OpenAI) Collect(ctx context.Context, id string) ([]Result, error) {
	b, err := o.client.Batches.Get(ctx, id)
	if err != nil {
		return nil, o.wrap("collect "+id, err)
	}
	if st := openAIStatus(b); !st.Ended() {
		return nil, fmt.Errorf("openai collect %s: batch is %s, not ended", id, b.Status)
	}
	var out []Result
	for _, fileID := range []string{b.OutputFileID, b.ErrorFileID} {
		if fileID == "" {
			continue
		}
		rs, err := o.download(ctx, fileID)
		if err != nil {
			return nil, fmt.Errorf("openai collect %s: %w", id, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// resultLine is one line of an output or error file.
type resultLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code string `json:"code"`
	} `json:"error"`
}

func (o *OpenAI) download(ctx context.Context, fileID string) ([]Result, error) {
	resp, err := o.client.Files.Content(ctx, fileID, option.WithRequestTimeout(10*o.cfg.Timeout))
	if err != nil {
		return nil, o.wrap("download "+fileID, err)
	}
	defer resp.Body.Close()
	out, err := decodeResults(ctx, resp.Body)
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", fileID, err)
	}
	return out, nil
}

// decodeResults reads the lines of an output or error file.
func decodeResults(ctx context.Context, r io.Reader) ([]Result, error) {
	var out []Result
	dec := json.NewDecoder(r)
	for {
		yieldEvery(ctx, len(out)) // a piece of lines at a time, as jsonl
		var l resultLine
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("line %d: %w", len(out)+1, err)
		}
		out = append(out, openAIResult(l))
	}
}

// openAICompletion is a 200 line's body: the fields of the SDK's
// openai.ChatCompletion that openAIResult reads, and no others
// (TestOpenAIResultMatchesTheSDK decodes the same lines both ways). Not
// the SDK's type: its decoder (apijson, over gjson) kept every field of
// the completion with its raw JSON and metadata, 84 MB of a 10,000-file
// sweep's run and 0.24 s of its CPU (docs/benchmarks.md, "Session 39
// (s39h1)"), for three fields.
//
// On well-typed bodies the two agree. On mistyped ones they differ: the
// SDK coerced (a numeric content became its digits), encoding/json
// refuses, so a choice whose message or content is not an object or a
// string is "unreadable_response" here. A mistyped usage only loses the
// counts (openAIUsage), never the answer.
type openAICompletion struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage openAIUsage `json:"usage"`
}

// openAIUsage is a completion's token usage.
type openAIUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// UnmarshalJSON decodes the usage, or leaves it zero when it is not the
// object it should be: the counts are a report, and a malformed one must
// not turn an answer into an error.
func (u *openAIUsage) UnmarshalJSON(b []byte) error {
	type plain openAIUsage // without this method
	decodeOrZero(b, (*plain)(u))
	return nil
}

// decodeOrZero decodes b into *dst, or leaves *dst as it was when b is
// not of dst's type: a usage report's decode, whose failure must not
// fail the answer beside it.
func decodeOrZero[T any](b []byte, dst *T) {
	var v T
	if json.Unmarshal(b, &v) == nil {
		*dst = v
	}
}

// openAIResult is the result of one line of an output or error file.
func openAIResult(l resultLine) Result {
	r := Result{CustomID: l.CustomID}
	switch {
	case l.Error != nil && l.Error.Code == "batch_expired":
		r.Kind = KindExpired
	case l.Error != nil && l.Error.Code == "batch_cancelled":
		r.Kind = KindCanceled
	case l.Error != nil:
		r.Kind, r.ErrorType, r.Retryable = KindErrored, l.Error.Code, true // e.g. request_timeout
	case l.Response == nil:
		r.Kind, r.ErrorType, r.Retryable = KindErrored, "no_response", true
	case l.Response.StatusCode == http.StatusOK:
		var c openAICompletion
		if err := json.Unmarshal(l.Response.Body, &c); err != nil || len(c.Choices) == 0 {
			r.Kind, r.ErrorType, r.Retryable = KindErrored, "unreadable_response", true
			return r
		}
		r.Kind, r.Body = KindSucceeded, []byte(c.Choices[0].Message.Content)
		r.InputTokens, r.OutputTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
	default:
		var e struct {
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
		}
		_ = json.Unmarshal(l.Response.Body, &e) // the type is informative only
		r.Kind, r.Status, r.ErrorType = KindErrored, l.Response.StatusCode, e.Error.Type
		r.Retryable = l.Response.StatusCode == http.StatusTooManyRequests || l.Response.StatusCode >= 500
	}
	return r
}

// wrap turns a 429 (or 503 with Retry-After) into a RateLimitedError.
func (o *OpenAI) wrap(op string, err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) && apiErr.Response != nil && congested(apiErr.StatusCode, apiErr.Response.Header) {
		info := ratelimit.Parse(apiErr.Response.Header, o.cfg.Now())
		return fmt.Errorf("openai %s: %w", op, &RateLimitedError{Status: apiErr.StatusCode,
			RetryAfter: info.RetryAfter, HasRetryAfter: info.HasRetryAfter})
	}
	return fmt.Errorf("openai %s: %w", op, err)
}
