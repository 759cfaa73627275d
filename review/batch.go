package review

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/review/batchapi"
	"github.com/ratelane/ratelane/internal/review/batchlane"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/reviewapi"
	"github.com/ratelane/ratelane/internal/store"
)

// The batch lane's built-in kinds: the two jobs that drive a batch.
const (
	KindBatchSubmit  = batchlane.KindSubmit
	KindBatchCollect = batchlane.KindCollect
)

// BatchConfig tunes a region's batch lane; the zero value is the default.
type BatchConfig struct {
	// PollInterval is the wait between polls of a running provider batch;
	// default 1 min.
	PollInterval time.Duration
	// MinTurnaround: a pending item is not sent when the batch's deadline
	// is closer than this; default 1 h. It is also the turnaround of one
	// provider batch in the intake prediction (SubmitBatch).
	MinTurnaround time.Duration
	// SettleGroup is how many of a provider batch's results are recorded
	// per store write; default 128 (batchlane.DefaultSettleGroup).
	SettleGroup int
	// Stage is a test hook called at the batch lane's crash-relevant
	// stages (batchlane.Stage*); nil in production.
	Stage func(name string)
	// Yield is a test hook called between the pieces of the batch lane's
	// CPU work, the handlers' (batchlane.Config.Yield) and a manifest's
	// intake (SubmitBatch); nil in production, which calls engine.Yield.
	// Tests count the pieces with it.
	Yield func(ctx context.Context)
}

// BatchReview is one review of a batch manifest. Its fields are
// batchlane.Review's: the plug-in converts it, so the two cannot drift.
type BatchReview struct {
	Repo    string
	Change  string
	BaseSHA string
	HeadSHA string
	// Diff is the unified diff; stored once in the region's store.
	Diff    []byte
	Publish Publish
}

// BatchExtraction is one generic LLM extraction item of a batch manifest:
// an input, what to do with it (Instruction, or Template naming one of
// batchlane.Templates: extract, classify, summarize) and the JSON Schema
// the answer must satisfy. Its result is published on the item, once.
type BatchExtraction = batchlane.Extraction

// BatchExtractionResult is a succeeded extraction item's result: the
// answer, valid against the item's schema, and its usage.
type BatchExtractionResult = batchlane.ExtractionResult

// BatchRequest is a manifest for the batch lane.
type BatchRequest struct {
	Region string
	// Tenant defaults to "default".
	Tenant string
	// Provider names a batch-capable profile (openai, openai-compatible
	// or anthropic) of the region; default the region's default profile.
	Provider string
	Reviews  []BatchReview
	// Extractions are generic extraction items; a manifest carries Reviews
	// or Extractions, not both.
	Extractions []BatchExtraction
	// Deadline is when every item must be final; default 48 h from now.
	Deadline time.Time
	// MaxAttempts bounds the provider batches one item may go out in;
	// default 3.
	MaxAttempts int
	// OnOverload is what a manifest predicted to finish past its
	// Deadline gets: "reject" (the default: a *BatchLateError), "degrade"
	// (planned at depth fast when that finishes in time) or "queue"
	// (accepted anyway).
	OnOverload string
}

// BatchLateError is SubmitBatch's refusal of a manifest predicted to
// finish past its deadline.
type BatchLateError = batchlane.LateError

// BatchIntake is the predicted completion a batch was accepted with.
type BatchIntake = batchlane.Intake

// BatchStatus is a batch's progress: item counts by state, the manifest
// summary and, from GetBatch, its provider batches.
type BatchStatus = batchapi.Batch

// BatchChunkStatus is one provider batch of a batch.
type BatchChunkStatus = batchapi.Chunk

// BatchItem is one item of a batch: one part of one review.
type BatchItem = batchapi.Item

// ErrNoBatchProvider is returned for a profile without a batch API.
var ErrNoBatchProvider = errors.New("review: the provider has no batch API")

// errNoProvider marks a batch naming no profile of the region.
var errNoProvider = errors.New("review: unknown provider profile")

// batchEntries builds the batch clients of a region's batch-capable
// profiles.
func batchEntries(providers []Provider) map[string]batchlane.Entry {
	out := map[string]batchlane.Entry{}
	for _, pr := range providers {
		prof := pr.Profile()
		bp, err := batchlane.NewProvider(prof)
		if err != nil {
			continue // rules, or a profile the interactive lane alone uses
		}
		out[prof.Name] = batchlane.Entry{Profile: prof, Batch: bp}
	}
	return out
}

