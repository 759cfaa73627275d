package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Finish applies the transitions in one transaction; see store.Finish. The
// transitions are applied in job id order (the result keeps the caller's
// order), so that two batches naming the same jobs, e.g. a worker's and the
// reaper's, lock them in the same order.
func (s *Store) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ts[a].ID, ts[b].ID) })
	sorted := make([]store.Transition, len(ts))
	for k, i := range order {
		sorted[k] = ts[i]
	}
	var errs []error
	err := s.inPipe(ctx, false, func(tx *pipeTx) error {
		var err error
		errs, err = store.Finish(&finishTx{ctx: ctx, tx: tx}, sorted)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("finish: %w", err)
	}
	out := make([]error, len(ts))
	for k, i := range order {
		out[i] = errs[k]
	}
	return out, nil
}

// finishTx implements store.FinishTx on one transaction.
type finishTx struct {
	ctx context.Context
	tx  querier // a pipeTx: its Execs go out with the next read
	// keys are the limit keys EndAttempts locked with the jobs.
	keys map[string]*admission.State
}

var _ store.FinishTx = (*finishTx)(nil)

// endAttemptSQL is one statement per transition: the guarded update of the
// job, which also appends the attempt record to the history in its row.
var endAttemptSQL = `UPDATE jobs SET state = $3, reason = $4, eligible_at = coalesce($5, eligible_at),
		attempts_congestion = $6, attempts_transient = $7, attempts_schema = $8,
		result = coalesce($9, result), lease_token = NULL, lease_expires_at = NULL,
		finished_at = $10, updated_at = $11, history = ` + appendHistory(12) + `
	WHERE id = $1 AND state = 'running' AND lease_token = $2
		AND ($13::bigint IS NULL OR lease_expires_at <= $13) AND ($14::int = 0 OR attempt = $14)
	RETURNING limit_keys, group_id`

// EndAttempts sends every transition's statement in one pipelined batch:
// one round trip for the whole finish batch instead of one per job. The
// statements run in order, so the caller's id order is the lock order.
func (f *finishTx) EndAttempts(ts []store.Transition) ([]store.Ended, error) {
	b := &pgx.Batch{}
	for _, t := range ts {
		now := nowOr(t.Keys.Now, t.Record.At)
		var finished *int64
		if t.To.Final() {
			finished = nullNS(now)
		}
		var eligible *int64
		if t.To == job.StateWaiting || t.To == job.StateRetryScheduled {
			eligible = nullNS(nowOr(t.EligibleAt, now))
		}
		b.Queue(endAttemptSQL, t.ID, t.LeaseToken, string(t.To), string(t.Reason), eligible, t.Attempts.Congestion,
			t.Attempts.Transient, t.Attempts.Schema, nullBytes(t.Result), finished, ns(now), recordJSON(t.Record),
			nullNS(t.LeaseExpiredBy), t.Record.Attempt)
	}
	// After the jobs, in the same round trip, lock the keys of all of them
	// in name order (as LockKeysWait would, the lock order of package
	// store.Finish): the keys of a job that conflicted are locked for
	// nothing, which costs less than a round trip.
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	b.Queue(`SELECT `+keyCols+` FROM limit_keys WHERE name IN (SELECT unnest(limit_keys) FROM jobs WHERE id = ANY($1))
		ORDER BY name FOR NO KEY UPDATE`, ids)
	br := f.tx.SendBatch(f.ctx, b)
	out := make([]store.Ended, len(ts))
	for i := range ts {
		err := br.QueryRow().Scan(&out[i].Keys, &out[i].Group)
		if errors.Is(err, pgx.ErrNoRows) {
			out[i].Conflict = true
			continue
		}
		if err != nil {
			br.Close()
			return nil, err
		}
	}
	keys, err := collectKeys(br.Query())
	if err != nil {
		br.Close()
		return nil, err
	}
	f.keys = keys
	return out, br.Close()
}

// LockKeysWait returns the keys EndAttempts locked, or locks them now
// when it did not lock them all.
func (f *finishTx) LockKeysWait(names []string) (map[string]*admission.State, error) {
	out := make(map[string]*admission.State, len(names))
	for _, n := range names {
		st, ok := f.keys[n]
		if !ok {
			return lockKeys(f.ctx, f.tx, names, false)
		}
		out[n] = st
	}
	return out, nil
}

