package llmbatch

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"
)

// Provider is one provider's batch API. Each method is one network call
// (Collect and Find may page); none retries. Methods are safe for
// concurrent use. Errors from a 429 are [*RateLimitedError].
type Provider interface {
	// Name is "openai" or "anthropic".
	Name() string
	// Limits are the provider's per-batch limits.
	Limits() Limits
	// EncodedSize is the bytes item adds to a submission (its JSONL
	// line, or its element of requests[]), for [Split].
	EncodedSize(item Item) (int64, error)
	// NeedsUpload reports whether items go up as a file first (OpenAI).
	NeedsUpload() bool
	// Upload stores items as a batch input file and returns its id. A
	// provider without files returns ("", nil).
	Upload(ctx context.Context, key string, items []Item) (fileID string, err error)
	// Create starts a provider batch for the chunk key over items (or
	// the uploaded fileID) and returns the provider's batch id.
	Create(ctx context.Context, key, fileID string, items []Item) (batchID string, err error)
	// Find looks for a batch a Create may have started before a crash
	// left its id unrecorded; ok is false when there is none.
	Find(ctx context.Context, q FindQuery) (batchID string, ok bool, err error)
	// Poll returns the batch's status and counts.
	Poll(ctx context.Context, batchID string) (Status, error)
	// Collect downloads every result of an ended batch. It is idempotent:
	// calling it again returns the same results.
	Collect(ctx context.Context, batchID string) ([]Result, error)
	// Cancel asks the provider to cancel the batch and returns its
	// status; cancelling an ended batch is not an error.
	Cancel(ctx context.Context, batchID string) (Status, error)
}

// FindQuery describes the batch a lost Create would have made.
type FindQuery struct {
	// Key is the chunk key (sent as metadata where the provider has it).
	Key string
	// FileID is the uploaded input file, when the provider uses files.
	FileID string
	// Count is the number of items.
	Count int
	// Since is when the Create was first attempted; batches created
	// before it (less a minute of clock skew) are not candidates.
	Since time.Time
}

// Phase is a provider batch's progress, in neutral terms.
type Phase string

const (
	// PhaseValidating: OpenAI is checking the input file.
	PhaseValidating Phase = "validating"
	// PhaseInProgress: requests are being processed.
	PhaseInProgress Phase = "in_progress"
	// PhaseFinalizing: OpenAI is writing the results files.
	PhaseFinalizing Phase = "finalizing"
	// PhaseCanceling: a cancel was accepted and is taking effect.
	PhaseCanceling Phase = "canceling"
	// PhaseEnded: the batch is over; its results can be collected.
	PhaseEnded Phase = "ended"
)

// End says how an ended batch ended.
type End string

const (
	// EndCompleted: every request was processed (each may still have
	// failed on its own).
	EndCompleted End = "completed"
	// EndExpired: the 24 h window closed first; unprocessed requests expired.
	EndExpired End = "expired"
	// EndCancelled: cancelled; unprocessed requests were canceled.
	EndCancelled End = "cancelled"
	// EndFailed: OpenAI refused the whole input file (Status.Errors says why).
	EndFailed End = "failed"
)

// Counts are a batch's request counts. Which fields a provider fills
// while the batch runs differs: OpenAI counts completed and failed as it
// goes; Anthropic keeps everything in Processing until the batch ends.
type Counts struct {
	Total      int `json:"total"`
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Errored    int `json:"errored"`
	Expired    int `json:"expired"`
	Canceled   int `json:"canceled"`
}

// Status is what Poll learns.
type Status struct {
	// ID is the provider's batch id.
	ID string `json:"id"`
	// Phase is the batch's progress.
	Phase Phase `json:"phase"`
	// End is set once Phase is PhaseEnded.
	End End `json:"end,omitempty"`
	// Counts are the provider's request counts.
	Counts Counts `json:"counts"`
	// Errors are batch-level error codes (OpenAI errors.data, "code@line"),
	// never content.
	Errors []string `json:"errors,omitempty"`
}

