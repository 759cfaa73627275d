package llmbatch

import (
	"fmt"
	"time"
)

// State is where one provider batch (a chunk of a manifest) stands. The
// states are persisted as these strings.
type State string

const (
	// StatePlanned: the chunk's key, provider and custom_ids are recorded
	// (this record is the intent); nothing has been sent. For a provider
	// with files, the next call is Upload, else Create.
	StatePlanned State = "planned"
	// StateUploaded: the input file is at the provider (FileID); the next
	// call is Create. A crash before this is recorded costs an orphaned
	// file (OpenAI deletes batch files after 30 days), nothing else.
	StateUploaded State = "uploaded"
	// StateSubmitted: the provider batch exists (BatchID); next, Poll.
	StateSubmitted State = "submitted"
	// StateInProgress: a poll saw the batch running; poll again at NotBefore.
	StateInProgress State = "in_progress"
	// StateResultsReady: a poll saw the batch ended; next, Collect and
	// deliver. Collect is idempotent, so a crash here repeats it.
	StateResultsReady State = "results_ready"
	// StateReconciled: every item has a disposition and the report was
	// delivered; the chunk is final.
	StateReconciled State = "reconciled"
)

// States lists every State in lifecycle order.
var States = []State{StatePlanned, StateUploaded, StateSubmitted, StateInProgress, StateResultsReady, StateReconciled}

// Action is the call a chunk needs next ([Chunk.Next]).
type Action string

const (
	// ActionUpload: upload the items as an input file.
	ActionUpload Action = "upload"
	// ActionCreate: create the provider batch (record the intent first).
	ActionCreate Action = "create"
	// ActionFind: a create may have happened before a crash; look for it.
	ActionFind Action = "find"
	// ActionPoll: poll the batch.
	ActionPoll Action = "poll"
	// ActionCancel: send the requested cancel.
	ActionCancel Action = "cancel"
	// ActionCancelLocal: cancelled before any provider batch exists; every
	// item ends canceled without a call.
	ActionCancelLocal Action = "cancel_local"
	// ActionCollect: download the results and reconcile.
	ActionCollect Action = "collect"
	// ActionWait: nothing before NotBefore.
	ActionWait Action = "wait"
	// ActionDone: the chunk is reconciled.
	ActionDone Action = "done"
)

