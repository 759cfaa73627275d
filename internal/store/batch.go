package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Batches is the part of the store contract that holds the batch lane: a
// batch (a manifest of many items submitted to a provider's batch API),
// its items, and its chunks (one provider batch each, the llmbatch.Chunk
// record kept as opaque JSON). None of these methods writes a job: the
// jobs that drive a batch are written by engine.Jobs like every other.
//
// The writes that matter for exactly-once are guarded: an item joins a
// chunk only while it is pending (PlanBatchChunk), a chunk record is
// replaced only from the state it was read in (SaveBatchChunk), and an item
// is settled only from the state and chunk it was read in
// (SettleBatchItem), so that a result delivered twice after a crash
// changes nothing the second time.
type Batches interface {
	// CreateBatch persists a batch and its items (all pending).
	// ErrConflict when the id is taken or a custom_id repeats, and then
	// nothing is written. A single-writer store may write a batch-lane
	// (WithLane) batch of many items in several transactions, so that
	// interactive writes go in between: the batch is then marked Creating
	// until the transaction holding its last item commits, and a failure
	// part-way removes what was written when it can (AbandonBatch is the
	// backstop after a crash). A store writing it in one transaction
	// never shows Creating.
	CreateBatch(ctx context.Context, b *Batch, items []BatchItem) error
	// GetBatch returns one batch with its item counts, or ErrNotFound. A
	// batch still being created is returned with Creating set: its callers
	// treat it as not there yet.
	GetBatch(ctx context.Context, id string) (*Batch, error)
	// ListBatches returns batches matching p, newest (greatest id) first,
	// with their item counts. Batches still being created are left out.
	ListBatches(ctx context.Context, p BatchListParams) ([]*Batch, error)
	// AbandonBatch removes batch id and its items if it is still being
	// created (Creating), and reports whether it did: what a crash
	// between CreateBatch's transactions leaves behind, found by the
	// batch's drivers. A complete batch, or none, is left alone (false).
	AbandonBatch(ctx context.Context, id string) (bool, error)
	// SetBatchState moves a batch to state to, guarded on it being in one
	// of from. ErrConflict when it is not, ErrNotFound when there is none.
	SetBatchState(ctx context.Context, id string, from []string, to string, now time.Time) error
	// BatchItems returns a batch's items matching p in custom_id order.
	BatchItems(ctx context.Context, p BatchItemParams) ([]BatchItem, error)
	// PlanBatchChunk records a planned chunk and moves its items from
	// pending to submitted (naming the chunk, one more attempt each) in one
	// transaction. ErrConflict, and nothing written, when the chunk key
	// exists or any item is not pending.
	PlanBatchChunk(ctx context.Context, c BatchChunk, customIDs []string) error
	// SaveBatchChunk replaces a chunk's state and record, guarded on its
	// stored state being from. ErrConflict when it is not, ErrNotFound when
	// there is no such chunk.
	SaveBatchChunk(ctx context.Context, c BatchChunk, from string) error
	// BatchChunks returns a batch's chunks in key order.
	BatchChunks(ctx context.Context, batchID string) ([]BatchChunk, error)
	// SettleBatchItem applies p to one item if it is still in p.From (and,
	// when p.ChunkKey is set, still in that chunk). It reports whether it
	// applied: false means someone settled the item already, which a
	// redelivery after a crash expects.
	SettleBatchItem(ctx context.Context, p SettleBatchItemParams) (bool, error)
}

// Batch states.
const (
	// BatchRunning: items are being submitted and collected.
	BatchRunning = "running"
	// BatchCanceling: an operator asked for a cancel; pending items end
	// canceled and running provider batches are cancelled.
	BatchCanceling = "canceling"
	// BatchDone: every item is final (succeeded, failed or canceled).
	BatchDone = "done"
)

// Batch item states.
const (
	// ItemPending: waiting to be put into a chunk (new, or requeued).
	ItemPending = "pending"
	// ItemSubmitted: in a chunk (ChunkKey) whose provider batch has not
	// been reconciled.
	ItemSubmitted = "submitted"
	// ItemSucceeded: the answer passed validation; Result holds it.
	ItemSucceeded = "succeeded"
	// ItemFailed: final without an answer; Reason says why.
	ItemFailed = "failed"
	// ItemCanceled: final, cancelled before it ran.
	ItemCanceled = "canceled"
)

// ItemFinal reports whether an item state is final.
func ItemFinal(state string) bool {
	return state == ItemSucceeded || state == ItemFailed || state == ItemCanceled
}

