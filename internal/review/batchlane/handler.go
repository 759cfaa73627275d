package batchlane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/store"
)

// Stages of a batch where a crash matters, for the kill -9 tests: a
// provider batch was created and its id recorded; a poll saw it running
// and recorded that; its results were
// downloaded and reconciled, before any item was settled; some but not all
// of a chunk's items were settled (the first group of Config.SettleGroup,
// when there is more than one). Each is also a crash point
// (internal/crashpoint) of a ratelane_crashpoints build.
const (
	StageSubmitted       = "batch-submitted"
	StageInProgress      = "batch-in-progress"
	StageDownloaded      = "batch-results-downloaded"
	StagePartlyDelivered = "batch-partly-delivered"
)

// DefaultSettleGroup is Config.SettleGroup's default.
const DefaultSettleGroup = 128

// Entry is one provider profile of the region with its batch client.
type Entry struct {
	Profile provider.Profile
	Batch   llmbatch.Provider
}

// Config configures a Handler.
type Config struct {
	// Region is the region served; Store its store (batch tables and
	// objects are read and written here; jobs are not).
	Region string
	Store  store.Store
	// Providers are the region's batch-capable profiles by name.
	Providers map[string]Entry
	// Wake is called with a review's id when one of its items became
	// final, so the engine aggregates it now rather than at its next
	// sweep: the region's engine.Jobs.PartsChangedIn with the batch lane
	// (required), which the engine serves after interactive wake-ups.
	Wake func(reviewID string)
	// PollInterval is the wait between polls of a running provider batch;
	// default 1 min.
	PollInterval time.Duration
	// MinTurnaround: a pending item is not sent when the deadline is
	// closer than this; default DefaultMinTurnaround.
	MinTurnaround time.Duration
	// SettleGroup is how many of a chunk's delivered items are settled
	// per store write (store.BatchSettles.SettleBatchItems); default
	// DefaultSettleGroup. One write per item made a 1,000-item chunk a
	// thousand serial commits through the region's one writer, queued
	// beside the interactive lane's writes; one write per chunk would
	// hold the writer for the whole chunk at once.
	SettleGroup int
	// GiveUpAfter: this long past the deadline, items still in a provider
	// batch that cannot be cancelled or collected end deadline_exceeded;
	// default 1 h.
	GiveUpAfter time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger gets ids and counts, never content; default slog.Default().
	Logger *slog.Logger
	// Yield is called between the pieces of a pass's CPU work (a
	// submission's request building, buildPiece items at a time); default
	// engine.Yield, where the batch pacer rests the handler and the CPU
	// governor passes its turn. Tests count the pieces with it.
	Yield func(ctx context.Context)
	// Stage, when set, is called at each stage named Stage*: a kill -9
	// test blocks there and kills the process at exactly that point.
	// Production leaves it nil.
	Stage func(name string)
}

// Handler runs both driver kinds of one region (engine.Handler through
// HandleSubmit and HandleCollect).
type Handler struct {
	cfg Config
	// format is the structured output every request asks for: the
	// findings schema the interactive lane sends too, decoded once and
	// shared (it is only encoded).
	format *llmbatch.Format
}

