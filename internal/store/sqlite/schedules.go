package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CreateSchedule persists a new schedule; see store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, sc *store.Schedule) error {
	if err := sc.CheckIn(s.cfg.Region); err != nil {
		return err
	}
	return s.write(ctx, func(tx *writeTx) error {
		_, err := s.exec(tx, `INSERT INTO schedules (`+store.ScheduleCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			sc.ID, sc.Tenant, sc.Region, sc.Name, sc.Cron, int64(sc.Every), ns(sc.Anchor), sc.TimeZone, sc.Missed, sc.CatchUpMax,
			int64(sc.MaxLate), []byte(sc.Template), sc.Kind, boolInt(sc.Paused), ns(sc.NextAt), nullNS(sc.LastTickAt), sc.LastJobID,
			sc.Produced, sc.Skipped, sc.Version, ns(sc.CreatedAt), ns(sc.UpdatedAt))
		if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
			return fmt.Errorf("schedule %s (%s/%s) already exists: %w", sc.ID, sc.Tenant, sc.Name, store.ErrConflict)
		}
		return err
	})
}

// DueSchedules returns unpaused schedules due by now; see store.Schedules.
// The condition names the partial index schedules_due as it was declared.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*store.Schedule, error) {
	return s.Schedules(ctx, store.NewQuery(`SELECT `+store.ScheduleCols+` FROM schedules WHERE paused = 0 AND next_at <= ? ORDER BY next_at LIMIT ?`,
		ns(now), store.PageSize(limit)))
}

// UpdateSchedule replaces a schedule's mutable fields, guarded on its
// version; see store.Schedules.
func (s *Store) UpdateSchedule(ctx context.Context, sc *store.Schedule) error {
	if err := sc.Check(); err != nil {
		return err
	}
	return s.write(ctx, func(tx *writeTx) error {
		res, err := s.exec(tx, `UPDATE schedules SET name = ?, cron = ?, every_ns = ?, anchor = ?, timezone = ?, missed = ?,
			catch_up_max = ?, max_late_ns = ?, template = ?, kind = ?, paused = ?, next_at = ?, updated_at = ?, version = version + 1
			WHERE id = ? AND version = ?`,
			sc.Name, sc.Cron, int64(sc.Every), ns(sc.Anchor), sc.TimeZone, sc.Missed, sc.CatchUpMax, int64(sc.MaxLate),
			[]byte(sc.Template), sc.Kind, boolInt(sc.Paused), ns(sc.NextAt), ns(sc.UpdatedAt), sc.ID, sc.Version)
		if err != nil {
			if strings.Contains(err.Error(), "UNIQUE constraint failed") {
				return fmt.Errorf("schedule name %q is taken in tenant %s: %w", sc.Name, sc.Tenant, store.ErrConflict)
			}
			return err
		}
		return s.scheduleGuard(tx, res, sc.ID)
	})
}

// scheduleGuard turns a guarded schedule write that matched no row into
// ErrNotFound or ErrConflict.
func (s *Store) scheduleGuard(tx *writeTx, res sql.Result, id string) error {
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var one int
	if err := s.queryRow(tx, `SELECT 1 FROM schedules WHERE id = ?`, id).Scan(&one); errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("schedule %s: %w", id, store.ErrNotFound)
	} else if err != nil {
		return err
	}
	return fmt.Errorf("schedule %s changed since it was read: %w", id, store.ErrConflict)
}

// DeleteSchedule removes a schedule and its ledger; see store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *writeTx) error {
		res, err := s.exec(tx, `DELETE FROM schedules WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("schedule %s: %w", id, store.ErrNotFound)
		}
		_, err = s.exec(tx, `DELETE FROM schedule_ticks WHERE schedule_id = ?`, id)
		return err
	})
}

// ClaimTick claims one tick and inserts its job in one transaction; see
// store.Schedules.
func (s *Store) ClaimTick(ctx context.Context, p store.ClaimTickParams) (store.ClaimTickResult, error) {
	if err := store.CheckClaimTick(s.cfg.Region, p); err != nil {
		return store.ClaimTickResult{}, err
	}
	var out store.ClaimTickResult
	err := s.write(ctx, func(tx *writeTx) error {
		out = store.ClaimTickResult{}
		produced, jobID := 0, ""
		if p.Job != nil {
			produced, jobID = 1, p.Job.ID
		}
		// The guard first: a second claimant stops here, before it writes
		// anything else.
		res, err := s.exec(tx, `UPDATE schedules SET next_at = ?, skipped = skipped + ?, produced = produced + ?,
			last_tick_at = CASE WHEN ? = 1 THEN ? ELSE last_tick_at END,
			last_job_id = CASE WHEN ? = 1 THEN ? ELSE last_job_id END,
			version = version + 1, updated_at = ?
			WHERE id = ? AND next_at = ? AND paused = 0`,
			ns(p.Next), p.Skipped, produced, produced, ns(p.Tick), produced, jobID, ns(p.Now), p.ScheduleID, ns(p.Expect))
		if err != nil {
			return err
		}
		if err := s.scheduleGuard(tx, res, p.ScheduleID); err != nil {
			return err
		}
		if p.Job == nil {
			return nil
		}
		var prev string
		err = s.queryRow(tx, `SELECT job_id FROM schedule_ticks WHERE schedule_id = ? AND tick_at = ?`, p.ScheduleID, ns(p.Tick)).Scan(&prev)
		switch {
		case err == nil:
			j, err := s.getTx(tx, prev)
			if errors.Is(err, store.ErrNotFound) {
				err = nil // pruned since; the tick is still not enqueued again
			}
			out = store.ClaimTickResult{Job: j, Existing: true}
			if _, uerr := s.exec(tx, `UPDATE schedules SET produced = produced - 1, last_job_id = ? WHERE id = ?`, prev, p.ScheduleID); uerr != nil {
				return uerr
			}
			return err
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		ir, err := s.insertOne(tx, p.Job, p.Def)
		if err != nil {
			return fmt.Errorf("insert job %s: %w", p.Job.ID, err)
		}
		out = store.ClaimTickResult(ir)
		if ir.Existing {
			if _, err := s.exec(tx, `UPDATE schedules SET last_job_id = ? WHERE id = ?`, ir.Job.ID, p.ScheduleID); err != nil {
				return err
			}
		}
		if _, err := s.exec(tx, `INSERT INTO schedule_ticks (schedule_id, tick_at, job_id, claimed_at) VALUES (?, ?, ?, ?)`,
			p.ScheduleID, ns(p.Tick), ir.Job.ID, ns(p.Now)); err != nil {
			return err
		}
		_, err = s.exec(tx, `DELETE FROM schedule_ticks WHERE schedule_id = ? AND tick_at < (
			SELECT tick_at FROM schedule_ticks WHERE schedule_id = ? ORDER BY tick_at DESC LIMIT 1 OFFSET ?)`,
			p.ScheduleID, p.ScheduleID, store.MaxScheduleTicksKept-1)
		return err
	})
	return out, err
}
