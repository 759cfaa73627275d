package sqlite

import (
	"context"
	"database/sql"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Advance moves a job that is not running, guarded on its current state.
func (s *Store) Advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	var out *job.Job
	err := s.write(ctx, func(tx *sql.Tx) error {
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
		if p.To == job.StateWaiting {
			var group int64
			if err := s.queryRow(tx, `SELECT group_id FROM jobs WHERE id = ?`, p.ID).Scan(&group); err != nil {
				return err
			}
			if err := s.groupReady(tx, group, p.Now); err != nil {
				return err
			}
		}
		if p.Record.Outcome != "" {
			if err := s.appendRecord(tx, p.ID, p.Record); err != nil {
				return err
			}
		}
		out, err = s.getTx(tx, p.ID)
		return err
	})
	return out, err
}