// bindBatches registers the batch lane's two kinds in the region.
func (rt *regionRT) bindBatches(r *ratelane.PluginRegion, rc RegionConfig) error {
	cfg := r.Config()
	rt.batchProviders = batchEntries(rc.Providers)
	rt.batches = batchlane.NewHandler(batchlane.Config{Region: rt.region, Store: rt.st, Providers: rt.batchProviders,
		Wake: func(id string) { rt.r.Jobs().PartsChangedIn(id, ratelane.LaneBatch) }, PollInterval: rc.Batch.PollInterval, MinTurnaround: rc.Batch.MinTurnaround, SettleGroup: rc.Batch.SettleGroup, Now: cfg.Now,
		Logger: cfg.Logger, Stage: rc.Batch.Stage, Yield: rc.Batch.Yield})
	rt.batchYield = rc.Batch.Yield
	for kind, fn := range map[string]engine.HandlerFunc{KindBatchSubmit: rt.batches.HandleSubmit, KindBatchCollect: rt.batches.HandleCollect} {
		// Both compute: they build and parse a provider batch's files and
		// settle its results, a thousand items an attempt, and return
		// pending between polls rather than wait; they take turns of the
		// batch lane's CPU governor, and pass them at engine.Yield.
		if err := r.Handle(kind, engine.Kind{Handler: fn, Computes: true}); err != nil {
			return err
		}
	}
	return nil
}

// objectsPerWrite is how many of a manifest's objects (diffs and parts)
// SubmitBatch stores per store write: short transactions, few commits.
const objectsPerWrite = 256

// SubmitBatch stores every review's diff in the region, splits each into
// parts as an interactive review would, and records the batch: first the
// jobs (the submit and collect drivers and one review per entry, in one
// write through the region's writer), then the batch and its items. The
// items go to the provider's batch API; each review is aggregated and
// published once when its items are final.
//
// Before anything is stored, the manifest's completion is predicted
// (admission.PredictCompletion: the submit key's wait, the lane's work
// ahead for the same profile, the provider's batch queue limits, one
// MinTurnaround per round) and a manifest that would finish past its
// deadline is refused, degraded or accepted late by r.OnOverload
// (batchlane.Admit). The prediction is kept in the batch's summary.
func (p *Plugin) SubmitBatch(ctx context.Context, r BatchRequest) (BatchStatus, error) {
	rt, err := p.runtime(r.Region)
	if err != nil {
		return BatchStatus{}, err
	}
	e, err := rt.batchProvider(r.Provider)
	if err != nil {
		return BatchStatus{}, err
	}
	switch r.OnOverload {
	case "", batchlane.OverloadReject, batchlane.OverloadDegrade, batchlane.OverloadQueue:
	default:
		return BatchStatus{}, &reviewapi.InputError{Field: "on_overload",
			Err: fmt.Errorf("on_overload must be reject, degrade or queue, not %q", r.OnOverload)}
	}
	m := batchlane.Manifest{ID: uuid.Must(uuid.NewV7()).String(), Region: rt.region, Tenant: r.Tenant, Profile: e.Profile,
		Deadline: r.Deadline, MaxAttempts: r.MaxAttempts, MaxPartTokens: rt.cfg.MaxPartTokens, Now: rt.r.Config().Now(),
		Extractions: r.Extractions}
	for _, br := range r.Reviews {
		m.Reviews = append(m.Reviews, batchlane.Review(br))
	}
	for i, br := range r.Reviews {
		args := pipelineArgs(br.Publish)
		if err := rt.publisher.CheckPublish(args); err != nil {
			return BatchStatus{}, &reviewapi.InputError{Field: fmt.Sprintf("reviews[%d].publish", i), Err: err}
		}
		if err := rt.checkTarget(ctx, r.Tenant, br.Publish); errors.Is(err, errNoTarget) {
			return BatchStatus{}, &reviewapi.InputError{Field: fmt.Sprintf("reviews[%d].publish.target", i), Err: err}
		} else if err != nil {
			return BatchStatus{}, err
		}
	}
	// The intake is batch-lane work being accepted, and paced as such:
	// it takes the lane's CPU turn (PluginRegion.BatchWork, waiting
	// behind the lane's running pieces, never behind interactive work)
	// and goes in pieces with a Yield between them, where the batch pacer
	// rests it while interactive work is about. Planning a 1,000-review
	// manifest and storing it in one piece was ~60 ms of CPU in this
	// goroutine no pacer could rest (docs/benchmarks.md, "Session 27
	// (s27h1)"). Only the manifest's caller waits longer, and only while
	// interactive work is about; an interactive review's intake takes no
	// turn and never waits for one.
	ctx, end := rt.r.BatchWork(ctx)
	defer end()
	yield := rt.batchYield
	if yield == nil { // production, or no batch provider was bound
		yield = engine.Yield
	}
	m.Yield = func() { yield(ctx) }
	newID := func() string { return uuid.Must(uuid.NewV7()).String() }
	plan, err := batchlane.NewPlan(m, newID)
	var xe *batchlane.ExtractionError
	if errors.As(err, &xe) {
		return BatchStatus{}, &reviewapi.InputError{Field: fmt.Sprintf("extractions[%d].%s", xe.Index, xe.Field), Err: xe.Err}
	} else if err != nil {
		return BatchStatus{}, err
	}
	if plan, err = rt.admitBatch(ctx, e, m, plan, r.OnOverload, newID); err != nil {
		return BatchStatus{}, err
	}
	// The manifest's writes are the batch lane's: a single-writer store
	// runs them only while no interactive write is waiting
	// (store.WithLane), so a large manifest does not hold the region's
	// interactive reviews.
	ctx = store.WithLane(ctx, ratelane.LaneBatch)
	// A few hundred objects per write: one write each made a 1,000-review
	// manifest 2,000 serial commits through the region's one writer.
	for objs := range slices.Chunk(plan.Objects, objectsPerWrite) {
		m.Yield() // each write a piece
		if err := rt.st.PutObjects(ctx, objs); err != nil {
			return BatchStatus{}, fmt.Errorf("review: store batch content: %w", err)
		}
	}
	m.Yield()
	// The manifest's jobs may go in pieces (store.WithPieces): the drivers
	// are in the first, and a prefix left by a failure finds no batch.
	if _, err := rt.r.Jobs().Insert(store.WithPieces(ctx), plan.Jobs, rt.r.Config().DefaultLimit); err != nil {
		return BatchStatus{}, fmt.Errorf("review: insert batch jobs: %w", err)
	}
	m.Yield()
	if err := rt.st.CreateBatch(ctx, plan.Batch, plan.Items); err != nil {
		// The drivers find no batch and end; the reviews with it.
		return BatchStatus{}, fmt.Errorf("review: record batch: %w", err)
	}
	rt.r.Notify()
	return rt.batchStatus(ctx, plan.Batch.ID)
}

