package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Advance moves a job that is not running, guarded on its current state.
func (s *Store) Advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
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
		if p.To == job.StateWaiting {
			if err := groupReady(ctx, tx, group, p.Now); err != nil {
				return err
			}
		}
		if p.Record.Outcome != "" {
			if err := appendRecord(ctx, tx, p.ID, p.Record); err != nil {
				return err
			}
		}
		out, err = getJob(ctx, tx, p.ID, false)
		return err
	})
	if err != nil {
		return nil, wrap(err, "advance job %s", p.ID)
	}
	return out, nil
}
