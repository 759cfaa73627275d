// Package provider puts every reviewer ratelane can call behind one adapter:
// the OpenAI API (official openai-go SDK, strict structured output), the
// Anthropic API (official anthropic-sdk-go, JSON-schema output), any
// OpenAI-compatible endpoint, and the offline rules reviewer.
//
// A Provider is constructed for exactly one region (Profile.Region) and says
// so through Region, so that ratelane refuses at start-up to wire it to
// another region's lane. The SDKs' own retries are switched off: a 429 is a
// scheduling decision for the queue, not a reason for the client to try
// again. Every failure is returned as an *Error carrying the job.Outcome the
// engine should apply (see Classify), with no prompt, diff or model output
// in it.
package provider

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/diff"
)

// Kinds of provider a Profile may name.
const (
	KindRules            = "rules"
	KindOpenAI           = "openai"
	KindOpenAICompatible = "openai-compatible"
	KindAnthropic        = "anthropic"
)

// Depth is how much of a diff a reviewer is shown.
type Depth string

// Depths.
const (
	// DepthFull shows hunks with their context lines.
	DepthFull Depth = "full"
	// DepthFast shows the added lines only, with a compact prompt that asks
	// for the few most important findings.
	DepthFast Depth = "fast"
)

// DefaultMaxOutputTokens is the output cap of a request when the profile
// sets none; it is also part of a part's estimated cost.
const DefaultMaxOutputTokens = 2048

// DefaultQuotaPause is how long a key pauses when the provider says the
// account's quota or credit is spent: retrying sooner cannot help.
const DefaultQuotaPause = time.Hour

// Profile configures one provider for one region. It holds no content.
type Profile struct {
	// Name identifies the profile in review requests, e.g. "eu-openai".
	Name string `json:"name"`
	// Kind is rules, openai, openai-compatible or anthropic.
	Kind string `json:"kind"`
	// Region is the only region whose reviews this provider may see.
	Region string `json:"region"`
	// Model is the model name (not used by rules).
	Model string `json:"model,omitempty"`
	// BaseURL overrides the API base: for openai and openai-compatible it
	// ends in /v1 (e.g. "https://eu.api.openai.com/v1"); for anthropic it is
	// the host root. Required for openai-compatible.
	BaseURL string `json:"base_url,omitempty"`
	// APIKey authenticates to the provider. It is never logged.
	APIKey string `json:"-"`
	// MaxOutputTokens caps each answer; default DefaultMaxOutputTokens.
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// RequestsKey is the limit key counting requests (RPM); default
	// "<kind>:<model>" ("rules:local" for rules).
	RequestsKey string `json:"requests_key,omitempty"`
	// TokensKey, when set, is a limit key counting tokens (TPM): parts then
	// cost their estimated tokens on it, reconciled with reported usage.
	// Default "<kind>:<model>:tokens" when TokensPerMinute is set.
	TokensKey string `json:"tokens_key,omitempty"`
	// RequestsPerMinute, when set, is the request limit the provider
	// declares for the account (RPM): binding the provider to its region
	// configures RequestsKey to pace it (a window of that many starts per
	// minute, see admission.UpstreamWindow), counting starts whatever a
	// part's cost (PerStart), so parts may name it next to TokensKey. Zero
	// leaves the key as it is configured elsewhere (the limits config,
	// PUT /v1/limits).
	RequestsPerMinute float64 `json:"rpm,omitempty"`
	// TokensPerMinute, when set, is the token limit the provider declares
	// (TPM): binding configures TokensKey to pace it, and parts cost their
	// estimated tokens on it, reconciled from the usage each answer
	// reports.
	TokensPerMinute float64 `json:"tpm,omitempty"`
	// QuotaPause is how long the keys pause after a spent-quota answer;
	// default DefaultQuotaPause.
	QuotaPause time.Duration `json:"quota_pause,omitempty"`
	// Timeout bounds one request; default 2 minutes.
	Timeout time.Duration `json:"timeout,omitempty"`
	// HTTPClient is the client the SDKs use; default a new http.Client.
	HTTPClient *http.Client `json:"-"`
	// BatchQueueRequests and BatchQueueTokens are the account's batch
	// queue limits at the provider: how many requests (Anthropic) or
	// enqueued tokens (OpenAI, per model) its batch API holds at once.
	// The batch lane's intake predicts from them how many provider-batch
	// rounds a manifest and the work ahead of it take. Zero keeps the
	// provider's default (llmbatch.AnthropicLimits: 100,000 requests, the
	// first tier; none known for OpenAI).
	BatchQueueRequests int64 `json:"batch_queue_requests,omitempty"`
	BatchQueueTokens   int64 `json:"batch_queue_tokens,omitempty"`
}

