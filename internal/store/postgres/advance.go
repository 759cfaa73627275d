package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// advance is store.Writes.Advance: the guarded UPDATE, then
// store.FinishAdvance in the same transaction. The UPDATE returns the
// job's group, so the group costs no second statement.
func (s *Store) advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	var out *job.Job
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var finished *int64
		if p.To.Final() {
			n := ns(p.Now)
			finished = &n
		}
		var group int64
		err := tx.QueryRow(ctx, `UPDATE jobs SET state = $2, reason = $3, result = coalesce($4, result), finished_at = $5,
				eligible_at = CASE WHEN $2 = 'waiting' THEN $6 ELSE eligible_at END, updated_at = $6
			WHERE id = $1 AND state = $7 RETURNING group_id`,
			p.ID, string(p.To), string(p.Reason), nullBytes(p.Result), finished, ns(p.Now), string(p.From)).Scan(&group)
		if errors.Is(err, pgx.ErrNoRows) {
			return missingOrConflict(ctx, tx, p.ID)
		}
		if err != nil {
			return err
		}
		out, err = finishAdvance(ctx, tx, p, group)
		return err
	})
	if err != nil {
		return nil, wrap(err, "advance job %s", p.ID)
	}
	return out, nil
}

// finishAdvance is store.FinishAdvance on q, after p's guarded UPDATE
// of the job of group group.
func finishAdvance(ctx context.Context, q querier, p store.AdvanceParams, group int64) (*job.Job, error) {
	return store.FinishAdvance(p, store.AdvanceTx{
		Group:        func() (int64, error) { return group, nil },
		GroupReady:   func(group int64, now time.Time) error { return groupReady(ctx, q, group, now) },
		AppendRecord: func(r job.AttemptRecord) error { return appendRecord(ctx, q, p.ID, r) },
		Publish:      func(now time.Time) error { return publishOn(ctx, q, p.ID, now) },
		Get:          func() (*job.Job, error) { return getJob(ctx, q, p.ID, false) },
	})
}

// AdvanceParent is store.FinishTx's: ParentAdvanceQuery's guarded UPDATE,
// then the rest of an advance when it moved the parent. The rest needs no
// group (group 0): a parent's advance ends validated or terminal
// (ParentAdvance.Check), never waiting, the only state whose group
// FinishAdvance marks ready. The finish then needs more
// than its first statement, so it never commits with it (finishCommits
// refuses a transition with a Parent).
func (f *finishTx) AdvanceParent(partID string, p *store.ParentAdvance) (*job.Job, error) {
	if f.committed {
		return nil, errCommitted
	}
	q := store.ParentAdvanceQuery(partID, p)
	var id string
	err := f.tx.QueryRow(f.ctx, q.Numbered(), q.Args()...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil // the parent moved, or a part is open: nothing to write
	} else if err != nil {
		return nil, err
	}
	return finishAdvance(f.ctx, f.tx, p.Rest(), 0)
}