// admitBatch predicts the plan's completion and applies the manifest's
// on_overload policy: the plan to store (at depth fast when degraded),
// with the prediction in its summary, or a *BatchLateError.
func (rt *regionRT) admitBatch(ctx context.Context, e batchlane.Entry, m batchlane.Manifest, plan batchlane.Plan, policy string,
	newID func() string) (batchlane.Plan, error) {
	in, err := rt.batchLoad(ctx, e)
	if err != nil {
		return plan, fmt.Errorf("review: predict batch completion: %w", err)
	}
	samples, err := rt.learnTurnaround(ctx, e, &in)
	if err != nil {
		return plan, fmt.Errorf("review: learn batch turnaround: %w", err)
	}
	in.Work = plan.Work()
	var fast batchlane.Plan
	intake, depth, err := batchlane.Admit(policy, m.Now, plan.Batch.Deadline, batchlane.SubmitKey(e.Profile), in,
		func() (admission.BatchWork, error) {
			f := m
			f.Depth = pipeline.DepthFast
			var err error
			fast, err = batchlane.NewPlan(f, newID)
			return fast.Work(), err
		})
	if err != nil {
		return plan, err
	}
	if depth == pipeline.DepthFast {
		plan = fast
	}
	intake.TurnaroundSamples = samples
	return plan, plan.SetIntake(intake)
}