// String describes the profile without its key, so that printing one
// (%v, %+v, %s) by mistake cannot leak it.
func (p Profile) String() string {
	key := "unset"
	if p.APIKey != "" {
		key = "set"
	}
	return fmt.Sprintf("provider profile %q (kind %s, region %s, model %q, api key %s)", p.Name, p.Kind, p.Region, p.Model, key)
}

// GoString is String for %#v.
func (p Profile) GoString() string { return p.String() }

// LogValue is what log/slog records for a profile: never the key.
func (p Profile) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", p.Name), slog.String("kind", p.Kind), slog.String("region", p.Region),
		slog.String("model", p.Model))
}

// WithDefaults returns p with zero fields set to their defaults.
func (p Profile) WithDefaults() Profile {
	p.MaxOutputTokens = cmp.Or(p.MaxOutputTokens, DefaultMaxOutputTokens)
	if p.RequestsKey == "" {
		model := p.Model
		if p.Kind == KindRules || model == "" {
			model = "local"
		}
		p.RequestsKey = p.Kind + ":" + model
	}
	if p.TokensKey == "" && p.TokensPerMinute > 0 {
		p.TokensKey = p.RequestsKey + ":tokens"
	}
	p.QuotaPause = cmp.Or(p.QuotaPause, DefaultQuotaPause)
	p.Timeout = cmp.Or(p.Timeout, 2*time.Minute)
	if p.HTTPClient == nil {
		p.HTTPClient = &http.Client{}
	}
	return p
}

// Validate reports a profile that cannot work, naming the field.
func (p Profile) Validate() error {
	switch {
	case p.Name == "":
		return errors.New("provider profile: name is required")
	case p.Region == "":
		return fmt.Errorf("provider profile %q: region is required: a provider belongs to one region", p.Name)
	case p.Kind != KindRules && p.Kind != KindOpenAI && p.Kind != KindOpenAICompatible && p.Kind != KindAnthropic:
		return fmt.Errorf("provider profile %q: kind must be rules, openai, openai-compatible or anthropic, not %q", p.Name, p.Kind)
	case p.Kind != KindRules && p.Model == "":
		return fmt.Errorf("provider profile %q: model is required for kind %s", p.Name, p.Kind)
	case p.Kind == KindOpenAICompatible && p.BaseURL == "":
		return fmt.Errorf("provider profile %q: base_url is required for kind openai-compatible", p.Name)
	case p.MaxOutputTokens < 0 || p.MaxOutputTokens > 128000:
		return fmt.Errorf("provider profile %q: max_output_tokens must be between 0 (default) and 128000", p.Name)
	case p.Timeout < 0 || p.Timeout > time.Hour:
		return fmt.Errorf("provider profile %q: timeout must be between 0 (default 2m) and 1h, got %v", p.Name, p.Timeout)
	case p.QuotaPause < 0 || p.QuotaPause > 7*24*time.Hour:
		return fmt.Errorf("provider profile %q: quota_pause must be between 0 (default 1h) and 168h, got %v", p.Name, p.QuotaPause)
	case p.BatchQueueRequests < 0 || p.BatchQueueTokens < 0:
		return fmt.Errorf("provider profile %q: batch_queue_requests and batch_queue_tokens must not be negative (0: the provider's default)", p.Name)
	}
	for _, l := range []struct {
		field string
		v     float64
	}{{"rpm", p.RequestsPerMinute}, {"tpm", p.TokensPerMinute}} {
		if math.IsNaN(l.v) || l.v < 0 || l.v > 1e9 {
			return fmt.Errorf("provider profile %q: %s must be between 0 (not configured here) and 1e9, got %v", p.Name, l.field, l.v)
		}
	}
	if p.TokensKey != "" && p.TokensKey == p.RequestsKey {
		return fmt.Errorf("provider profile %q: tokens_key and requests_key must differ: one counts tokens, the other requests", p.Name)
	}
	if p.BaseURL != "" {
		if err := checkBaseURL(p.BaseURL); err != nil {
			return fmt.Errorf("provider profile %q: base_url: %w", p.Name, err)
		}
	}
	return nil
}

