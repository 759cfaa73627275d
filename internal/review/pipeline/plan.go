package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/chunk"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/store"
)

// PromptOverheadTokens is added to a part's estimated tokens for the
// instructions and the line numbers the prompt adds.
const PromptOverheadTokens = 400

// Submission is a review to plan: what the API or library was given, with
// the depth already resolved (full or fast).
type Submission struct {
	// ID is the review's id (the parent job id), chosen by the caller.
	ID     string
	Region string
	Tenant string
	Lane   job.Lane
	// Diff is the unified diff; it goes into an object, never a payload.
	Diff    []byte
	Args    Args
	Profile provider.Profile
	// MaxPartTokens is the token budget of one part; 0 means
	// chunk.DefaultMaxTokens.
	MaxPartTokens  int
	IdempotencyKey string
	Budgets        job.Budgets
	Now            time.Time
}

// Plan is what a submission becomes: objects to store first, then the
// parent (accepted) and its parts (waiting), inserted in one write.
type Plan struct {
	Objects []store.Object
	Parent  *job.Job
	Parts   []*job.Job
}

// NewPlan parses and splits the diff and builds the records of a review.
// newID returns fresh job ids. The error of a diff that does not parse is
// a *diff.ParseError or diff.ErrNoFiles, safe to show the caller.
func NewPlan(s Submission, newID func() string) (Plan, error) {
	d, err := diff.Parse(s.Diff)
	if err != nil {
		return Plan{}, err
	}
	mode := chunk.ModeFull
	if s.Args.Depth == DepthFast {
		mode = chunk.ModeFast
	}
	parts, err := chunk.Split(d, chunk.Options{MaxTokens: s.MaxPartTokens, Mode: mode})
	if err != nil {
		return Plan{}, fmt.Errorf("split diff: %w", err)
	}
	s.Profile = s.Profile.WithDefaults()
	s.Args.Parts, s.Args.DiffObject, s.Args.Provider = len(parts), s.ID, s.Profile.Name
	p := Plan{Objects: []store.Object{{Kind: ObjectDiff, ID: s.ID, Body: s.Diff, UpdatedAt: s.Now}}}
	if p.Parent, err = s.job(KindReview, s.ID, s.Args, 1, true); err != nil {
		return Plan{}, err
	}
	p.Parent.IdempotencyKey = s.IdempotencyKey
	for _, part := range parts {
		objID := s.ID + "/" + strconv.Itoa(part.Index)
		// A lone part that is the whole diff reads the diff object
		// (PartArgs.WholeDiff) rather than a copy of it.
		whole := len(parts) == 1 && part.Text == string(s.Diff)
		if !whole {
			p.Objects = append(p.Objects, store.Object{Kind: ObjectPart, ID: objID, Body: []byte(part.Text), UpdatedAt: s.Now})
		}
		est := part.Tokens + PromptOverheadTokens
		cost := int64(1)
		if s.Profile.TokensKey != "" {
			cost = int64(est + s.Profile.MaxOutputTokens)
		}
		pa := PartArgs{Review: s.ID, Index: part.Index, Object: objID, Depth: s.Args.Depth, Provider: s.Profile.Name, EstTokens: est,
			WholeDiff: whole}
		pj, err := s.job(KindPart, newID(), pa, cost, false)
		if err != nil {
			return Plan{}, err
		}
		pj.ParentID, pj.Depth = s.ID, s.Args.Depth
		if s.IdempotencyKey != "" {
			// A replay's parts dedupe too; else they would be inserted
			// with the replay's discarded parent id and run as orphans.
			pj.IdempotencyKey = partIdempotencyKey(s.IdempotencyKey, part.Index)
		}
		p.Parts = append(p.Parts, pj)
	}
	return p, nil
}

func (s Submission) job(kind, id string, args any, cost int64, accepted bool) (*job.Job, error) {
	payload, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	j := &job.Job{
		Kind: kind, Region: s.Region, Lane: s.Lane, Tenant: s.Tenant, LimitKeys: s.Profile.LimitKeys(),
		Payload: payload, Cost: cost, Budgets: s.Budgets, Depth: s.Args.Depth,
	}
	j.Prepare(id, s.Now, 0, accepted)
	if err := j.Validate(nil); err != nil {
		return nil, err
	}
	return j, nil
}

// partIdempotencyKey derives a part's idempotency key from its review's:
// a hash keeps it within the length limit for any review key.
func partIdempotencyKey(review string, index int) string {
	sum := sha256.Sum256([]byte(review))
	return "review.part:" + hex.EncodeToString(sum[:16]) + "/" + strconv.Itoa(index)
}

// ResolveDepth turns a requested depth into the one used: auto is fast when
// the predicted wait exceeds the lane's budget, full otherwise.
func ResolveDepth(requested string, predictedWait, budget time.Duration) (string, error) {
	switch requested {
	case DepthFull, DepthFast:
		return requested, nil
	case DepthAuto, "":
		if predictedWait > budget {
			return DepthFast, nil
		}
		return DepthFull, nil
	}
	return "", fmt.Errorf("depth must be auto, full or fast, not %q", requested)
}