// BatchCounts counts a batch's items by state.
type BatchCounts struct {
	Total     int `json:"total"`
	Pending   int `json:"pending"`
	Submitted int `json:"submitted"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Canceled  int `json:"canceled"`
}

// Add counts n items in state.
func (c *BatchCounts) Add(state string, n int) {
	c.Total += n
	switch state {
	case ItemPending:
		c.Pending += n
	case ItemSubmitted:
		c.Submitted += n
	case ItemSucceeded:
		c.Succeeded += n
	case ItemFailed:
		c.Failed += n
	case ItemCanceled:
		c.Canceled += n
	}
}

// Batch is one manifest in the batch lane, of one tenant in one region.
type Batch struct {
	ID     string
	Tenant string
	Region string
	// Provider is the provider profile the items go to.
	Provider string
	State    string
	// Deadline is when every item must be final; past it the items that
	// are not end with a reason.
	Deadline time.Time
	// MaxAttempts bounds the provider batches one item may go out in.
	MaxAttempts int
	// Summary describes the manifest (counts, options), as JSON; opaque
	// to the store and holding no content.
	Summary json.RawMessage
	// Creating is set on a batch whose items are still being written
	// (CreateBatch in several transactions): not all of them exist yet,
	// and nothing may submit, cancel or show it.
	Creating bool
	// Counts are the items by state, filled by GetBatch and ListBatches.
	Counts    BatchCounts
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Check reports a batch the store must refuse whatever its driver.
func (b *Batch) Check() error {
	switch {
	case b.ID == "" || b.Tenant == "" || b.Region == "" || b.Provider == "":
		return fmt.Errorf("batch: id, tenant, region and provider are required")
	case b.State != BatchRunning && b.State != BatchCanceling && b.State != BatchDone:
		return fmt.Errorf("batch %s: unknown state %q", b.ID, b.State)
	case b.Deadline.IsZero():
		return fmt.Errorf("batch %s: a deadline is required", b.ID)
	case b.MaxAttempts < 1:
		return fmt.Errorf("batch %s: max attempts must be at least 1", b.ID)
	}
	return nil
}

// CheckIn is Check for the store of region, which also refuses a batch
// of another region (each region has its own store).
func (b *Batch) CheckIn(region string) error {
	return checkIn(b.Check(), "batch", b.ID, b.Region, region)
}

// checkIn is a row's CheckIn: the error of its Check, if any, else a
// refusal of a row of region got in the store of region want.
func checkIn(check error, what, id, got, want string) error {
	if check != nil {
		return check
	}
	if got != want {
		return fmt.Errorf("%s %s: region %q does not belong in the %q store", what, id, got, want)
	}
	return nil
}

// BatchItem is one request of a batch, joined to its result on CustomID.
type BatchItem struct {
	BatchID  string
	CustomID string
	// JobID is the job the item belongs to (a review's parent job;
	// empty for a generic extraction item, which belongs to no job), and
	// ObjectID the region object holding its input (a review part).
	JobID    string
	ObjectID string
	// Index orders the item within its job (a part's index).
	Index int
	State string
	// Attempts counts the chunks the item was submitted in.
	Attempts int
	// ChunkKey is the chunk the item is in (submitted) or was last in.
	ChunkKey string
	// Disposition and Reason are the last reconciliation's verdict
	// (llmbatch dispositions and reasons, never content).
	Disposition string
	Reason      string
	// Result is the validated answer of a succeeded item, as JSON.
	Result    json.RawMessage
	UpdatedAt time.Time
}

// BatchChunk is one provider batch of a batch: the llmbatch.Chunk record
// as JSON, and its state beside it for guards and listings.
type BatchChunk struct {
	Key       string
	BatchID   string
	State     string
	Record    json.RawMessage
	UpdatedAt time.Time
}

// NotSaved is SaveBatchChunk's error when its write guarded on from
// changed nothing: ErrNotFound when the chunk does not exist (state ""),
// else ErrConflict naming the state it is in.
func (c BatchChunk) NotSaved(state, from string) error {
	if state == "" {
		return fmt.Errorf("chunk %s: %w", c.Key, ErrNotFound)
	}
	return fmt.Errorf("chunk %s is %s, not %s: %w", c.Key, state, from, ErrConflict)
}

// BatchListParams filters ListBatches.
type BatchListParams struct {
	// Tenant, when set, keeps that tenant's batches only.
	Tenant string
	// State, when set, keeps batches in that state only.
	State string
	// Before is a cursor: only ids less than it (the previous page's last).
	Before string
	Limit  int
}

// BatchItemParams filters BatchItems.
type BatchItemParams struct {
	BatchID string
	// JobID, when set, keeps that job's items only.
	JobID string
	// JobIDs, when not empty, keeps the items of those jobs only (with
	// JobID too, of both): a woken batch group reads the items of its
	// parents, up to 32 reviews, in one statement rather than one per
	// review (docs/benchmarks.md, "Session 41 (s41h2)"). Meant for a few
	// tens of ids: each is a placeholder of the statement.
	JobIDs []string
	// State, when set, keeps items in that state only.
	State string
	// After is a cursor: only custom_ids greater than it.
	After string
	Limit int
}

// SettleBatchItemParams is one guarded item write.
type SettleBatchItemParams struct {
	BatchID  string
	CustomID string
	// From is the state the item must be in.
	From string
	// ChunkKey, when set, is the chunk the item must be in.
	ChunkKey string
	// To is the new state; a requeue is To pending (the chunk is kept as
	// the last one the item was in).
	To          string
	Disposition string
	Reason      string
	Result      json.RawMessage
	Now         time.Time
}
