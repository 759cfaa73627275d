package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// CreateSchedule persists a new schedule; see store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, sc *store.Schedule) error {
	if err := sc.CheckIn(s.cfg.Region); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO schedules (`+store.ScheduleCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22)`,
		sc.ID, sc.Tenant, sc.Region, sc.Name, sc.Cron, int64(sc.Every), ns(sc.Anchor), sc.TimeZone, sc.Missed, sc.CatchUpMax,
		int64(sc.MaxLate), []byte(sc.Template), sc.Kind, sc.Paused, ns(sc.NextAt), nullNS(sc.LastTickAt), sc.LastJobID,
		sc.Produced, sc.Skipped, sc.Version, ns(sc.CreatedAt), ns(sc.UpdatedAt))
	if pgCode(err) == "23505" {
		return fmt.Errorf("schedule %s (%s/%s) already exists: %w", sc.ID, sc.Tenant, sc.Name, store.ErrConflict)
	}
	return err
}

// DueSchedules returns unpaused schedules due by now; see store.Schedules.
// The condition names the partial index schedules_due as it was declared.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*store.Schedule, error) {
	return s.Schedules(ctx, store.NewQuery(`SELECT `+store.ScheduleCols+` FROM schedules WHERE NOT paused AND next_at <= ? ORDER BY next_at LIMIT ?`,
		ns(now), store.PageSize(limit)))
}

// UpdateSchedule replaces a schedule's mutable fields, guarded on its
// version; see store.Schedules.
func (s *Store) UpdateSchedule(ctx context.Context, sc *store.Schedule) error {
	if err := sc.Check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE schedules SET name = $1, cron = $2, every_ns = $3, anchor = $4, timezone = $5, missed = $6,
		catch_up_max = $7, max_late_ns = $8, template = $9, kind = $10, paused = $11, next_at = $12, updated_at = $13, version = version + 1
		WHERE id = $14 AND version = $15`,
		sc.Name, sc.Cron, int64(sc.Every), ns(sc.Anchor), sc.TimeZone, sc.Missed, sc.CatchUpMax, int64(sc.MaxLate),
		[]byte(sc.Template), sc.Kind, sc.Paused, ns(sc.NextAt), ns(sc.UpdatedAt), sc.ID, sc.Version)
	if pgCode(err) == "23505" {
		return fmt.Errorf("schedule name %q is taken in tenant %s: %w", sc.Name, sc.Tenant, store.ErrConflict)
	}
	return scheduleGuard(ctx, s.pool, tag, err, sc.ID)
}

// scheduleGuard turns a guarded schedule write that matched no row into
// ErrNotFound or ErrConflict.
func scheduleGuard(ctx context.Context, q querier, tag pgconn.CommandTag, err error, id string) error {
	if err != nil || tag.RowsAffected() > 0 {
		return err
	}
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schedules WHERE id = $1)`, id).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("schedule %s: %w", id, store.ErrNotFound)
	}
	return fmt.Errorf("schedule %s changed since it was read: %w", id, store.ErrConflict)
}

// DeleteSchedule removes a schedule and its ledger; see store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM schedules WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("schedule %s: %w", id, store.ErrNotFound)
		}
		_, err = tx.Exec(ctx, `DELETE FROM schedule_ticks WHERE schedule_id = $1`, id)
		return err
	})
}

// ClaimTick claims one tick and inserts its job in one transaction; see
// store.Schedules. The guarded UPDATE takes the schedule's row lock first:
// a second node claiming the same tick waits for it, then re-reads the row
// (read committed) and matches nothing, since next_at moved.
func (s *Store) ClaimTick(ctx context.Context, p store.ClaimTickParams) (store.ClaimTickResult, error) {
	if err := store.CheckClaimTick(s.cfg.Region, p); err != nil {
		return store.ClaimTickResult{}, err
	}
	var out store.ClaimTickResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = store.ClaimTickResult{}
		produced, jobID := 0, ""
		if p.Job != nil {
			produced, jobID = 1, p.Job.ID
		}
		tag, err := tx.Exec(ctx, `UPDATE schedules SET next_at = $1, skipped = skipped + $2, produced = produced + $3,
			last_tick_at = CASE WHEN $3 = 1 THEN $4 ELSE last_tick_at END,
			last_job_id = CASE WHEN $3 = 1 THEN $5 ELSE last_job_id END,
			version = version + 1, updated_at = $6
			WHERE id = $7 AND next_at = $8 AND NOT paused`,
			ns(p.Next), p.Skipped, produced, ns(p.Tick), jobID, ns(p.Now), p.ScheduleID, ns(p.Expect))
		if err := scheduleGuard(ctx, tx, tag, err, p.ScheduleID); err != nil {
			return err
		}
		if p.Job == nil {
			return nil
		}
		var prev string
		err = tx.QueryRow(ctx, `SELECT job_id FROM schedule_ticks WHERE schedule_id = $1 AND tick_at = $2`, p.ScheduleID, ns(p.Tick)).Scan(&prev)
		switch {
		case err == nil:
			j, err := getJob(ctx, tx, prev, false)
			if errors.Is(err, store.ErrNotFound) {
				err = nil // pruned since; the tick is still not enqueued again
			}
			out = store.ClaimTickResult{Job: j, Existing: true}
			if _, uerr := tx.Exec(ctx, `UPDATE schedules SET produced = produced - 1, last_job_id = $1 WHERE id = $2`, prev, p.ScheduleID); uerr != nil {
				return uerr
			}
			return err
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		res := make([]store.InsertResult, 1)
		if err := insertJobs(ctx, tx, []*job.Job{p.Job}, p.Def, res); err != nil {
			return fmt.Errorf("insert the tick's job: %w", err)
		}
		out = store.ClaimTickResult(res[0])
		if res[0].Existing {
			if _, err := tx.Exec(ctx, `UPDATE schedules SET last_job_id = $1 WHERE id = $2`, res[0].Job.ID, p.ScheduleID); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schedule_ticks (schedule_id, tick_at, job_id, claimed_at) VALUES ($1, $2, $3, $4)`,
			p.ScheduleID, ns(p.Tick), res[0].Job.ID, ns(p.Now)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM schedule_ticks WHERE schedule_id = $1 AND tick_at < (
			SELECT tick_at FROM schedule_ticks WHERE schedule_id = $1 ORDER BY tick_at DESC LIMIT 1 OFFSET $2)`,
			p.ScheduleID, store.MaxScheduleTicksKept-1)
		return err
	})
	if err != nil {
		return store.ClaimTickResult{}, wrap(err, "claim tick of schedule %s", p.ScheduleID)
	}
	return out, nil
}
