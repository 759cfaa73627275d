package store

import (
	"context"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

// Derived are the methods of the store contract that both SQL drivers
// build alike around a smaller write of their own: the validation before
// any write, the single-document put over the bulk one, DeclareLimit over
// UpsertLimit, and what a write that changed no row means. A driver embeds
// one, made with NewDerived from its Writes, as it embeds SQLReads; the
// SQL and the transaction stay with the driver.
type Derived struct {
	w Writes
}

// Writes are a driver's side of Derived: each runs its statements in the
// driver's SQL and transaction, on arguments Derived has already checked.
type Writes struct {
	// PutObjects upserts os (at least one, each within MaxObjectBytes).
	PutObjects func(ctx context.Context, os []Object) error
	// PutObjectIf writes o only if the stored body is prev (nil: only if
	// there is none), and returns how many rows it changed (0 or 1).
	PutObjectIf func(ctx context.Context, o Object, prev []byte) (int64, error)
	// DeleteObject deletes a document and returns how many rows it
	// deleted (0 or 1).
	DeleteObject func(ctx context.Context, kind, id string) (int64, error)
	// UpsertLimit creates or reconfigures the limit key of c (valid) at
	// now; declared is "" for UpsertLimit, the configuration's
	// LimitFingerprint for DeclareLimit (see ReconfigureKey). It returns
	// the key's state and whether the change was applied.
	UpsertLimit func(ctx context.Context, c admission.Config, now time.Time, declared string) (admission.State, bool, error)
	// SettleBatchItems applies ps (at least one) as one group of
	// guarded item writes and reports which applied (BatchSettles).
	SettleBatchItems func(ctx context.Context, ps []SettleBatchItemParams) ([]bool, error)
	// Advance moves a job that is not running, p allowed by the state
	// machine (AdvanceParams.Check); see AdvanceTx for its shared part.
	Advance func(ctx context.Context, p AdvanceParams) (*job.Job, error)
}

// NewDerived returns the shared methods over a driver's writes w.
func NewDerived(w Writes) Derived {
	return Derived{w: w}
}

// PutObject stores a document, replacing any previous one (Store.PutObject).
func (d Derived) PutObject(ctx context.Context, o Object) error {
	return d.PutObjects(ctx, []Object{o})
}

// PutObjects stores documents in one transaction (ObjectsBulk.PutObjects).
// A document over MaxObjectBytes refuses the whole put before any write.
func (d Derived) PutObjects(ctx context.Context, os []Object) error {
	if err := CheckObjects(os); err != nil {
		return err
	}
	if len(os) == 0 {
		return nil
	}
	return d.w.PutObjects(ctx, os)
}

// PutObjectIf stores a document only if the stored body is prev (nil: only
// if there is none); otherwise it returns o.Changed() (Store.PutObjectIf).
func (d Derived) PutObjectIf(ctx context.Context, o Object, prev []byte) error {
	if err := o.Check(); err != nil {
		return err
	}
	n, err := d.w.PutObjectIf(ctx, o, prev)
	if err != nil {
		return err
	}
	if n == 0 {
		return o.Changed()
	}
	return nil
}

// DeleteObject removes a document, or returns ErrNotFound when there is
// none (Store.DeleteObject).
func (d Derived) DeleteObject(ctx context.Context, kind, id string) error {
	n, err := d.w.DeleteObject(ctx, kind, id)
	if err == nil && n == 0 {
		return ErrNotFound
	}
	return err
}

// SettleBatchItem applies one guarded item write, a group of one
// (Batches.SettleBatchItem).
func (d Derived) SettleBatchItem(ctx context.Context, p SettleBatchItemParams) (bool, error) {
	applied, err := d.w.SettleBatchItems(ctx, []SettleBatchItemParams{p})
	return err == nil && applied[0], err
}

// SettleBatchItems applies a group of guarded item writes in one
// transaction (BatchSettles.SettleBatchItems); an empty group writes
// nothing.
func (d Derived) SettleBatchItems(ctx context.Context, ps []SettleBatchItemParams) ([]bool, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	return d.w.SettleBatchItems(ctx, ps)
}

// UpsertLimit creates or reconfigures a limit key at now, keeping its live
// state (Store.UpsertLimit; see admission.State.Reconfigure).
func (d Derived) UpsertLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, error) {
	st, _, err := d.upsertLimit(ctx, c, now, "")
	return st, err
}

// DeclareLimit applies a declared configuration unless it is the one last
// applied to the key (Store.DeclareLimit).
func (d Derived) DeclareLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, bool, error) {
	return d.upsertLimit(ctx, c, now, LimitFingerprint(c))
}

func (d Derived) upsertLimit(ctx context.Context, c admission.Config, now time.Time, declared string) (admission.State, bool, error) {
	if err := CheckLimit(c); err != nil {
		return admission.State{}, false, err
	}
	return d.w.UpsertLimit(ctx, c, now, declared)
}

// Advance moves a job that is not running, guarded on its current state
// (Store.Advance); a move the state machine does not allow is refused
// before any write.
func (d Derived) Advance(ctx context.Context, p AdvanceParams) (*job.Job, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	return d.w.Advance(ctx, p)
}

// AdvanceTx is a driver's side of the rest of an advance, after its
// guarded UPDATE of the job's row succeeded, in the same transaction.
type AdvanceTx struct {
	// Group returns the job's group.
	Group func() (int64, error)
	// GroupReady marks the group as having a ready job at now.
	GroupReady func(group int64, now time.Time) error
	// AppendRecord appends r to the job's attempt history.
	AppendRecord func(r job.AttemptRecord) error
	// Publish moves the job, validated by the UPDATE, to published at
	// now as Store.Publish does (AdvanceParams.Publish).
	Publish func(now time.Time) error
	// Get reads the job back.
	Get func() (*job.Job, error)
}

// FinishAdvance is what every driver does after p's guarded UPDATE: a job
// made waiting makes its group ready again (the lease reads ready groups
// only), p.Record, if any, joins the history, a p.Publish records the
// publication, and the job is read back as Advance returns it (not with
// p.Brief: BriefJob).
func FinishAdvance(p AdvanceParams, tx AdvanceTx) (*job.Job, error) {
	if p.To == job.StateWaiting {
		group, err := tx.Group()
		if err != nil {
			return nil, err
		}
		if err := tx.GroupReady(group, p.Now); err != nil {
			return nil, err
		}
	}
	if p.Record.Outcome != "" {
		if err := tx.AppendRecord(p.Record); err != nil {
			return nil, err
		}
	}
	if p.Publish {
		if err := tx.Publish(p.Now); err != nil {
			return nil, err
		}
	}
	if p.Brief {
		return p.BriefJob(), nil
	}
	return tx.Get()
}

// BriefJob is what Advance returns for p when p.Brief is set: its ID and
// the state its write leaves, nothing else.
func (p AdvanceParams) BriefJob() *job.Job {
	st := p.To
	if p.Publish {
		st = job.StatePublished
	}
	return &job.Job{ID: p.ID, State: st}
}
