// Package pipeline runs reviews as ratelane jobs. A review is a parent job
// (kind KindReview) that stays accepted while its diff, stored once as a
// region object, is reviewed in parts: child jobs of kind KindPart, one per
// chunk.Split part, each naming the provider profile's limit keys and
// costing its estimated tokens when the profile paces tokens. A part's
// handler loads its text by reference, calls the provider, validates the
// output (finding.ValidateOutput: a failure spends the schema budget),
// verifies every finding against the part's diff (finding.Verify: failures
// are quarantined with their reason) and succeeds with a PartResult.
//
// A review is a parent of the engine's parts capability (engine.Kind's
// Aggregate): it is inserted accepted with its parts in one write
// (engine.Jobs.InsertParts), and when every part is final (published or
// terminal) the engine calls Aggregate, which merges the valid findings
// (finding.Aggregate) into a Result (partial when a part failed); the
// engine advances the parent accepted -> validated with it, exactly once
// across nodes and crashes, and publishes it once: the ReviewPublisher
// delivers (rdjsonl file, webhook job, GitHub job) and the compare-and-set
// validated -> published records it.
//
// Diffs, prompts and model output never appear in a job payload, a log
// line or an error: payloads carry object ids, logs carry job ids.
package pipeline

import (
	"encoding/json"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/provider"
)

// Job kinds and object kinds of the review pipeline.
const (
	// KindReview is the parent job of a review, aggregated from its parts
	// by the engine (engine.Kind.Aggregate); it is leased only when an
	// operator redrives it, to be aggregated again.
	KindReview = "review"
	// KindPart reviews one part of a diff.
	KindPart = "review.part"
	// KindGitHub posts a review's findings to a GitHub pull request.
	KindGitHub = "review.github"

	// ObjectDiff holds a review's whole diff, id = review id.
	ObjectDiff = "review.diff"
	// ObjectPart holds one part's diff text, id = review id + "/" + index.
	ObjectPart = "review.part"
)

// The review kinds are built in (job.ReserveKind): only SubmitReview and
// the ReviewPublisher create them, never a producer's POST /v1/jobs, whose
// payload could name another tenant's review or diff object.
func init() {
	job.ReserveKind(KindReview, "reviews (POST /v1/reviews)")
	job.ReserveKind(KindPart, "the parts of a review (POST /v1/reviews)")
	job.ReserveKind(KindGitHub, "GitHub publication of a review (POST /v1/reviews with publish github)")
}

// Depths a review may ask for. DepthAuto becomes fast when the predicted
// queue wait breaches the lane's budget and full otherwise.
const (
	DepthAuto = "auto"
	DepthFull = string(provider.DepthFull)
	DepthFast = string(provider.DepthFast)
)

// Publish kinds.
const (
	PublishNone    = "none"
	PublishRDJSONL = "rdjsonl"
	PublishWebhook = "webhook"
	PublishGitHub  = "github"
)

// Publish says where a finished review goes.
type Publish struct {
	// Kind is none, rdjsonl, webhook or github.
	Kind string `json:"kind"`
	// Target is the rdjsonl file name (inside the configured directory),
	// the webhook subscriber id, or the GitHub pull request
	// "owner/repo#number".
	Target string `json:"target,omitempty"`
}

// Args is the payload of a review's parent job: references and metadata,
// never the diff.
type Args struct {
	Repo           string  `json:"repo,omitempty"`
	Change         string  `json:"change,omitempty"`
	BaseSHA        string  `json:"base_sha,omitempty"`
	HeadSHA        string  `json:"head_sha,omitempty"`
	DepthRequested string  `json:"depth_requested"`
	Depth          string  `json:"depth"`
	Provider       string  `json:"provider"`
	Publish        Publish `json:"publish"`
	Parts          int     `json:"parts"`
	DiffObject     string  `json:"diff_object"`
	// Batch, when set, is the batch (store.Batch) whose items are this
	// review's parts: a review of the batch lane has no part jobs.
	Batch string `json:"batch,omitempty"`
}

// PartArgs is the payload of a part job.
type PartArgs struct {
	Review    string `json:"review"`
	Index     int    `json:"index"`
	Object    string `json:"object"`
	Depth     string `json:"depth"`
	Provider  string `json:"provider"`
	EstTokens int    `json:"est_tokens"`
	// WholeDiff says the part is the review's whole diff, byte for byte
	// (a diff that fits one part): its text is the review's diff object
	// (ObjectDiff, id Review) and no part object was stored. A second
	// copy of every small review's diff was ~16 % of a 10,000-file
	// sweep's batch-only WAL frames and ~2 of an interactive review's
	// ~17 frames a commit (docs/benchmarks.md, "Session 33 (s33h6)").
	// Object still names the part's id, for the checks and the items.
	WholeDiff bool `json:"whole_diff,omitempty"`
}

// PartObject is the kind and id of the object holding a part's text.
func (a PartArgs) PartObject() (kind, id string) {
	if a.WholeDiff {
		return ObjectDiff, a.Review
	}
	return ObjectPart, a.Object
}

// Quarantined is a finding that failed verification, with its reason.
type Quarantined struct {
	Finding finding.Finding `json:"finding"`
	Reason  finding.Reason  `json:"reason"`
}

// PartResult is the result of a successful part.
type PartResult struct {
	Findings    []finding.Finding `json:"findings"`
	Quarantined []Quarantined     `json:"quarantined"`
	Usage       provider.Usage    `json:"usage"`
	Depth       string            `json:"depth"`
	Provider    string            `json:"provider"`
}

// PartFailure names a part that ended terminal.
type PartFailure struct {
	Index  int    `json:"index"`
	JobID  string `json:"job_id"`
	Reason string `json:"reason"`
}

// Progress counts a review's parts by outcome.
type Progress struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Pending   int `json:"pending"`
}

// Result is a review's aggregated result, stored on the parent job.
type Result struct {
	SchemaVersion string            `json:"schema_version"`
	Depth         string            `json:"depth"`
	Partial       bool              `json:"partial"`
	Parts         Progress          `json:"parts"`
	FailedParts   []PartFailure     `json:"failed_parts,omitempty"`
	Findings      []finding.Finding `json:"findings"`
	Quarantined   []Quarantined     `json:"quarantined"`
	Capped        bool              `json:"capped,omitempty"`
	Dropped       int               `json:"dropped,omitempty"`
	Usage         provider.Usage    `json:"usage"`
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func decode[T any](b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}