// Ended reports whether the batch's results can be collected.
func (s Status) Ended() bool { return s.Phase == PhaseEnded }

// Kind is what happened to one request.
type Kind string

const (
	// KindSucceeded: the request was answered; Result.Body holds the text.
	KindSucceeded Kind = "succeeded"
	// KindErrored: the request failed; Result.Retryable says whether a
	// resubmission may succeed.
	KindErrored Kind = "errored"
	// KindExpired: the window closed before the request ran.
	KindExpired Kind = "expired"
	// KindCanceled: the batch was cancelled before the request ran.
	KindCanceled Kind = "canceled"
)

// Result is one request's result, joined on CustomID.
type Result struct {
	CustomID string `json:"custom_id"`
	Kind     Kind   `json:"kind"`
	// Body is the answer text of a succeeded request. It is model output:
	// never log it.
	Body []byte `json:"body,omitempty"`
	// InputTokens and OutputTokens are the provider's usage report.
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	// Status is the HTTP status of an errored OpenAI request (0 for Anthropic).
	Status int `json:"status,omitempty"`
	// ErrorType is the provider's error type or code (e.g. "api_error",
	// "invalid_request_error", "server_error").
	ErrorType string `json:"error_type,omitempty"`
	// Retryable reports whether an errored request may succeed if resubmitted.
	Retryable bool `json:"retryable,omitempty"`
}

// RateLimitedError is a provider's 429 (or 503 with Retry-After) on a
// call: nothing was created, and the call may be repeated after RetryAfter.
type RateLimitedError struct {
	// Status is the HTTP status.
	Status int
	// RetryAfter is the server's delay, or 0 when it gave none.
	RetryAfter time.Duration
	// HasRetryAfter reports whether the server gave a delay.
	HasRetryAfter bool
}

func (e *RateLimitedError) Error() string {
	if e.HasRetryAfter {
		return fmt.Sprintf("rate limited (HTTP %d), retry after %s", e.Status, e.RetryAfter)
	}
	return fmt.Sprintf("rate limited (HTTP %d)", e.Status)
}

// congested reports whether status is a congestion answer.
func congested(status int, h http.Header) bool {
	return status == http.StatusTooManyRequests ||
		(status == http.StatusServiceUnavailable && h.Get("Retry-After") != "")
}

// Config is what both providers' clients need.
type Config struct {
	// BaseURL is the API base: for OpenAI ending in "/v1/", for
	// Anthropic the host root ("https://api.anthropic.com/"). Empty
	// means the SDK's default (the real provider).
	BaseURL string
	// APIKey is the key; it is sent to BaseURL only and never logged.
	APIKey string
	// HTTPClient is the client to use; default http.DefaultClient.
	HTTPClient *http.Client
	// Timeout bounds one call; default 60 s (downloads of large results
	// files need more: Collect is given ten times this).
	Timeout time.Duration
	// Limits overrides the provider's limits (zero fields keep them), for
	// tests and for accounts with lower limits.
	Limits Limits
	// Now is the clock used to read Retry-After dates; default time.Now.
	Now func() time.Time
}

// withDefaults fills c's zero fields; def are the provider's limits.
func (c Config) withDefaults(def Limits) Config {
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	c.Timeout = cmp.Or(c.Timeout, 60*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Limits.MaxRequests = cmp.Or(c.Limits.MaxRequests, def.MaxRequests)
	c.Limits.MaxBytes = cmp.Or(c.Limits.MaxBytes, def.MaxBytes)
	c.Limits.QueueRequests = cmp.Or(c.Limits.QueueRequests, def.QueueRequests)
	c.Limits.QueueTokens = cmp.Or(c.Limits.QueueTokens, def.QueueTokens)
	c.Limits.FixedBytes, c.Limits.SepBytes = def.FixedBytes, def.SepBytes
	return c
}
