package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// groupKey identifies a group: lane, tenant, kind and the sorted key set.
type groupKey struct {
	lane         job.Lane
	tenant, kind string
	keys         string // sorted names joined by NUL, which names cannot contain
}

func groupOf(j *job.Job) groupKey {
	return groupKey{j.Lane, j.Tenant, j.Kind, strings.Join(groupKeys(j.LimitKeys), "\x00")}
}

// Insert persists jobs in one transaction: unknown limit keys are created
// with def, each job's group is created or made ready no later than the job,
// and the jobs are inserted. A job whose (tenant, idempotency key) already
// exists, also one inserted concurrently by another node or earlier in the
// same batch, is not inserted: its result carries the existing job and
// Existing=true. Jobs of another region are refused.
//
// Locks are taken in one global order (new keys by name, groups by
// lane/tenant/kind/keys, jobs by tenant/idempotency key), so concurrent
// inserts wait for each other but never deadlock.
func (s *Store) Insert(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if err := s.checkInsert(jobs); err != nil {
		return nil, err
	}
	out := make([]store.InsertResult, len(jobs))
	var dup []int
	// Pipelined: BEGIN, the key creation and the group upserts go in one
	// round trip, the job inserts and COMMIT in a second. The group rows
	// an insert locks are held for that one round trip and the commit, not
	// for three (on a loaded machine a client round trip, not the server,
	// was what concurrent single-job inserts into one group queued on).
	err := s.inPipe(ctx, false, func(tx *pipeTx) error {
		if err := ensureKeys(ctx, tx, allKeys(jobs), def); err != nil {
			return fmt.Errorf("create limit keys: %w", err)
		}
		groups, err := upsertGroups(ctx, tx, jobs)
		if err != nil {
			return fmt.Errorf("upsert groups: %w", err)
		}
		dup, err = sendInserts(ctx, tx.SendBatchCommit, jobs, groups, out)
		return err
	})
	if err == nil {
		// After the commit: the jobs holding the idempotency keys are
		// committed too (this insert waited for them on the index entry).
		err = fillExisting(ctx, s.pool, jobs, dup, out)
	}
	if err != nil {
		return nil, fmt.Errorf("insert: %w", err)
	}
	return out, nil
}

func (s *Store) checkInsert(jobs []*job.Job) error {
	for _, j := range jobs {
		switch {
		case j.ID == "":
			return errors.New("insert: a job has no ID")
		case j.Region != s.cfg.Region:
			return fmt.Errorf("insert job %s: region %q does not belong in the %q store", j.ID, j.Region, s.cfg.Region)
		case j.State != job.StateAccepted && j.State != job.StateWaiting:
			return fmt.Errorf("insert job %s: a new job is accepted or waiting, not %q", j.ID, j.State)
		}
	}
	return nil
}

func allKeys(jobs []*job.Job) []string {
	var names []string
	for _, j := range jobs {
		names = append(names, j.LimitKeys...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// upsertGroups creates the batch's groups or lowers their ready_at to the
// earliest waiting job, in group order, and returns their ids.
func upsertGroups(ctx context.Context, tx querier, jobs []*job.Job) (map[groupKey]int64, error) {
	ready := map[groupKey]*int64{}
	for _, j := range jobs {
		g := groupOf(j)
		at, seen := ready[g]
		if j.State == job.StateWaiting && (at == nil || ns(j.EligibleAt) < *at) {
			at = nullNS(j.EligibleAt)
			if at == nil {
				at = new(int64) // a zero EligibleAt is "now"
			}
		}
		if !seen || at != nil {
			ready[g] = at
		}
	}
	order := slices.SortedFunc(maps.Keys(ready), func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.lane, b.lane), cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.kind, b.kind), cmp.Compare(a.keys, b.keys))
	})
	ids := make(map[groupKey]int64, len(order))
	b := &pgx.Batch{}
	for _, g := range order {
		b.Queue(`INSERT INTO job_groups (lane, tenant, kind, keys, ready_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (lane, tenant, kind, keys) DO UPDATE SET ready_at = LEAST(job_groups.ready_at, EXCLUDED.ready_at)
			RETURNING id`, string(g.lane), g.tenant, g.kind, strings.Split(g.keys, "\x00"), ready[g],
		).QueryRow(func(row pgx.Row) error {
			var id int64
			err := row.Scan(&id)
			ids[g] = id
			return err
		})
	}
	return ids, tx.SendBatch(ctx, b).Close()
}

const insertJobSQL = `INSERT INTO jobs (id, kind, region, lane, tenant, limit_keys, cost, priority, payload,
		idempotency_key, deadline, budget_congestion, budget_transient, budget_schema, parent_id, depth, group_id,
		state, eligible_at, created_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $20)
	ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key <> '' DO NOTHING
	RETURNING ` + jobCols

