package batchsim

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// Provider names as they appear in [FaultRequest] and [Stats].
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

// Limits are the per-batch limits the simulator enforces. The zero value
// of a field means the provider's documented limit ([DefaultLimits]).
type Limits struct {
	// OpenAIMaxRequests is the most lines an OpenAI batch input file may
	// hold: 50,000.
	OpenAIMaxRequests int
	// OpenAIMaxInputBytes is the largest OpenAI batch input file: 200 MB.
	OpenAIMaxInputBytes int64
	// OpenAIMaxUploadBytes is the largest file POST /v1/files accepts: 512 MB.
	OpenAIMaxUploadBytes int64
	// AnthropicMaxRequests is the most requests in one Message Batch: 100,000.
	AnthropicMaxRequests int
	// AnthropicMaxBytes is the largest Message Batch create body: 256 MB.
	AnthropicMaxBytes int64
}

// DefaultLimits are the providers' documented limits (OpenAI Batch API
// guide and openai-go BatchNewParams.InputFileID; Anthropic Message
// Batches guide).
var DefaultLimits = Limits{
	OpenAIMaxRequests:    50_000,
	OpenAIMaxInputBytes:  200 << 20,
	OpenAIMaxUploadBytes: 512 << 20,
	AnthropicMaxRequests: 100_000,
	AnthropicMaxBytes:    256 << 20,
}

// WithDefaults fills zero fields from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	l.OpenAIMaxRequests = cmp.Or(l.OpenAIMaxRequests, d.OpenAIMaxRequests)
	l.OpenAIMaxInputBytes = cmp.Or(l.OpenAIMaxInputBytes, d.OpenAIMaxInputBytes)
	l.OpenAIMaxUploadBytes = cmp.Or(l.OpenAIMaxUploadBytes, d.OpenAIMaxUploadBytes)
	l.AnthropicMaxRequests = cmp.Or(l.AnthropicMaxRequests, d.AnthropicMaxRequests)
	l.AnthropicMaxBytes = cmp.Or(l.AnthropicMaxBytes, d.AnthropicMaxBytes)
	return l
}

// Fault is what the simulator does with one request of a batch.
type Fault int

const (
	// FaultNone answers the request successfully.
	FaultNone Fault = iota
	// FaultServerError fails the request with a retryable server error:
	// OpenAI status_code 500 in the error file, Anthropic an errored
	// result of type api_error.
	FaultServerError
	// FaultInvalid fails the request permanently: OpenAI status_code 400
	// (invalid_request_error), Anthropic an errored invalid_request_error.
	FaultInvalid
	// FaultExpire never processes the request, so its batch runs to the
	// end of its window and the request expires (OpenAI batch_expired in
	// the error file and the batch "expired"; Anthropic an expired result).
	FaultExpire
	// FaultDrop processes nothing and leaves the request out of every
	// results file: a provider that loses a line. Real providers should
	// never do this; it exists to prove a client accounts for every item.
	FaultDrop
	// FaultBadOutput answers the request successfully with [BadOutput],
	// text that matches no structured-output schema: a model that ignored
	// its format, which the client's validation must catch.
	FaultBadOutput
)

// FaultRequest identifies one request for Config.Fault.
type FaultRequest struct {
	// Provider is ProviderOpenAI or ProviderAnthropic.
	Provider string
	// CustomID is the request's custom_id.
	CustomID string
	// Attempt counts the batches, this one included, in which the
	// simulator has seen CustomID for this provider: 1 on first submission.
	Attempt int
}

// Config configures a [Server]. The zero value is valid.
type Config struct {
	// Addr is the listen address; default "127.0.0.1:0" (a free port).
	Addr string
	// Now is the server's clock; default time.Now. Tests pass a [Clock].
	Now func() time.Time
	// APIKey, when set, is the key every request must carry (OpenAI
	// "Authorization: Bearer", Anthropic "x-api-key"); otherwise any
	// non-empty key is accepted.
	APIKey string

	// ValidateFor is how long an OpenAI batch stays validating; default 1 min.
	ValidateFor time.Duration
	// ProcessFor is how long processing all of a batch's requests takes;
	// default 10 min. Requests finish one by one, evenly spread over it.
	ProcessFor time.Duration
	// FinalizeFor is how long an OpenAI batch stays finalizing; default 1 min.
	FinalizeFor time.Duration
	// CancelFor is how long a batch stays cancelling (OpenAI) or
	// canceling (Anthropic) before it ends; default 1 min.
	CancelFor time.Duration
	// Window is the completion window; default 24 h, the only window
	// either provider offers.
	Window time.Duration
	// Retention is how long after creation an Anthropic batch's results
	// can be downloaded; default 29 days.
	Retention time.Duration

	// Limits are the enforced limits; zero fields are the providers'.
	Limits Limits
	// Responder returns the answer text of a successful request; default
	// [SchemaResponder] (an instance of the request's schema, else
	// upstream.DefaultResponder). It must be deterministic if a test
	// compares downloads (the simulator builds each results file once).
	Responder upstream.Responder
	// Fault chooses what happens to each request; default FaultNone for all.
	Fault func(FaultRequest) Fault
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	c.Addr = cmp.Or(c.Addr, "127.0.0.1:0")
	if c.Now == nil {
		c.Now = time.Now
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ValidateFor, time.Minute)
	def(&c.ProcessFor, 10*time.Minute)
	def(&c.FinalizeFor, time.Minute)
	def(&c.CancelFor, time.Minute)
	def(&c.Window, 24*time.Hour)
	def(&c.Retention, 29*24*time.Hour)
	c.Limits = c.Limits.WithDefaults()
	if c.Responder == nil {
		c.Responder = SchemaResponder
	}
	if c.Fault == nil {
		c.Fault = func(FaultRequest) Fault { return FaultNone }
	}
	return c
}

func (c Config) validate() error {
	for name, d := range map[string]time.Duration{"ValidateFor": c.ValidateFor, "ProcessFor": c.ProcessFor,
		"FinalizeFor": c.FinalizeFor, "CancelFor": c.CancelFor, "Window": c.Window, "Retention": c.Retention} {
		if d < 0 {
			return fmt.Errorf("%s: must not be negative, got %s", name, d)
		}
	}
	l := c.Limits
	if l.OpenAIMaxRequests < 0 || l.AnthropicMaxRequests < 0 || l.OpenAIMaxInputBytes < 0 ||
		l.OpenAIMaxUploadBytes < 0 || l.AnthropicMaxBytes < 0 {
		return errors.New("Limits: must not be negative")
	}
	return nil
}