// NewHandler returns the region's batch lane handler.
func NewHandler(cfg Config) *Handler {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Minute
	}
	if cfg.MinTurnaround <= 0 {
		cfg.MinTurnaround = DefaultMinTurnaround
	}
	if cfg.SettleGroup <= 0 {
		cfg.SettleGroup = DefaultSettleGroup
	}
	if cfg.GiveUpAfter <= 0 {
		cfg.GiveUpAfter = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Yield == nil {
		cfg.Yield = engine.Yield
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Handler{cfg: cfg, format: &llmbatch.Format{Name: provider.SchemaName, Schema: provider.ResponseSchema()}}
}

// HandleSubmit is one pass of a batch's submit job.
func (h *Handler) HandleSubmit(ctx context.Context, j *job.Job) job.Outcome {
	return h.handle(ctx, j, true)
}

// HandleCollect is one pass of a batch's collect job.
func (h *Handler) HandleCollect(ctx context.Context, j *job.Job) job.Outcome {
	return h.handle(ctx, j, false)
}

// orphanGrace is how long a driver job waits for its batch row: the API
// inserts the jobs first and the batch right after, so a young job may
// run before the row is committed; an old one whose row never came is
// what a crash between the two writes leaves (the API call never answered).
// The same holds for a batch still marked creating (store.Batch.Creating):
// past the grace it is a crash's remnant and is removed.
const orphanGrace = time.Minute

// pass is one run over one batch.
type pass struct {
	h      *Handler
	b      *store.Batch
	sum    Summary
	e      Entry
	now    time.Time
	submit bool
	// wait is the earliest time anything can happen next.
	wait time.Time
	// woken are the reviews woken by the settle group being applied
	// (settleGroup clears it for each group, keeping its storage).
	woken map[string]bool
	// schemas are the extraction schemas compiled in this pass.
	schemas schemaCache
	// refusedFor is the longest delay a provider's 429 on an upload or
	// create asked for in this pass; the outcome pauses the submit key
	// for it (job.Outcome.PauseKeyFor).
	refusedFor time.Duration
	// built are the requests built in this pass, by custom id: plan
	// builds every pending item's to size the chunks, and the upload of
	// the chunks it planned, in the same pass, takes them from here
	// rather than reading each part object and building its prompt again
	// (docs/benchmarks.md, "Session 15 (s15h2)").
	built map[string]llmbatch.Item
	// inputs are input objects read ahead (prefetch), by kind and id, until
	// an item's part or extraction takes its own; a nil value: none stored.
	inputs map[inputKey]*store.Object
}

func (h *Handler) handle(ctx context.Context, j *job.Job, submit bool) job.Outcome {
	var args Args
	if err := json.Unmarshal(j.Payload, &args); err != nil || args.Batch == "" {
		return permanent("batch job payload does not name a batch")
	}
	now := h.cfg.Now()
	b, err := h.cfg.Store.GetBatch(ctx, args.Batch)
	switch {
	case errors.Is(err, store.ErrNotFound) && now.Sub(j.CreatedAt) < orphanGrace:
		return job.Outcome{Class: job.ClassPending, RetryAfter: 5 * time.Second, Err: "batch not recorded yet"}
	case errors.Is(err, store.ErrNotFound):
		return permanent("batch not found")
	case err != nil:
		return job.Outcome{Class: job.ClassTransient, Err: "load batch"}
	case b.Tenant != j.Tenant || b.Region != j.Region || b.Region != h.cfg.Region:
		// Driver jobs are created by ratelane alone with their batch's
		// tenant and region; anything else is forged or a bug.
		return permanent("batch belongs to another tenant or region than the job")
	case b.Creating && now.Sub(j.CreatedAt) < orphanGrace:
		// Its items are still going in (CreateBatch in pieces).
		return job.Outcome{Class: job.ClassPending, RetryAfter: 5 * time.Second, Err: "batch not recorded yet"}
	case b.Creating:
		// A crash between CreateBatch's pieces: the API call never
		// answered, so the batch is removed as if never recorded, and a
		// creation still writing finds it gone and fails whole.
		if _, err := h.cfg.Store.AbandonBatch(ctx, b.ID); err != nil {
			return job.Outcome{Class: job.ClassTransient, Err: "abandon batch"}
		}
		h.cfg.Logger.Warn("batch left half-created removed", "batch_id", b.ID, "items_written", b.Counts.Total)
		return permanent("batch creation interrupted")
	case b.State == store.BatchDone:
		return h.done(b)
	}
	e, ok := h.cfg.Providers[b.Provider]
	if !ok {
		return permanent(fmt.Sprintf("no batch provider %q in region %s", b.Provider, h.cfg.Region))
	}
	sum, err := DecodeSummaryHead(b.Summary)
	if err != nil {
		return permanent("batch summary does not decode")
	}
	p := &pass{h: h, b: b, sum: sum, e: e, now: now, submit: submit, woken: map[string]bool{},
		schemas: schemaCache{}}
	if submit {
		err = p.runSubmit(ctx)
	} else {
		err = p.runCollect(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return job.Outcome{Class: job.ClassTransient, Err: "pass interrupted"}
		}
		// A provider or store error: come back after the poll interval.
		// Budgets are not spent, because a batch lives for hours and a
		// flaky poll must not kill it; the deadline bounds the retries.
		h.cfg.Logger.Warn("batch pass failed; will retry", "batch_id", b.ID, "submit", submit, "err", err)
		return job.Outcome{Class: job.ClassPending, RetryAfter: h.cfg.PollInterval, Err: safeErr(err)}
	}
	if b, err = h.cfg.Store.GetBatch(ctx, b.ID); err != nil {
		return job.Outcome{Class: job.ClassTransient, Err: "reload batch"}
	}
	if b.Counts.Pending+b.Counts.Submitted == 0 {
		err := h.cfg.Store.SetBatchState(ctx, b.ID, []string{store.BatchRunning, store.BatchCanceling}, store.BatchDone, now)
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return job.Outcome{Class: job.ClassTransient, Err: "record batch done"}
		}
		return h.done(b)
	}
	delay := h.cfg.PollInterval
	if !p.wait.IsZero() {
		delay = min(max(p.wait.Sub(now), time.Second), delay)
	}
	// A 429 on a create pauses the submit key (shared by every node), not
	// only this chunk: the intake's prediction (the key's wait) sees it, and
	// other batches' submissions on the key wait too.
	return job.Outcome{Class: job.ClassPending, RetryAfter: delay, PauseKeyFor: p.refusedFor}
}