// insertJobs inserts the jobs in (tenant, idempotency key) order and fills
// out; a job that hit an existing idempotency key gets the existing job.
func insertJobs(ctx context.Context, tx pgx.Tx, jobs []*job.Job, groups map[groupKey]int64, out []store.InsertResult) error {
	dup, err := sendInserts(ctx, tx.SendBatch, jobs, groups, out)
	if err != nil {
		return err
	}
	return fillExisting(ctx, tx, jobs, dup, out)
}

// sendInserts sends the inserts of insertJobs in one batch through send
// and returns the indexes of the jobs that met an existing idempotency key.
func sendInserts(ctx context.Context, send func(context.Context, *pgx.Batch) pgx.BatchResults, jobs []*job.Job,
	groups map[groupKey]int64, out []store.InsertResult) ([]int, error) {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(jobs[a].Tenant, jobs[b].Tenant), cmp.Compare(jobs[a].IdempotencyKey, jobs[b].IdempotencyKey))
	})
	var dup []int
	b := &pgx.Batch{}
	for _, i := range order {
		j := jobs[i]
		b.Queue(insertJobSQL, j.ID, j.Kind, j.Region, string(j.Lane), j.Tenant, j.LimitKeys, j.Cost, j.Priority,
			nullBytes(j.Payload), j.IdempotencyKey, nullNS(j.Deadline), j.Budgets.Congestion, j.Budgets.Transient,
			j.Budgets.Schema, j.ParentID, j.Depth, groups[groupOf(j)], string(j.State), ns(j.EligibleAt), ns(j.CreatedAt),
		).QueryRow(func(row pgx.Row) error {
			got, err := scanJob(row)
			if errors.Is(err, pgx.ErrNoRows) {
				dup = append(dup, i)
				return nil
			}
			if pgCode(err) == "23505" {
				return fmt.Errorf("job %s: %w: the id is taken", j.ID, store.ErrConflict)
			}
			out[i] = store.InsertResult{Job: got}
			return err
		})
	}
	if err := send(ctx, b).Close(); err != nil {
		return nil, err
	}
	return dup, nil
}

// fillExisting reads the jobs that own the idempotency keys of jobs[dup].
// It runs after the inserts (for Insert, after its commit), so in read
// committed it sees a job another transaction committed while this one
// waited on its index entry.
func fillExisting(ctx context.Context, tx querier, jobs []*job.Job, dup []int, out []store.InsertResult) error {
	if len(dup) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, i := range dup {
		j := jobs[i]
		b.Queue(`SELECT `+jobCols+` FROM jobs WHERE tenant = $1 AND idempotency_key = $2 AND idempotency_key <> ''`,
			j.Tenant, j.IdempotencyKey,
		).QueryRow(func(row pgx.Row) error {
			got, err := scanJob(row)
			if err != nil {
				return fmt.Errorf("job %s: read the job holding its idempotency key: %w", j.ID, err)
			}
			out[i] = store.InsertResult{Job: got, Existing: true}
			return nil
		})
	}
	return tx.SendBatch(ctx, b).Close()
}

// Get returns one job with its attempt history, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*job.Job, error) {
	return getJob(ctx, s.pool, id, false)
}

func getJob(ctx context.Context, q querier, id string, lock bool) (*job.Job, error) {
	sql := `SELECT ` + jobCols + `, ` + historyCol + ` FROM jobs WHERE id = $1`
	if lock {
		sql += ` FOR NO KEY UPDATE OF jobs`
	}
	j, err := scanJobHistory(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return j, err
}

// List returns jobs matching p, newest first (ids sort by creation time),
// without their history. Only the filters set appear in the SQL, so each
// combination gets its own cached statement and a plan that uses its index.
func (s *Store) List(ctx context.Context, p store.ListParams) ([]*job.Job, error) {
	var where []string
	var args []any
	add := func(col string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf("%s $%d", col, len(args)))
	}
	if p.Tenant != "" {
		add("tenant =", p.Tenant)
	}
	if p.State != "" {
		add("state =", string(p.State))
	}
	if p.Kind != "" {
		add("kind =", p.Kind)
	}
	if p.Lane != "" {
		add("lane =", string(p.Lane))
	}
	if p.Parent != "" {
		add("parent_id =", p.Parent)
	}
	if p.LimitKey != "" {
		args = append(args, p.LimitKey)
		where = append(where, fmt.Sprintf("$%d = ANY(limit_keys)", len(args)))
	}
	if p.After != "" {
		add("id <", p.After)
	}
	q := `SELECT ` + jobCols + ` FROM jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	args = append(args, store.PageSize(p.Limit))
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	return collectJobs(s.pool.Query(ctx, q, args...))
}

// Delete removes a terminal job (a dead letter) and its history.
// ErrConflict when the job is not terminal.
func (s *Store) Delete(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM jobs WHERE id = $1 AND state = 'terminal'`, id)
	return guarded(ctx, s.pool, tag, err, id)
}