// checkBaseURL refuses a base URL the SDKs would misuse: it must be an
// absolute http or https URL with a host, and carry no credentials, query
// or fragment (a key belongs in the key setting, where it is never shown).
// The error never quotes the URL: a mistyped one may hold a password.
func checkBaseURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must start with http:// or https://")
	case u.Host == "":
		return errors.New("has no host")
	case u.User != nil:
		return errors.New("must not carry credentials (user:password@); give the key as an API key")
	case u.RawQuery != "" || u.Fragment != "":
		return errors.New("must have no query or fragment")
	}
	return nil
}

// LimitKeys returns the keys a part reviewed by this profile names: the
// requests key alone (cost 1), or the tokens key (cost: the estimated
// tokens), with the requests key too when the profile declares its RPM;
// that key is then configured per start (admission.Config.PerStart), so a
// part takes one request from it and its tokens from the other.
func (p Profile) LimitKeys() []string {
	switch {
	case p.TokensKey != "" && p.RequestsPerMinute > 0:
		return []string{p.TokensKey, p.RequestsKey}
	case p.TokensKey != "":
		return []string{p.TokensKey}
	}
	return []string{p.RequestsKey}
}

// Request is one review call: a part of a diff at a depth.
type Request struct {
	// Part is the part of the diff to review (parsed from the part text).
	Part *diff.Diff
	// Depth selects the prompt; empty means DepthFull.
	Depth Depth
}

// Usage is what a provider reported a call used.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Total returns input plus output tokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// Add returns u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.InputTokens + v.InputTokens, u.OutputTokens + v.OutputTokens}
}

// Response is a successful call: the model's raw output (to be checked
// with finding.ValidateOutput; never logged), what it used, and what the
// provider's headers said about the remaining quota.
type Response struct {
	Output []byte
	Usage  Usage
	Hints  []job.Hint
}

// Provider is a reviewer bound to one region. Implementations are safe for
// concurrent use.
type Provider interface {
	// Region is the region this provider may serve.
	Region() string
	// Profile returns the provider's configuration (with defaults).
	Profile() Profile
	// Review makes one call. Errors are *Error values (see OutcomeOf).
	Review(ctx context.Context, req Request) (Response, error)
}

// New returns the provider a profile describes.
func New(p Profile) (Provider, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.WithDefaults()
	switch p.Kind {
	case KindRules:
		return &Rules{profile: p}, nil
	case KindAnthropic:
		return newAnthropic(p), nil
	default:
		return newOpenAI(p), nil
	}
}

// Error is a failed call, classified. Its message is short and holds no
// content; Outcome is what the engine should do about it.
type Error struct {
	Outcome job.Outcome
}

func (e *Error) Error() string {
	if e.Outcome.Status != 0 {
		return fmt.Sprintf("provider: %s (HTTP %d): %s", e.Outcome.Class, e.Outcome.Status, e.Outcome.Err)
	}
	return fmt.Sprintf("provider: %s: %s", e.Outcome.Class, e.Outcome.Err)
}

// OutcomeOf returns the outcome err stands for: the classified outcome of
// an *Error, a transient one for a timeout or connection failure, and a
// cancellation is transient too (the engine decides what a cancelled
// attempt means).
func OutcomeOf(err error) job.Outcome {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Outcome
	}
	return job.Outcome{Class: job.ClassTransient, Err: "provider call failed: " + safeErr(err)}
}

// safeErr keeps the first line of an error, bounded, for the attempt
// history. Transport errors name hosts and causes, never bodies.
func safeErr(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
