// Package batchlane runs reviews through the providers' batch APIs: the
// asynchronous batch lane, for sweeps where nobody waits. A batch is a
// manifest of many reviews; each review's diff is split into parts exactly
// as an interactive review's (pipeline.NewPlan), and each part becomes a
// batch item (store.BatchItem) instead of a part job. Items go out in
// chunks, one provider batch each (llmbatch), and come back joined on
// custom_id. A manifest may instead carry generic extraction items
// (Extraction: an input, an instruction or template, a JSON Schema): each
// is one item with no review job, sent with its schema as structured
// output, validated against it, and published on the item itself
// (ExtractionResult) by the same guarded settle write.
//
// Two built-in jobs drive a batch, so that the engine stays the only
// writer of job state and admission paces the provider calls: a submit job
// (KindSubmit: plan chunks, upload, create) and a collect job (KindCollect:
// poll, cancel, download, deliver). Each names its own limit key per
// provider profile (SubmitKey, CollectKey), never the interactive lane's,
// so batch traffic cannot take the interactive allowance. Their handlers
// run llmbatch.Driver.Step and return outcomes: ClassPending while the
// batch runs, success once every item is final.
//
// A delivered result is validated by the review pipeline's own check
// (pipeline.CheckOutput: schema, then every finding verified against the
// part's diff, failures quarantined) and recorded on its item by a guarded
// write, so a redelivery after a crash changes nothing. A batch review is
// an accepted parent with no part jobs, aggregated by the engine's parts
// capability like an interactive review: the review kind's aggregate
// (pipeline.Aggregate) reads its items and returns ClassPending, which
// decides nothing, until every item is final; then the engine advances it
// once (accepted -> validated or terminal, a compare-and-set) and its
// Publisher delivers it once (validated -> published). Settling an item
// wakes the review's aggregation (Config.Wake, engine.Jobs.PartsChangedIn);
// the engine's periodic sweep repairs a lost wake-up. Expired and retryable items go back to pending for the
// next chunk while their attempts last; past the batch's deadline the
// items that are not final end with the reason deadline_exceeded.
package batchlane

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/review/provider"
)

// The built-in kinds of the batch lane.
const (
	// KindSubmit plans a batch's pending items into chunks and submits them.
	KindSubmit = "review.batch.submit"
	// KindCollect polls a batch's provider batches and delivers their results.
	KindCollect = "review.batch.collect"
)

// They are built in: a producer's POST /v1/jobs could otherwise name
// another tenant's batch.
func init() {
	job.ReserveKind(KindSubmit, "batch lane submission (POST /v1/batches)")
	job.ReserveKind(KindCollect, "batch lane collection (POST /v1/batches)")
}

// SubmitKey and CollectKey are the limit keys of a profile's batch calls:
// their own, so that batch traffic never spends the interactive lane's
// allowance (the profile's RequestsKey or TokensKey).
func SubmitKey(p provider.Profile) string { return "batch-submit:" + p.WithDefaults().RequestsKey }

// CollectKey is the limit key of a profile's poll, cancel and download calls.
func CollectKey(p provider.Profile) string { return "batch-collect:" + p.WithDefaults().RequestsKey }

// NewProvider returns the batch client of a review profile (the one serve
// configures per region): OpenAI's Batch API for openai and
// openai-compatible, Anthropic's Message Batches for anthropic. The rules
// reviewer has no batch API.
func NewProvider(p provider.Profile) (llmbatch.Provider, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.WithDefaults()
	cfg := llmbatch.Config{BaseURL: p.BaseURL, APIKey: p.APIKey, HTTPClient: p.HTTPClient, Timeout: p.Timeout,
		Limits: llmbatch.Limits{QueueRequests: p.BatchQueueRequests, QueueTokens: p.BatchQueueTokens}}
	if cfg.BaseURL != "" && !strings.HasSuffix(cfg.BaseURL, "/") {
		cfg.BaseURL += "/" // the SDKs join paths onto a base that ends in a slash
	}
	switch p.Kind {
	case provider.KindOpenAI, provider.KindOpenAICompatible:
		return llmbatch.NewOpenAI(cfg), nil
	case provider.KindAnthropic:
		return llmbatch.NewAnthropic(cfg), nil
	}
	return nil, fmt.Errorf("provider %q is of kind %s, which has no batch API; use an openai, openai-compatible or anthropic profile", p.Name, p.Kind)
}

// Args is the payload of both driver jobs.
type Args struct {
	Batch string `json:"batch"`
}

// Summary is a batch's manifest summary (store.Batch.Summary): counts and
// options, never content.
type Summary struct {
	Reviews int `json:"reviews"`
	// Extractions counts the manifest's extraction items (a manifest
	// carries reviews or extractions, not both).
	Extractions int    `json:"extractions,omitempty" doc:"generic extraction items (a manifest of extractions has no reviews)"`
	Items       int    `json:"items"`
	Depth       string `json:"depth"`
	// Provider is the profile name; Kind its provider kind.
	Provider string `json:"provider"`
	Kind     string `json:"kind"`
	// Reviews' job ids, in manifest order.
	ReviewIDs []string `json:"review_ids"`
	// Rejected counts manifest entries refused at submission (none today:
	// a bad entry refuses the whole manifest).
	Rejected int `json:"rejected,omitempty"`
	// Tokens is the items' estimated tokens (prompt and answer cap), what
	// the intake prediction counts against a provider's token queue.
	Tokens int64 `json:"tokens" doc:"the items' estimated tokens (prompt and answer cap)"`
	// Intake is the predicted completion the batch was accepted with.
	Intake *Intake `json:"intake,omitempty" doc:"the predicted completion the batch was accepted with"`
}

// Extracting reports whether the batch is a manifest of extraction items.
func (s Summary) Extracting() bool { return s.Extractions > 0 }

// DecodeSummary reads a batch's summary.
func DecodeSummary(b []byte) (Summary, error) {
	var s Summary
	err := json.Unmarshal(b, &s)
	return s, err
}

// DecodeSummaryHead reads a batch's summary without its ReviewIDs (left
// nil), which a pass of the batch's driver jobs never reads: decoding a
// 10,000-review batch's ids made every pass 10,000 strings
// (docs/benchmarks.md, "Session 23 (s23h3)").
func DecodeSummaryHead(b []byte) (Summary, error) {
	var s struct {
		Summary
		ReviewIDs skipJSON `json:"review_ids"` // shadows Summary.ReviewIDs
	}
	err := json.Unmarshal(b, &s)
	return s.Summary, err
}

// skipJSON is a JSON value decoded into nothing (it must still be valid).
type skipJSON struct{}

// UnmarshalJSON does nothing.
func (*skipJSON) UnmarshalJSON([]byte) error { return nil }

// Reasons an item ends with that do not come from a provider.
const (
	// ReasonDeadline: the batch could no longer finish the item before
	// its deadline.
	ReasonDeadline = "deadline_exceeded"
	// ReasonCanceled: an operator cancelled the batch.
	ReasonCanceled = "canceled"
	// ReasonAttempts prefixes the last reason of an item whose attempts
	// ran out.
	ReasonAttempts = "attempts_exhausted"
	// ReasonInvalidOutput prefixes the validation failure of an answer.
	ReasonInvalidOutput = "invalid_output"
)

// DefaultMinTurnaround is how long before the deadline a pending item is
// still sent: a provider batch usually ends within the hour, though it
// may take its whole 24 h window.
const DefaultMinTurnaround = time.Hour