// ExpireDeadlines ends accepted, waiting and scheduled jobs whose deadline
// passed before now as terminal/deadline_exceeded, and returns how many.
// Running jobs are left to finish: their lease already bounds them.
func (s *Store) ExpireDeadlines(ctx context.Context, now time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET state = 'terminal', reason = 'deadline_exceeded', finished_at = $1, updated_at = $1
		WHERE deadline < $1 AND state IN ('accepted', 'waiting', 'retry_scheduled')`, ns(now))
	if err != nil {
		return 0, fmt.Errorf("expire deadlines: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Prune deletes up to store.PruneBatch jobs (and their history) that
// finished before before, in one short transaction, and returns how many;
// call it until it returns 0 (the engine does), as with every driver.
func (s *Store) Prune(ctx context.Context, before time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM jobs WHERE id IN (SELECT id FROM jobs
		WHERE finished_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`, ns(before), store.PruneBatch)
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Stats counts jobs by lane and state and reports, per lane, the age of the
// oldest job eligible at now. It scans the jobs table; call it for
// dashboards and metrics, not per request.
func (s *Store) Stats(ctx context.Context, now time.Time) (store.Stats, error) {
	st := store.Stats{Counts: map[job.Lane]map[job.State]int64{}, OldestReady: map[job.Lane]time.Duration{}}
	for _, l := range job.Lanes {
		st.Counts[l] = map[job.State]int64{}
	}
	rows, err := s.pool.Query(ctx, `SELECT lane, state, count(*) FROM jobs GROUP BY lane, state`)
	if err != nil {
		return st, err
	}
	var lane, state string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&lane, &state, &n}, func() error {
		l := job.Lane(lane)
		if st.Counts[l] == nil {
			st.Counts[l] = map[job.State]int64{}
		}
		st.Counts[l][job.State(state)] = n
		if job.State(state) == job.StateRunning {
			st.Running += n
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	st.OldestReady, err = s.OldestReady(ctx, now)
	return st, err
}

// OldestReady reports each lane's oldest ready job: per lane, the first
// entry of the partial indexes jobs_lane_ready (waiting) and jobs_scheduled
// (retry_scheduled), not a scan of the ready jobs.
func (s *Store) OldestReady(ctx context.Context, now time.Time) (map[job.Lane]time.Duration, error) {
	out := map[job.Lane]time.Duration{}
	for _, lane := range job.Lanes {
		var at *int64
		err := s.pool.QueryRow(ctx, `SELECT least(
			(SELECT min(eligible_at) FROM jobs WHERE state = 'waiting' AND lane = $1 AND eligible_at <= $2),
			(SELECT min(eligible_at) FROM jobs WHERE state = 'retry_scheduled' AND eligible_at <= $2 AND lane = $1))`,
			string(lane), ns(now)).Scan(&at)
		if err != nil {
			return nil, err
		}
		if at != nil {
			out[lane] = now.Sub(tm(*at))
		}
	}
	return out, nil
}

// Backlog returns, for each named key, the total cost of the jobs waiting on
// it (waiting or retry_scheduled) in lane and every lane scheduled before
// it. Every named key is in the result, with 0 when nothing waits.
func (s *Store) Backlog(ctx context.Context, lane job.Lane, keys []string) (map[string]int64, error) {
	lanes := []string{string(job.LaneInteractive)}
	if lane == job.LaneBatch {
		lanes = append(lanes, string(job.LaneBatch))
	}
	out := make(map[string]int64, len(keys))
	// A per-start key's backlog is its number of waiting jobs: each takes
	// one unit from it, whatever its cost.
	rows, err := s.pool.Query(ctx, `SELECT k, coalesce(sum(CASE WHEN j.id IS NULL THEN 0 WHEN lk.per_start THEN 1 ELSE j.cost END), 0)::bigint
		FROM unnest($1::text[]) AS k
		LEFT JOIN limit_keys lk ON lk.name = k
		LEFT JOIN jobs j ON j.limit_keys @> ARRAY[k] AND j.state IN ('waiting', 'retry_scheduled') AND j.lane = ANY($2)
		GROUP BY k`, keys, lanes)
	if err != nil {
		return nil, err
	}
	var k string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error {
		out[k] = n
		return nil
	})
	return out, err
}