func (f *finishTx) SaveKeys(keys []*admission.State) error { return saveKeys(f.ctx, f.tx, keys) }

func (f *finishTx) GroupReady(group int64, at time.Time) error {
	return groupReady(f.ctx, f.tx, group, at)
}

// groupReady lowers the group's ready_at to at (LEAST ignores a NULL).
func groupReady(ctx context.Context, q querier, group int64, at time.Time) error {
	_, err := q.Exec(ctx, `UPDATE job_groups SET ready_at = LEAST(ready_at, $2) WHERE id = $1`, group, ns(at))
	return err
}

// appendRecord adds one line to a job's history. The caller holds the
// job's row lock.
func appendRecord(ctx context.Context, q querier, id string, r job.AttemptRecord) error {
	_, err := q.Exec(ctx, `UPDATE jobs SET history = `+appendHistory(2)+` WHERE id = $1`, id, recordJSON(r))
	return err
}

// Publish moves a validated job to published: a compare-and-set that
// succeeds at most once. ErrConflict afterwards, ErrNotFound for no job.
func (s *Store) Publish(ctx context.Context, id string, now time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET state = 'published', finished_at = $2, updated_at = $2
		WHERE id = $1 AND state = 'validated'`, id, ns(now))
	return guarded(ctx, s.pool, tag, err, id)
}

// Cancel ends a non-final job as terminal/cancelled and returns it. A
// running job's lease is revoked (its worker's Finish then gets
// ErrConflict) and its keys' in-flight counts are released here, locking
// the keys in name order after the job row, as Finish does.
func (s *Store) Cancel(ctx context.Context, id string, now time.Time) (*job.Job, error) {
	var out *job.Job
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		j, err := getJob(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if j.State.Final() {
			return store.ErrConflict
		}
		_, err = tx.Exec(ctx, `UPDATE jobs SET state = 'terminal', reason = 'cancelled', lease_token = NULL,
			lease_expires_at = NULL, finished_at = $2, updated_at = $2 WHERE id = $1`, id, ns(now))
		if err != nil {
			return err
		}
		rec := job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassCancelled}
		if err := appendRecord(ctx, tx, id, rec); err != nil {
			return err
		}
		if j.State == job.StateRunning {
			if err := releaseKeys(ctx, tx, j.LimitKeys); err != nil {
				return err
			}
		}
		out, err = getJob(ctx, tx, id, false)
		return err
	})
	if err != nil {
		return nil, wrap(err, "cancel job %s", id)
	}
	return out, nil
}

// releaseKeys ends one lease in flight on each named key.
func releaseKeys(ctx context.Context, q querier, names []string) error {
	states, err := lockKeys(ctx, q, names, false)
	if err != nil {
		return err
	}
	save := make([]*admission.State, 0, len(states))
	for _, st := range states {
		st.Release()
		save = append(save, st)
	}
	return saveKeys(ctx, q, save)
}

// Redrive returns a terminal job to waiting, eligible at now, with its
// per-budget attempt counters reset (the total Attempt keeps counting, so
// history lines stay distinct) and the redrive recorded in its history.
// ErrConflict when the job is not terminal.
func (s *Store) Redrive(ctx context.Context, id string, now time.Time) (*job.Job, error) {
	var out *job.Job
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var group int64
		var attempt int
		var reason string
		err := tx.QueryRow(ctx, `UPDATE jobs SET state = 'waiting', reason = '', finished_at = NULL, eligible_at = $2,
				attempts_congestion = 0, attempts_transient = 0, attempts_schema = 0, result = NULL, updated_at = $2
			FROM (SELECT reason AS old_reason FROM jobs WHERE id = $1) AS old
			WHERE id = $1 AND state = 'terminal'
			RETURNING group_id, attempt, old.old_reason`, id, ns(now)).Scan(&group, &attempt, &reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return missingOrConflict(ctx, tx, id)
		}
		if err != nil {
			return err
		}
		if err := groupReady(ctx, tx, group, now); err != nil {
			return err
		}
		rec := job.AttemptRecord{At: now, Attempt: attempt, Outcome: job.ClassRedriven,
			Why: "redriven by an operator after " + reason + "; budgets reset"}
		if err := appendRecord(ctx, tx, id, rec); err != nil {
			return err
		}
		out, err = getJob(ctx, tx, id, false)
		return err
	})
	if err != nil {
		return nil, wrap(err, "redrive job %s", id)
	}
	return out, nil
}