// learnTurnaround replaces in.Turnaround with the median turnaround of the
// profile's recent provider batches (llmbatch.Chunk.Turnaround: create to
// the poll that saw it end, completed or expired) when the newest
// batchlane.TurnaroundBatches batches of the region hold at least
// batchlane.MinTurnaroundSamples of them, and returns how many it used
// (0: the configured turnaround stands). It costs one batch listing and
// one chunk read per batch of the profile.
func (rt *regionRT) learnTurnaround(ctx context.Context, e batchlane.Entry, in *admission.CompletionInput) (int, error) {
	bs, err := rt.st.ListBatches(ctx, store.BatchListParams{Limit: batchlane.TurnaroundBatches})
	if err != nil {
		return 0, err
	}
	var samples []time.Duration
	for _, b := range bs {
		if b.Provider != e.Profile.Name || len(samples) >= batchlane.MaxTurnaroundSamples {
			continue
		}
		chunks, err := rt.st.BatchChunks(ctx, b.ID)
		if err != nil {
			return 0, err
		}
		for _, sc := range chunks {
			c, err := decodeChunk(sc.Record)
			if err != nil {
				continue // a record this version cannot read teaches nothing
			}
			if d, ok := c.Turnaround(); ok && len(samples) < batchlane.MaxTurnaroundSamples {
				samples = append(samples, d)
			}
		}
	}
	d, ok := batchlane.MedianTurnaround(samples)
	if !ok {
		return 0, nil
	}
	in.Turnaround = d
	return len(samples), nil
}

// batchLoad is the region's batch lane as a new manifest of profile e
// meets it: the wait of its submission on the submit key (the one queue
// wait prediction, engine.Jobs.PredictWait), the items of the profile's
// running batches that are not final (and their share of those batches'
// estimated tokens), the provider's queue limits and the turnaround of
// one provider batch.
func (rt *regionRT) batchLoad(ctx context.Context, e batchlane.Entry) (admission.CompletionInput, error) {
	cfg := rt.r.Config()
	sub, err := rt.r.Jobs().PredictWait(ctx, engine.PredictParams{Kind: KindBatchSubmit, Lane: ratelane.LaneBatch,
		Keys: []string{batchlane.SubmitKey(e.Profile)}, Default: cfg.DefaultLimit})
	if err != nil {
		return admission.CompletionInput{}, err
	}
	lim := e.Batch.Limits()
	in := admission.CompletionInput{Submit: sub, Queue: admission.BatchWork{Requests: lim.QueueRequests, Tokens: lim.QueueTokens},
		Turnaround: rt.cfg.Batch.MinTurnaround}
	if in.Turnaround <= 0 {
		in.Turnaround = batchlane.DefaultMinTurnaround
	}
	before := ""
	for {
		bs, err := rt.st.ListBatches(ctx, store.BatchListParams{State: store.BatchRunning, Before: before, Limit: store.MaxListLimit})
		if err != nil {
			return admission.CompletionInput{}, err
		}
		for _, b := range bs {
			open := int64(b.Counts.Pending + b.Counts.Submitted)
			if b.Provider != e.Profile.Name || open == 0 {
				continue
			}
			sum, _ := batchlane.DecodeSummary(b.Summary) // the plug-in's own; an old one counts no tokens
			in.Ahead.Requests += open
			if sum.Items > 0 {
				in.Ahead.Tokens += sum.Tokens * open / int64(sum.Items)
			}
		}
		if len(bs) < store.MaxListLimit {
			return in, nil
		}
		before = bs[len(bs)-1].ID
	}
}

func (rt *regionRT) batchProvider(name string) (batchlane.Entry, error) {
	pr, err := rt.providerFor(name)
	if err != nil {
		return batchlane.Entry{}, fmt.Errorf("%w: %v", errNoProvider, err)
	}
	e, ok := rt.batchProviders[pr.Profile().Name]
	if !ok {
		return batchlane.Entry{}, fmt.Errorf("%w: profile %q is of kind %s; use an openai, openai-compatible or anthropic profile",
			ErrNoBatchProvider, pr.Profile().Name, pr.Profile().Kind)
	}
	return e, nil
}

// GetBatch returns a batch's progress; ratelane.ErrNotFound for an id that
// is not a batch of the region.
func (p *Plugin) GetBatch(ctx context.Context, region, id string) (BatchStatus, error) {
	rt, err := p.runtime(region)
	if err != nil {
		return BatchStatus{}, err
	}
	return rt.batchStatus(ctx, id)
}