// Chunk is the durable record of one provider batch. It is a plain value:
// persist it (as JSON) after every transition, and rebuild the driver's
// view from the last record after a crash. Transitions are methods that
// return the new value and refuse to apply in the wrong state.
type Chunk struct {
	// Key names the chunk, unique across the deployment (e.g. the manifest
	// id and a chunk number); it is the OpenAI upload's file name and
	// batch metadata.
	Key string `json:"key"`
	// Provider is the Provider's Name.
	Provider string `json:"provider"`
	// CustomIDs are the chunk's items, in submission order.
	CustomIDs []string `json:"custom_ids"`
	// State is where the chunk stands.
	State State `json:"state"`
	// FileID is the uploaded input file (OpenAI), once uploaded.
	FileID string `json:"file_id,omitempty"`
	// BatchID is the provider's batch id, once created.
	BatchID string `json:"batch_id,omitempty"`
	// CreateStartedAt, when set, says a Create was sent and its answer not
	// recorded: the provider may hold a batch this record does not name,
	// so the next action is Find, never a blind second Create.
	CreateStartedAt time.Time `json:"create_started_at,omitzero"`
	// NotBefore is the earliest time of the next call (a 429's delay, the
	// poll interval).
	NotBefore time.Time `json:"not_before,omitzero"`
	// Refusals counts 429s on upload and create.
	Refusals int `json:"refusals,omitempty"`
	// CancelRequested records a cancel asked for by the operator;
	// CancelSent that the provider accepted it.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	CancelSent      bool `json:"cancel_sent,omitempty"`
	// Status is the last polled status.
	Status Status `json:"status"`
	// Summary is the reconciliation's counts, once reconciled.
	Summary *Summary `json:"summary,omitempty"`
	// SubmittedAt is when the create that made the provider batch was
	// sent (its intent time), and EndedAt when a poll first saw the batch
	// ended: together, the provider's turnaround, which the batch lane's
	// intake learns from (Turnaround).
	SubmittedAt time.Time `json:"submitted_at,omitzero"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
}

// Turnaround is how long the provider took over the chunk's batch, from
// its create to the poll that saw it end; ok is false unless the batch
// completed or expired (a cancelled or failed batch says nothing about how
// long the provider takes) and both times are recorded.
func (c Chunk) Turnaround() (time.Duration, bool) {
	if c.SubmittedAt.IsZero() || c.EndedAt.IsZero() || !c.EndedAt.After(c.SubmittedAt) ||
		(c.Status.End != EndCompleted && c.Status.End != EndExpired) {
		return 0, false
	}
	return c.EndedAt.Sub(c.SubmittedAt), true
}

// NewChunk returns a planned chunk.
func NewChunk(key, provider string, customIDs []string) Chunk {
	return Chunk{Key: key, Provider: provider, CustomIDs: customIDs, State: StatePlanned}
}

// Next is the call the chunk needs at now. needsUpload is the provider's
// NeedsUpload.
func (c Chunk) Next(now time.Time, needsUpload bool) Action {
	if c.State == StateReconciled {
		return ActionDone
	}
	if now.Before(c.NotBefore) {
		return ActionWait
	}
	switch c.State {
	case StatePlanned, StateUploaded:
		switch {
		case !c.CreateStartedAt.IsZero():
			return ActionFind
		case c.CancelRequested:
			return ActionCancelLocal
		case c.State == StatePlanned && needsUpload:
			return ActionUpload
		}
		return ActionCreate
	case StateSubmitted, StateInProgress:
		if c.CancelRequested && !c.CancelSent {
			return ActionCancel
		}
		return ActionPoll
	case StateResultsReady:
		return ActionCollect
	}
	return ActionDone
}

func (c Chunk) want(op string, states ...State) error {
	for _, s := range states {
		if c.State == s {
			return nil
		}
	}
	return fmt.Errorf("chunk %s: %s in state %s", c.Key, op, c.State)
}

// Uploaded records the input file: planned -> uploaded.
func (c Chunk) Uploaded(fileID string) (Chunk, error) {
	if err := c.want("uploaded", StatePlanned); err != nil {
		return c, err
	}
	if fileID == "" {
		return c, fmt.Errorf("chunk %s: uploaded: empty file id", c.Key)
	}
	c.State, c.FileID, c.NotBefore = StateUploaded, fileID, time.Time{}
	return c, nil
}

// BeginCreate records the intent to create, to be persisted before the
// call. The first attempt's time is kept so that Find looks back far
// enough.
func (c Chunk) BeginCreate(now time.Time, needsUpload bool) (Chunk, error) {
	states := []State{StatePlanned}
	if needsUpload {
		states = []State{StateUploaded}
	}
	if err := c.want("begin create", states...); err != nil {
		return c, err
	}
	if c.CreateStartedAt.IsZero() {
		c.CreateStartedAt = now
	}
	return c, nil
}

// Created records the provider batch: -> submitted.
func (c Chunk) Created(batchID string) (Chunk, error) {
	if err := c.want("created", StatePlanned, StateUploaded); err != nil {
		return c, err
	}
	if batchID == "" {
		return c, fmt.Errorf("chunk %s: created: empty batch id", c.Key)
	}
	c.SubmittedAt = c.CreateStartedAt
	c.State, c.BatchID, c.CreateStartedAt, c.NotBefore = StateSubmitted, batchID, time.Time{}, time.Time{}
	return c, nil
}

// NotFound records that Find found no batch: the create never reached the
// provider, so the next action is Create again.
func (c Chunk) NotFound() (Chunk, error) {
	if err := c.want("not found", StatePlanned, StateUploaded); err != nil {
		return c, err
	}
	c.CreateStartedAt = time.Time{}
	return c, nil
}

// RateLimited records a 429 on Upload or Create: nothing was created, so
// the create intent is cleared, and no call is made before now+delay.
func (c Chunk) RateLimited(now time.Time, delay time.Duration) (Chunk, error) {
	if err := c.want("rate limited", StatePlanned, StateUploaded); err != nil {
		return c, err
	}
	c.CreateStartedAt, c.NotBefore = time.Time{}, now.Add(delay)
	c.Refusals++
	return c, nil
}

// Polled records a poll: -> in_progress, or results_ready once the batch
// ended. A running batch is polled again after interval.
func (c Chunk) Polled(st Status, now time.Time, interval time.Duration) (Chunk, error) {
	if err := c.want("polled", StateSubmitted, StateInProgress); err != nil {
		return c, err
	}
	c.Status = st
	if st.Ended() {
		c.State, c.NotBefore, c.EndedAt = StateResultsReady, time.Time{}, now
		return c, nil
	}
	c.State, c.NotBefore = StateInProgress, now.Add(interval)
	return c, nil
}

// RequestCancel records an operator's cancel. It applies in any state but
// changes nothing once the batch ended.
func (c Chunk) RequestCancel() Chunk {
	if c.State != StateResultsReady && c.State != StateReconciled {
		c.CancelRequested = true
	}
	return c
}

// CancelAccepted records that the provider accepted the cancel; polling
// goes on until the batch ends.
func (c Chunk) CancelAccepted(st Status) (Chunk, error) {
	if err := c.want("cancel accepted", StateSubmitted, StateInProgress); err != nil {
		return c, err
	}
	c.CancelSent, c.Status = true, st
	if st.Ended() {
		c.State = StateResultsReady
	}
	return c, nil
}

// Summary is a reconciliation's counts, kept on the reconciled chunk.
type Summary struct {
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Canceled   int `json:"canceled"`
	Requeued   int `json:"requeued"`
	Missing    int `json:"missing"`
	Foreign    int `json:"foreign"`
	Duplicates int `json:"duplicates"`
}

// Reconciled records the delivered report: -> reconciled. It refuses a
// report that does not account for exactly the chunk's items.
func (c Chunk) Reconciled(rep Report) (Chunk, error) {
	if err := c.want("reconciled", StateResultsReady, StatePlanned, StateUploaded); err != nil {
		return c, err
	}
	if c.State != StateResultsReady && (!c.CancelRequested || !c.CreateStartedAt.IsZero()) {
		// Before submission only a cancel ends a chunk, and only when no
		// create may have reached the provider (Find settles that first).
		return c, fmt.Errorf("chunk %s: reconciled in state %s without a settled cancel", c.Key, c.State)
	}
	if err := rep.Check(c.CustomIDs); err != nil {
		return c, fmt.Errorf("chunk %s: %w", c.Key, err)
	}
	s := rep.Summary()
	c.State, c.Summary = StateReconciled, &s
	return c, nil
}