func (h *Handler) stage(name string) {
	crashpoint.Hit(name)
	if h.cfg.Stage != nil {
		h.cfg.Stage(name)
	}
}

func (h *Handler) done(b *store.Batch) job.Outcome {
	res, _ := json.Marshal(b.Counts)
	return job.Outcome{Class: job.ClassSuccess, Result: res}
}

func permanent(msg string) job.Outcome {
	return job.Outcome{Class: job.ClassPermanent, Reason: job.ReasonPermanentError, Err: msg}
}

// safeErr bounds an error for the attempt history; provider and store
// errors name ids and statuses, never content.
func safeErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// items returns the batch's items in state (all when empty).
func (p *pass) items(ctx context.Context, state string) ([]store.BatchItem, error) {
	var out []store.BatchItem
	after := ""
	for {
		page, err := p.h.cfg.Store.BatchItems(ctx, store.BatchItemParams{BatchID: p.b.ID, State: state, After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out, nil
		}
		after = page[len(page)-1].CustomID
	}
}

// settlement is one guarded item write of a pass, and the item it is for.
type settlement struct {
	it store.BatchItem
	p  store.SettleBatchItemParams
}

// settlement returns the guarded write that moves it (from the state and
// chunk it was read in) to state to.
func (p *pass) settlement(it store.BatchItem, to, disposition, reason string, result json.RawMessage) settlement {
	return settlement{it: it, p: store.SettleBatchItemParams{BatchID: p.b.ID, CustomID: it.CustomID, From: it.State,
		ChunkKey: it.ChunkKey, To: to, Disposition: disposition, Reason: reason, Result: result, Now: p.now}}
}

// settle applies one guarded item write and wakes the item's review when
// the item became final.
func (p *pass) settle(ctx context.Context, it store.BatchItem, to, disposition, reason string, result json.RawMessage) error {
	return p.settleGroup(ctx, []settlement{p.settlement(it, to, disposition, reason, result)})
}

// settleGroup applies a group of guarded item writes in one store write
// and then wakes, once each, the reviews of the items that became final:
// after the write, so an aggregation never looks before the items it was
// woken for are durable.
//
// Once per group, not once per pass: a review whose items straddle two
// groups may be aggregated between them (the first group's wake-up),
// seeing its later items still open, and decide nothing; only a wake-up
// after the group that made its last item final finds it ready. Woken
// once per pass, such a review waited for the engine's next full sweep
// walk (every 15th sweep pass, ~30 s by default), since the passes in
// between look only at parts that are jobs. So a review is woken at most
// once more per group boundary it straddles.
func (p *pass) settleGroup(ctx context.Context, group []settlement) error {
	if len(group) == 0 {
		return nil
	}
	clear(p.woken)
	p.h.cfg.Yield(ctx) // each group is a piece of batch-lane work
	ps := make([]store.SettleBatchItemParams, len(group))
	for i, g := range group {
		ps[i] = g.p
	}
	applied, err := p.h.cfg.Store.SettleBatchItems(ctx, ps)
	if err != nil {
		return fmt.Errorf("settle %d items from %s: %w", len(group), group[0].it.CustomID, err)
	}
	for i, ok := range applied {
		// An extraction item has no review to wake: its result is
		// published on the item itself by this write.
		if id := group[i].it.JobID; ok && id != "" && store.ItemFinal(group[i].p.To) && !p.woken[id] {
			p.woken[id] = true
			p.h.cfg.Wake(id)
		}
	}
	return nil
}

// settleAll applies writes, Config.SettleGroup per store write, calling
// stage (when named) between two groups.
func (p *pass) settleAll(ctx context.Context, writes []settlement, stage string) error {
	for from := 0; from < len(writes); from += p.h.cfg.SettleGroup {
		if from > 0 && stage != "" {
			p.h.stage(stage)
		}
		if err := p.settleGroup(ctx, writes[from:min(from+p.h.cfg.SettleGroup, len(writes))]); err != nil {
			return err
		}
	}
	return nil
}

// requeue returns the write that sends an item back to pending with its
// reason while it has attempts left, and ends it failed otherwise.
func (p *pass) requeue(it store.BatchItem, disposition, reason string) settlement {
	if it.Attempts >= p.b.MaxAttempts {
		return p.settlement(it, store.ItemFailed, disposition, ReasonAttempts+":"+reason, nil)
	}
	return p.settlement(it, store.ItemPending, disposition, reason, nil)
}

// runSubmit: cancel or expire pending items, plan the rest into chunks,
// and move planned and uploaded chunks on (upload, create, find, cancel).
func (p *pass) runSubmit(ctx context.Context) error {
	pending, err := p.items(ctx, store.ItemPending)
	if err != nil {
		return err
	}
	var send []store.BatchItem
	var ends []settlement
	for _, it := range pending {
		switch {
		case p.b.State == store.BatchCanceling:
			ends = append(ends, p.settlement(it, store.ItemCanceled, string(llmbatch.DispCanceled), ReasonCanceled, nil))
		case p.now.Add(p.h.cfg.MinTurnaround).After(p.b.Deadline):
			ends = append(ends, p.settlement(it, store.ItemFailed, string(llmbatch.DispFailed), ReasonDeadline, nil))
		case it.Attempts >= p.b.MaxAttempts:
			ends = append(ends, p.settlement(it, store.ItemFailed, it.Disposition, ReasonAttempts+":"+it.Reason, nil))
		default:
			send = append(send, it)
		}
	}
	if err := p.settleAll(ctx, ends, ""); err != nil {
		return err
	}
	chunks, err := p.h.cfg.Store.BatchChunks(ctx, p.b.ID)
	if err != nil {
		return err
	}
	if len(send) > 0 {
		if err := p.plan(ctx, send, len(chunks)); err != nil {
			return err
		}
		if chunks, err = p.h.cfg.Store.BatchChunks(ctx, p.b.ID); err != nil {
			return err
		}
	}
	return p.stepChunks(ctx, chunks, []llmbatch.State{llmbatch.StatePlanned, llmbatch.StateUploaded})
}

// plan cuts pending items into chunks by the provider's limits and records
// each chunk with its items in one guarded write.
func (p *pass) plan(ctx context.Context, pending []store.BatchItem, existing int) error {
	reqs := make([]llmbatch.Item, 0, len(pending))
	byID := make(map[string]store.BatchItem, len(pending))
	unbuilt := make([]store.BatchItem, 0, len(pending))
	for _, it := range pending {
		if _, ok := p.built[it.CustomID]; !ok {
			unbuilt = append(unbuilt, it)
		}
	}
	// The items' read was one piece; their objects' read and every
	// buildPiece requests built are one each: a 1,000-item pass in one
	// stretch was where the slowest interactive reviews under a sweep
	// waited (docs/benchmarks.md, "Session 26 (s26h2)"), and the batch
	// pacer can rest a handler only between pieces.
	p.h.cfg.Yield(ctx)
	if err := p.prefetch(ctx, unbuilt); err != nil {
		return err
	}
	for i, it := range pending {
		if i%buildPiece == 0 {
			p.h.cfg.Yield(ctx)
		}
		r, err := p.request(ctx, it)
		if err != nil {
			if errors.Is(err, errBadItem) {
				if err := p.settle(ctx, it, store.ItemFailed, string(llmbatch.DispFailed), p.badObject(), nil); err != nil {
					return err
				}
				continue
			}
			return err
		}
		reqs = append(reqs, r)
		byID[it.CustomID] = it
	}
	if len(reqs) == 0 {
		return nil
	}
	// Sizing the requests (an encoding each) goes in pieces too, and
	// recording the chunks is a piece of its own.
	sized := 0
	size := func(it llmbatch.Item) (int64, error) {
		if sized%buildPiece == 0 {
			p.h.cfg.Yield(ctx)
		}
		sized++
		return p.e.Batch.EncodedSize(it)
	}
	parts, rejected, err := llmbatch.Split(reqs, p.e.Batch.Limits(), size)
	p.h.cfg.Yield(ctx)
	if err != nil {
		return err
	}
	for _, r := range rejected {
		if err := p.settle(ctx, byID[r.CustomID], store.ItemFailed, string(llmbatch.DispFailed), r.Reason, nil); err != nil {
			return err
		}
	}
	for i, part := range parts {
		ids := make([]string, len(part))
		for k, it := range part {
			ids[k] = it.CustomID
		}
		c := llmbatch.NewChunk(p.b.ID+"-"+strconv.Itoa(existing+i), p.e.Batch.Name(), ids)
		rec, err := json.Marshal(c)
		if err != nil {
			return err
		}
		err = p.h.cfg.Store.PlanBatchChunk(ctx, store.BatchChunk{Key: c.Key, BatchID: p.b.ID, State: string(c.State), Record: rec,
			UpdatedAt: p.now}, ids)
		if err != nil {
			return fmt.Errorf("plan chunk %s: %w", c.Key, err) // another pass planned first; the next pass steps its chunk
		}
	}
	return nil
}

// buildPiece is how many items the batch lane handles between two calls
// of Config.Yield (a submission's requests built or sized, a collection's
// answers checked, a manifest's reviews planned): ~1 ms of CPU on this
// project's 2-core machine, a few times an interactive review's own CPU
// work. It is the providers' piece too (llmbatch.YieldPiece), so one
// size holds for the whole lane.
const buildPiece = llmbatch.YieldPiece

// pieceEnds reports whether item i starts a new piece: i is a positive
// multiple of buildPiece, so a caller yields between pieces, never before
// the first.
func pieceEnds(i int) bool { return i > 0 && i%buildPiece == 0 }

// errBadItem marks an item whose part object is gone or does not parse.
var errBadItem = errors.New("bad part object")

// part loads and parses an item's part text.
func (p *pass) part(ctx context.Context, it store.BatchItem) (*diff.Diff, error) {
	obj, err := p.input(ctx, itemObject(it), it.ObjectID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadItem
	} else if err != nil {
		return nil, err
	}
	d, err := diff.Parse(obj.Body)
	if err != nil {
		return nil, errBadItem
	}
	return d, nil
}

// itemObject is the kind of a review item's part text: the review's diff
// object when the item names its review (ObjectID = JobID: a part that is
// the whole diff, pipeline.PartArgs.WholeDiff), else its part object.
func itemObject(it store.BatchItem) string {
	if it.ObjectID == it.JobID {
		return pipeline.ObjectDiff
	}
	return pipeline.ObjectPart
}

// inputKind is the kind of the pass's items' input objects.
func (p *pass) inputKind() string {
	if p.sum.Extracting() {
		return ObjectExtraction
	}
	return pipeline.ObjectPart
}

// prefetch reads the input objects of items in a few statements
// (Store.GetObjects), for part and extraction to take: one GetObject per
// item made a chunk's pass a thousand statements in a row, each with the
// cancellation watchers the SQL drivers start per statement (two
// goroutines), and those queued by the hundred in the run queues the
// interactive lane's goroutines wait in (docs/benchmarks.md, "Session 21
// (s21h4)"). An extraction item naming another batch's object is left
// out: extraction refuses it unread.
func (p *pass) prefetch(ctx context.Context, items []store.BatchItem) error {
	// By kind: a review pass's items read part objects or (whole-diff
	// parts) diff objects.
	byKind := map[string][]string{}
	for _, it := range items {
		kind := p.inputKind()
		if p.sum.Extracting() {
			if it.ObjectID != p.b.ID+"/"+it.CustomID {
				continue
			}
		} else {
			kind = itemObject(it)
		}
		byKind[kind] = append(byKind[kind], it.ObjectID)
	}
	for kind, ids := range byKind {
		got, err := p.h.cfg.Store.GetObjects(ctx, kind, ids)
		if err != nil {
			return err
		}
		if p.inputs == nil {
			p.inputs = make(map[inputKey]*store.Object, len(items))
		}
		for _, id := range ids {
			if o, ok := got[id]; ok {
				p.inputs[inputKey{kind, id}] = &o
			} else {
				p.inputs[inputKey{kind, id}] = nil
			}
		}
	}
	return nil
}

// inputKey names a prefetched input object.
type inputKey struct{ kind, id string }

// input returns an item's input object of kind: the one prefetch read
// (once: it is then forgotten), or one read of its own.
func (p *pass) input(ctx context.Context, kind, id string) (store.Object, error) {
	if o, ok := p.inputs[inputKey{kind, id}]; ok {
		delete(p.inputs, inputKey{kind, id})
		if o == nil {
			return store.Object{}, store.ErrNotFound
		}
		return *o, nil
	}
	return p.h.cfg.Store.GetObject(ctx, kind, id)
}

// request builds an item's provider request: the same prompt and the same
// structured-output schema an interactive part gets. The answer is still
// validated (sink.succeeded): a provider that ignored the schema cannot
// make a bad answer pass.
func (p *pass) request(ctx context.Context, it store.BatchItem) (llmbatch.Item, error) {
	if r, ok := p.built[it.CustomID]; ok {
		return r, nil
	}
	r, err := p.build(ctx, it)
	if err != nil {
		return llmbatch.Item{}, err
	}
	if p.built == nil {
		p.built = map[string]llmbatch.Item{}
	}
	p.built[it.CustomID] = r
	return r, nil
}

// build is request without the pass's memory.
func (p *pass) build(ctx context.Context, it store.BatchItem) (llmbatch.Item, error) {
	if p.sum.Extracting() {
		return p.extractionRequest(ctx, it)
	}
	d, err := p.part(ctx, it)
	if err != nil {
		return llmbatch.Item{}, err
	}
	prof := p.e.Profile.WithDefaults()
	system, user := provider.Prompt(provider.Request{Part: d, Depth: provider.Depth(p.sum.Depth)})
	return llmbatch.Item{CustomID: it.CustomID, Request: llmbatch.Request{Model: prof.Model, System: system, Prompt: user,
		MaxTokens: int64(prof.MaxOutputTokens), Format: p.h.format}}, nil
}

// runCollect: cancel provider batches of a cancelled or overdue batch, poll
// the rest, and collect and deliver the ended ones.
func (p *pass) runCollect(ctx context.Context) error {
	chunks, err := p.h.cfg.Store.BatchChunks(ctx, p.b.ID)
	if err != nil {
		return err
	}
	if err := p.stepChunks(ctx, chunks, []llmbatch.State{llmbatch.StateSubmitted, llmbatch.StateInProgress, llmbatch.StateResultsReady}); err != nil {
		return err
	}
	if p.now.After(p.b.Deadline.Add(p.h.cfg.GiveUpAfter)) {
		// The provider could neither finish nor cancel in time: end what
		// is still out, so the batch reports instead of hanging.
		out, err := p.items(ctx, store.ItemSubmitted)
		if err != nil {
			return err
		}
		ends := make([]settlement, len(out))
		for i, it := range out {
			ends[i] = p.settlement(it, store.ItemFailed, string(llmbatch.DispFailed), ReasonDeadline, nil)
		}
		return p.settleAll(ctx, ends, "")
	}
	return nil
}

// stepChunks steps every chunk in one of states until it needs to wait or
// leaves those states (so a chunk the submit pass created is left to the
// collect pass, and the other way round).
func (p *pass) stepChunks(ctx context.Context, chunks []store.BatchChunk, states []llmbatch.State) error {
	for _, sc := range chunks {
		if !slices.Contains(states, llmbatch.State(sc.State)) {
			continue
		}
		p.h.cfg.Yield(ctx) // each chunk's step is a piece of batch-lane work
		var c llmbatch.Chunk
		if err := json.Unmarshal(sc.Record, &c); err != nil {
			return fmt.Errorf("chunk %s: record does not decode: %w", sc.Key, err)
		}
		if p.b.State == store.BatchCanceling || p.now.After(p.b.Deadline) {
			c = c.RequestCancel()
		}
		items := &chunkItems{p: p, c: c}
		j := &journal{st: p.h.cfg.Store, batch: p.b.ID, prev: sc.State, now: p.now}
		d := &llmbatch.Driver{Provider: p.e.Batch, Journal: j, Sink: &sink{p: p, items: items},
			PollInterval: p.h.cfg.PollInterval}
		reqs, err := p.requests(ctx, c, items)
		if err != nil {
			return err
		}
		// An upload encodes the chunk's request file and a collection
		// decodes its results in pieces, with Config.Yield between them
		// (llmbatch.WithYield): each was one stretch of tens of ms.
		stepCtx := llmbatch.WithYield(ctx, p.h.cfg.Yield)
		for range 8 { // bounded: a pass never spins
			var a llmbatch.Action
			refusals := c.Refusals
			c, a, err = d.Step(stepCtx, p.now, c, reqs)
			if err != nil {
				return fmt.Errorf("chunk %s: %s: %w", c.Key, a, err)
			}
			if c.Refusals > refusals && !c.NotBefore.IsZero() {
				p.refusedFor = max(p.refusedFor, c.NotBefore.Sub(p.now))
			}
			switch {
			case a == llmbatch.ActionCreate && c.State == llmbatch.StateSubmitted:
				p.h.stage(StageSubmitted)
			case a == llmbatch.ActionPoll && c.State == llmbatch.StateInProgress:
				p.h.stage(StageInProgress)
			}
			if a == llmbatch.ActionWait || a == llmbatch.ActionDone || !slices.Contains(states, c.State) {
				break
			}
		}
		if c.State != llmbatch.StateReconciled && !c.NotBefore.IsZero() && (p.wait.IsZero() || c.NotBefore.Before(p.wait)) {
			p.wait = c.NotBefore
		}
	}
	return nil
}

// chunkItems are a chunk's items that are still in it, read when a step
// first needs them (an upload or create builds their requests, a
// delivery settles them) and once per pass: a pass that only polls a
// chunk, as most passes of a running provider batch do, reads none. Each
// pass read all of them, every submitted item of the batch, whatever it
// then did (docs/benchmarks.md, "Session 23 (s23h3)").
type chunkItems struct {
	p     *pass
	c     llmbatch.Chunk
	items map[string]store.BatchItem // nil until read
}

// get returns the chunk's items by custom_id.
func (ci *chunkItems) get(ctx context.Context) (map[string]store.BatchItem, error) {
	if ci.items != nil {
		return ci.items, nil
	}
	out, err := ci.p.items(ctx, store.ItemSubmitted)
	if err != nil {
		return nil, err
	}
	m := make(map[string]store.BatchItem, len(ci.c.CustomIDs))
	for _, it := range out {
		if it.ChunkKey == ci.c.Key {
			m[it.CustomID] = it
		}
	}
	ci.items = m
	return m, nil
}

// requests builds the chunk's provider requests, in CustomIDs order, when
// the next step sends them (upload or create); nil otherwise.
func (p *pass) requests(ctx context.Context, c llmbatch.Chunk, lazy *chunkItems) ([]llmbatch.Item, error) {
	if a := c.Next(p.now, p.e.Batch.NeedsUpload()); a != llmbatch.ActionUpload && a != llmbatch.ActionCreate {
		return nil, nil
	}
	items, err := lazy.get(ctx)
	if err != nil {
		return nil, err
	}
	var unbuilt []store.BatchItem // a chunk planned by an earlier pass
	for _, id := range c.CustomIDs {
		if _, built := p.built[id]; !built {
			if it, ok := items[id]; ok {
				unbuilt = append(unbuilt, it)
			}
		}
	}
	if err := p.prefetch(ctx, unbuilt); err != nil {
		return nil, err
	}
	reqs := make([]llmbatch.Item, 0, len(c.CustomIDs))
	for _, id := range c.CustomIDs {
		it, ok := items[id]
		if !ok {
			return nil, fmt.Errorf("chunk %s: item %s is no longer in it", c.Key, id)
		}
		r, err := p.request(ctx, it)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
	}
	return reqs, nil
}

// journal saves chunk records, each guarded on the state it was read in.
type journal struct {
	st    store.Store
	batch string
	prev  string
	now   time.Time
}

func (j *journal) Save(ctx context.Context, c llmbatch.Chunk) error {
	rec, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := j.st.SaveBatchChunk(ctx, store.BatchChunk{Key: c.Key, BatchID: j.batch, State: string(c.State), Record: rec,
		UpdatedAt: j.now}, j.prev); err != nil {
		return err
	}
	j.prev = string(c.State)
	return nil
}

// sink settles a chunk's items from its reconciliation, Config.SettleGroup
// items per store write. It is idempotent per custom_id: each write is
// guarded on the item still being in the chunk, so a redelivery after a
// crash (after some groups were written) settles nothing twice.
type sink struct {
	p     *pass
	items *chunkItems
}

func (s *sink) Deliver(ctx context.Context, c llmbatch.Chunk, rep llmbatch.Report) error {
	p := s.p
	p.h.stage(StageDownloaded)
	items, err := s.items.get(ctx)
	if err != nil {
		return err
	}
	overdue := p.now.After(p.b.Deadline) && p.b.State != store.BatchCanceling
	writes := make([]settlement, 0, len(items))
	var answered []store.BatchItem // their answers are checked against their inputs
	for _, o := range rep.Outcomes {
		if it, ok := items[o.CustomID]; ok && o.Disposition == llmbatch.DispSucceeded {
			answered = append(answered, it)
		}
	}
	if err := p.prefetch(ctx, answered); err != nil {
		return err
	}
	for i, o := range rep.Outcomes {
		if pieceEnds(i) {
			// Checking a thousand answers against their parts was one
			// stretch of a collection no pacer could rest.
			p.h.cfg.Yield(ctx)
		}
		it, ok := items[o.CustomID]
		if !ok {
			continue // settled by an earlier delivery of this report
		}
		w, err := s.settlement(ctx, it, o, overdue)
		if err != nil {
			return err
		}
		writes = append(writes, w)
	}
	return p.settleAll(ctx, writes, StagePartlyDelivered)
}

// settlement is the write an outcome makes of its item.
func (s *sink) settlement(ctx context.Context, it store.BatchItem, o llmbatch.Outcome, overdue bool) (settlement, error) {
	p := s.p
	switch o.Disposition {
	case llmbatch.DispSucceeded:
		return s.succeeded(ctx, it, o)
	case llmbatch.DispFailed:
		return p.settlement(it, store.ItemFailed, string(o.Disposition), o.Reason, nil), nil
	case llmbatch.DispCanceled:
		reason := o.Reason
		if overdue {
			reason = ReasonDeadline
		}
		return p.settlement(it, store.ItemCanceled, string(o.Disposition), reason, nil), nil
	}
	return p.requeue(it, string(o.Disposition), o.Reason), nil
}

// succeeded validates an answer exactly as an interactive part's
// (pipeline.CheckOutput) and returns the write that records it; an answer
// that fails the schema is requeued while the item has attempts, like a
// part's schema budget.
func (s *sink) succeeded(ctx context.Context, it store.BatchItem, o llmbatch.Outcome) (settlement, error) {
	p := s.p
	if p.sum.Extracting() {
		return s.extracted(ctx, it, o)
	}
	d, err := p.part(ctx, it)
	if errors.Is(err, errBadItem) {
		return p.settlement(it, store.ItemFailed, string(llmbatch.DispFailed), "bad_part_object", nil), nil
	} else if err != nil {
		return settlement{}, err
	}
	usage := provider.Usage{InputTokens: o.Result.InputTokens, OutputTokens: o.Result.OutputTokens}
	res, err := pipeline.CheckOutput(d, o.Result.Body, p.sum.Depth, p.e.Profile.Name, usage)
	if err != nil {
		// The error names the kind of failure, never the output.
		return p.requeue(it, string(llmbatch.DispRequeue), ReasonInvalidOutput), nil
	}
	body, err := json.Marshal(res)
	if err != nil {
		return settlement{}, err
	}
	return p.settlement(it, store.ItemSucceeded, string(o.Disposition), o.Reason, body), nil
}

// badObject is the reason of an item whose input object is gone or does
// not decode.
func (p *pass) badObject() string {
	if p.sum.Extracting() {
		return "bad_extraction_object"
	}
	return "bad_part_object"
}

// extraction loads an extraction item's request object. The object must
// be the one its batch stored for that custom_id: an item cannot be made
// to read another batch's (another tenant's) input.
func (p *pass) extraction(ctx context.Context, it store.BatchItem) (extractionObject, error) {
	var x extractionObject
	if it.ObjectID != p.b.ID+"/"+it.CustomID {
		return x, errBadItem
	}
	obj, err := p.input(ctx, ObjectExtraction, it.ObjectID)
	if errors.Is(err, store.ErrNotFound) {
		return x, errBadItem
	} else if err != nil {
		return x, err
	}
	if err := json.Unmarshal(obj.Body, &x); err != nil || x.Input == "" || len(x.Schema) == 0 {
		return x, errBadItem
	}
	return x, nil
}

// extractionRequest builds an extraction item's provider request: its
// instruction as the system prompt, its input as the user message, and its
// schema as structured output (OpenAI response_format json_schema strict;
// Anthropic output_config.format).
func (p *pass) extractionRequest(ctx context.Context, it store.BatchItem) (llmbatch.Item, error) {
	x, err := p.extraction(ctx, it)
	if err != nil {
		return llmbatch.Item{}, err
	}
	var schema map[string]any
	if err := json.Unmarshal(x.Schema, &schema); err != nil {
		return llmbatch.Item{}, errBadItem
	}
	prof := p.e.Profile.WithDefaults()
	return llmbatch.Item{CustomID: it.CustomID, Request: llmbatch.Request{Model: prof.Model, System: x.System, Prompt: x.Input,
		MaxTokens: int64(prof.MaxOutputTokens), Format: &llmbatch.Format{Name: ExtractionSchemaName, Schema: schema}}}, nil
}

// extracted validates an extraction answer against its item's schema and
// returns the write that publishes it on the item; an answer that is not
// JSON or fails the schema is quarantined as a review's is: requeued with
// the reason invalid_output:<malformed|schema|too_large> while the item
// has attempts, then failed attempts_exhausted:<that reason>. The output
// itself is never logged or kept.
func (s *sink) extracted(ctx context.Context, it store.BatchItem, o llmbatch.Outcome) (settlement, error) {
	p := s.p
	x, err := p.extraction(ctx, it)
	if errors.Is(err, errBadItem) {
		return p.settlement(it, store.ItemFailed, string(llmbatch.DispFailed), p.badObject(), nil), nil
	} else if err != nil {
		return settlement{}, err
	}
	sch, err := p.schemas.get(x.Schema)
	if err != nil {
		return p.settlement(it, store.ItemFailed, string(llmbatch.DispFailed), p.badObject(), nil), nil
	}
	out, err := checkExtraction(sch, o.Result.Body)
	if err != nil {
		return p.requeue(it, string(llmbatch.DispRequeue), ReasonInvalidOutput+":"+err.Error()), nil
	}
	body, err := json.Marshal(ExtractionResult{Output: out, Provider: p.e.Profile.Name, InputTokens: o.Result.InputTokens,
		OutputTokens: o.Result.OutputTokens})
	if err != nil {
		return settlement{}, err
	}
	return p.settlement(it, store.ItemSucceeded, string(o.Disposition), o.Reason, body), nil
}
