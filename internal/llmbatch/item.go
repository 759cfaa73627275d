package llmbatch

import (
	"errors"
	"fmt"
	"regexp"
)

// Request is one provider-neutral LLM request: a system prompt and one user
// message, as ratelane's reviews and extraction items send.
type Request struct {
	// Model is the provider's model name.
	Model string `json:"model"`
	// System is the system prompt; may be empty.
	System string `json:"system,omitempty"`
	// Prompt is the user message.
	Prompt string `json:"prompt"`
	// MaxTokens caps the answer; required (Anthropic requires it in a batch).
	MaxTokens int64 `json:"max_tokens"`
	// Format, when set, asks for structured output: the answer is one JSON
	// value matching Format.Schema. Each provider sends it in its own
	// batch wire format (OpenAI: the body's response_format of type
	// json_schema, strict; Anthropic: the params' output_config.format).
	// Nil asks for free text. The answer is still validated by the caller:
	// a provider that ignores the format must not make a bad answer pass.
	Format *Format `json:"format,omitempty"`
}

// Format is a structured-output request: a named JSON Schema the answer
// must match. The schema should be in the strict subset both providers
// accept (every object closed with additionalProperties false and every
// property required), as finding.StrictSchema is; the simulator refuses a
// request whose schema is not, as OpenAI's strict mode does.
type Format struct {
	// Name names the schema (OpenAI's json_schema.name); it must match
	// ^[a-zA-Z0-9_-]{1,64}$.
	Name string `json:"name"`
	// Schema is the JSON Schema object. It is only read (encoded), so one
	// map may be shared by concurrent requests; it must not change once
	// its Format is in a request (a provider may keep the Format's
	// encoding: OpenAI keeps the last one's).
	Schema map[string]any `json:"schema"`
}

// Item is one request of a manifest, named by a custom_id unique in the
// manifest. The custom_id is what joins a result back to its item.
type Item struct {
	CustomID string  `json:"custom_id"`
	Request  Request `json:"request"`
}

// customIDPattern is the stricter of the two providers' rules (Anthropic
// documents ^[a-zA-Z0-9_-]{1,64}$; OpenAI asks only for uniqueness), so an
// item can move between providers unchanged.
var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ErrInvalidManifest is wrapped by the errors of [ValidateItems].
var ErrInvalidManifest = errors.New("invalid manifest")

// ValidateItems checks that every custom_id matches ^[a-zA-Z0-9_-]{1,64}$
// and is unique, that every request names a model, a prompt and a
// positive MaxTokens, and that a Format has a valid name and a schema.
// The error names the first bad item by index.
func ValidateItems(items []Item) error {
	if len(items) == 0 {
		return fmt.Errorf("%w: no items", ErrInvalidManifest)
	}
	seen := make(map[string]int, len(items))
	for i, it := range items {
		switch {
		case !customIDPattern.MatchString(it.CustomID):
			return fmt.Errorf("%w: items[%d].custom_id %q: must match ^[a-zA-Z0-9_-]{1,64}$", ErrInvalidManifest, i, it.CustomID)
		case seen[it.CustomID] > 0:
			return fmt.Errorf("%w: items[%d].custom_id %q repeats items[%d]", ErrInvalidManifest, i, it.CustomID, seen[it.CustomID]-1)
		case it.Request.Model == "":
			return fmt.Errorf("%w: items[%d].request.model: required", ErrInvalidManifest, i)
		case it.Request.Prompt == "":
			return fmt.Errorf("%w: items[%d].request.prompt: required", ErrInvalidManifest, i)
		case it.Request.MaxTokens < 1:
			return fmt.Errorf("%w: items[%d].request.max_tokens: must be at least 1, got %d", ErrInvalidManifest, i, it.Request.MaxTokens)
		case it.Request.Format != nil && !customIDPattern.MatchString(it.Request.Format.Name):
			return fmt.Errorf("%w: items[%d].request.format.name %q: must match ^[a-zA-Z0-9_-]{1,64}$", ErrInvalidManifest, i, it.Request.Format.Name)
		case it.Request.Format != nil && len(it.Request.Format.Schema) == 0:
			return fmt.Errorf("%w: items[%d].request.format.schema: required", ErrInvalidManifest, i)
		}
		seen[it.CustomID] = i + 1
	}
	return nil
}

// Limits bound one provider batch.
type Limits struct {
	// MaxRequests is the most items in one batch.
	MaxRequests int
	// MaxBytes is the largest submission: the JSONL input file (OpenAI)
	// or the create body (Anthropic).
	MaxBytes int64
	// FixedBytes is what a submission costs besides its items (the
	// envelope of Anthropic's {"requests":[...]}); SepBytes is what each
	// item costs besides its encoding (a newline, a comma).
	FixedBytes, SepBytes int64
	// QueueRequests and QueueTokens bound the account's work in the
	// provider's batch processing queue at once, across batches: requests
	// (Anthropic's "batch requests in processing queue") and enqueued
	// tokens (OpenAI's per-model batch queue limit). They depend on the
	// account's tier; zero is no known bound. Split does not read them;
	// the batch lane's intake prediction does.
	QueueRequests, QueueTokens int64
}

// OpenAILimits are OpenAI's Batch API limits: 50,000 requests and 200 MB
// per input file. Its queue limit is in enqueued tokens per model and
// tier, so none is assumed.
var OpenAILimits = Limits{MaxRequests: 50_000, MaxBytes: 200 << 20, SepBytes: 1}

// AnthropicLimits are Anthropic's Message Batches limits: 100,000 requests
// or 256 MB per batch, whichever comes first, and (at the first usage
// tier) 100,000 requests in the processing queue.
var AnthropicLimits = Limits{MaxRequests: 100_000, MaxBytes: 256 << 20, FixedBytes: int64(len(`{"requests":[]}`)), SepBytes: 1,
	QueueRequests: 100_000}

// Rejected is an item refused before submission, with the reason.
type Rejected struct {
	CustomID string
	Reason   string
}

// Split cuts items, in order, into consecutive chunks that each fit lim,
// using size(item) as the item's encoded size in bytes (a Provider's
// EncodedSize). An item that alone exceeds lim.MaxBytes is rejected with
// reason "item_too_large" and the others still go out. Split does not
// validate custom_ids; call [ValidateItems] first.
func Split(items []Item, lim Limits, size func(Item) (int64, error)) ([][]Item, []Rejected, error) {
	if lim.MaxRequests < 1 || lim.MaxBytes < 1 {
		return nil, nil, errors.New("split: limits must be positive")
	}
	var chunks [][]Item
	var rejected []Rejected
	var cur []Item
	var bytes int64
	for _, it := range items {
		n, err := size(it)
		if err != nil {
			return nil, nil, fmt.Errorf("split: encode %s: %w", it.CustomID, err)
		}
		n += lim.SepBytes
		if lim.FixedBytes+n > lim.MaxBytes {
			rejected = append(rejected, Rejected{CustomID: it.CustomID, Reason: "item_too_large"})
			continue
		}
		if len(cur) > 0 && (len(cur) == lim.MaxRequests || lim.FixedBytes+bytes+n > lim.MaxBytes) {
			chunks = append(chunks, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, it)
		bytes += n
	}
	if len(cur) > 0 {
		chunks = append(chunks, cur)
	}
	return chunks, rejected, nil
}
