package sqlite

import (
	"context"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// advance is store.Writes.Advance: the guarded UPDATE, then
// store.FinishAdvance in the same write.
func (s *Store) advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	var out *job.Job
	err := s.write(ctx, func(tx *writeTx) error {
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
		out, err = store.FinishAdvance(p, store.AdvanceTx{
			Group: func() (group int64, err error) {
				return group, s.queryRow(tx, `SELECT group_id FROM jobs WHERE id = ?`, p.ID).Scan(&group)
			},
			GroupReady:   func(group int64, now time.Time) error { return s.groupReady(tx, group, now) },
			AppendRecord: func(r job.AttemptRecord) error { return s.appendRecord(tx, p.ID, r) },
			Publish:      func(now time.Time) error { return s.publishTx(tx, p.ID, now) },
			Get:          func() (*job.Job, error) { return s.getTx(tx, p.ID) },
		})
		return err
	})
	return out, err
}
