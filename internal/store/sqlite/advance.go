package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// advance is store.Writes.Advance: the guarded UPDATE, then
// store.FinishAdvance in the same write.
func (s *Store) advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	var out *job.Job
	err := s.write(ctx, s.advanceWrite(p, &out))
	return out, err
}

// AdvanceMany is store.ManyAdvancer's: each advance checked as Derived's
// Advance checks it, all queued for the writer before this waits for the
// first, so that the writer runs them together (one transaction while
// nothing else interrupts them) and one goroutine waits for them all.
func (s *Store) AdvanceMany(ctx context.Context, ps []store.AdvanceParams) ([]*job.Job, []error) {
	outs := make([]*job.Job, len(ps))
	errs := make([]error, len(ps))
	reqs := make([]*writeReq, len(ps))
	for i, p := range ps {
		if errs[i] = p.Check(); errs[i] == nil {
			reqs[i], errs[i] = s.enqueue(ctx, s.advanceWrite(p, &outs[i]))
		}
	}
	for i, r := range reqs {
		if r != nil {
			// Once queued, waited for even if ctx ends (as write does).
			errs[i] = s.await(r)
		}
	}
	return outs, errs
}

// advanceWrite is advance p's write, which sets *out to the job it leaves.
func (s *Store) advanceWrite(p store.AdvanceParams, out **job.Job) func(tx *writeTx) error {
	return func(tx *writeTx) error {
		var finished any
		if p.To.Final() {
			finished = ns(p.Now)
		}
		res, err := s.exec(tx, `UPDATE jobs SET state = ?, reason = ?, result = coalesce(?, result), finished_at = ?,
			eligible_at = CASE WHEN ? = 'waiting' THEN ? ELSE eligible_at END, updated_at = ?
			WHERE id = ? AND state = ?`,
			p.To, p.Reason, nullBytes(p.Result), finished, p.To, ns(p.Now), ns(p.Now), p.ID, p.From)
		if err := s.guarded(tx, res, err, p.ID); err != nil {
			return err
		}
		*out, err = s.finishAdvance(tx, p)
		return err
	}
}

// finishAdvance is store.FinishAdvance on tx, after p's guarded UPDATE.
func (s *Store) finishAdvance(tx *writeTx, p store.AdvanceParams) (*job.Job, error) {
	return store.FinishAdvance(p, store.AdvanceTx{
		Group: func() (group int64, err error) {
			return group, s.queryRow(tx, `SELECT group_id FROM jobs WHERE id = ?`, p.ID).Scan(&group)
		},
		GroupReady:   func(group int64, now time.Time) error { return s.groupReady(tx, group, now) },
		AppendRecord: func(r job.AttemptRecord) error { return s.appendRecord(tx, p.ID, r) },
		Publish:      func(now time.Time) error { return s.publishTx(tx, p.ID, now) },
		Get:          func() (*job.Job, error) { return s.getTx(tx, p.ID) },
	})
}

// AdvanceParent is store.FinishTx's: ParentAdvanceQuery's guarded UPDATE,
// then the rest of an advance (finishAdvance) when it moved the parent.
func (o *txOps) AdvanceParent(partID string, p *store.ParentAdvance) (*job.Job, error) {
	q := store.ParentAdvanceQuery(partID, p)
	var id string
	err := o.s.queryRow(o.tx, q.SQL(), q.Args()...).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil // the parent moved, or a part is open: nothing to write
	} else if err != nil {
		return nil, err
	}
	return o.s.finishAdvance(o.tx, p.Rest())
}