func (rt *regionRT) batchStatus(ctx context.Context, id string) (BatchStatus, error) {
	b, err := rt.st.GetBatch(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && b.Creating {
		// A batch whose items are still going in is not there yet: its
		// POST has not answered, and its counts would be short.
		return BatchStatus{}, ratelane.ErrNotFound
	} else if err != nil {
		return BatchStatus{}, err
	}
	s := statusOf(b)
	chunks, err := rt.st.BatchChunks(ctx, id)
	if err != nil {
		return BatchStatus{}, err
	}
	s.Chunks = make([]BatchChunkStatus, 0, len(chunks))
	for _, sc := range chunks {
		c, err := decodeChunk(sc.Record)
		if err != nil {
			return BatchStatus{}, fmt.Errorf("batch %s: chunk %s: %w", id, sc.Key, err)
		}
		s.Chunks = append(s.Chunks, BatchChunkStatus{Key: c.Key, State: string(c.State), BatchID: c.BatchID, Items: len(c.CustomIDs),
			Refusals: c.Refusals, Status: c.Status, Summary: c.Summary})
	}
	return s, nil
}

func statusOf(b *store.Batch) BatchStatus {
	sum, _ := batchlane.DecodeSummary(b.Summary) // the summary is the plug-in's own
	return BatchStatus{ID: b.ID, Region: b.Region, Tenant: b.Tenant, Provider: b.Provider, State: b.State, Deadline: b.Deadline,
		Counts: b.Counts, Summary: sum, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt}
}

// BatchListParams filters ListBatches.
type BatchListParams struct {
	// Tenant, when set, keeps that tenant's batches.
	Tenant string
	// State, when set, keeps batches in that state (running, canceling, done).
	State string
	// Before is the previous page's last id; Limit the page size.
	Before string
	Limit  int
}

// ListBatches lists a region's batches newest first, without chunks.
func (p *Plugin) ListBatches(ctx context.Context, region string, lp BatchListParams) ([]BatchStatus, error) {
	rt, err := p.runtime(region)
	if err != nil {
		return nil, err
	}
	bs, err := rt.st.ListBatches(ctx, store.BatchListParams(lp))
	if err != nil {
		return nil, err
	}
	out := make([]BatchStatus, len(bs))
	for i, b := range bs {
		out[i] = statusOf(b)
	}
	return out, nil
}

// BatchItems returns a page of a batch's items in custom_id order, after
// the custom_id after; state filters them when set.
func (p *Plugin) BatchItems(ctx context.Context, region, id, state, after string, limit int) ([]BatchItem, error) {
	rt, err := p.runtime(region)
	if err != nil {
		return nil, err
	}
	items, err := rt.st.BatchItems(ctx, store.BatchItemParams{BatchID: id, State: state, After: after, Limit: store.PageSize(limit)})
	if err != nil {
		return nil, err
	}
	out := make([]BatchItem, len(items))
	for i, it := range items {
		out[i] = BatchItem{CustomID: it.CustomID, Review: it.JobID, Part: it.Index, State: it.State, Attempts: it.Attempts,
			Chunk: it.ChunkKey, Disposition: it.Disposition, Reason: it.Reason, UpdatedAt: it.UpdatedAt}
		if it.JobID == "" && it.State == store.ItemSucceeded {
			// An extraction item's result is published here: the answer
			// its schema accepted, recorded once by the settling write.
			var res batchlane.ExtractionResult
			if err := json.Unmarshal(it.Result, &res); err != nil {
				return nil, fmt.Errorf("batch %s: item %s: result does not decode: %w", id, it.CustomID, err)
			}
			out[i].Result = &res
		}
	}
	return out, nil
}

// CancelBatch asks for a batch to stop: its pending items end canceled and
// its running provider batches are cancelled (what already finished is
// still delivered). ratelane.ErrConflict for a batch that is done.
func (p *Plugin) CancelBatch(ctx context.Context, region, id string) (BatchStatus, error) {
	rt, err := p.runtime(region)
	if err != nil {
		return BatchStatus{}, err
	}
	err = rt.st.SetBatchState(ctx, id, []string{store.BatchRunning, store.BatchCanceling}, store.BatchCanceling, rt.r.Config().Now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return BatchStatus{}, ratelane.ErrNotFound
	case errors.Is(err, store.ErrConflict):
		return BatchStatus{}, fmt.Errorf("%w: batch %s is done", ratelane.ErrConflict, id)
	case err != nil:
		return BatchStatus{}, err
	}
	rt.r.Notify()
	return rt.batchStatus(ctx, id)
}

func pipelineArgs(p Publish) pipeline.Args { return pipeline.Args{Publish: p} }

func decodeChunk(rec []byte) (llmbatch.Chunk, error) {
	var c llmbatch.Chunk
	err := json.Unmarshal(rec, &c)
	return c, err
}
