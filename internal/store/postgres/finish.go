package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Finish applies the transitions in one transaction; see store.Finish. The
// transitions are applied in job id order (the result keeps the caller's
// order), so that two batches naming the same jobs, e.g. a worker's and the
// reaper's, lock them in the same order.
func (s *Store) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	errs, _, err := s.finishLease(ctx, ts, store.LeaseParams{})
	if err != nil {
		return nil, fmt.Errorf("finish: %w", err)
	}
	return errs, nil
}

// FinishLease finishes ts and then leases with p in one transaction (see
// store.FinishLeaser): one commit and its WAL flush instead of two. The
// lease runs after the finish has locked the keys it changed; its own key
// locks skip rows locked by other transactions, never its own.
func (s *Store) FinishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	errs, out, err := s.finishLease(ctx, ts, p)
	if err != nil {
		return nil, nil, fmt.Errorf("finish and lease: %w", err)
	}
	return errs, out, nil
}

var _ store.FinishLeaser = (*Store)(nil)

// finishLease is Finish, then, when p.Max > 0 (and, with p.Released set,
// the finish released something), Lease, in one transaction. With
// p.Released set the finish may go out with its COMMIT as a Finish does
// (finishCommits): one that may commit so releases nothing (its outcomes
// ready no group and disturb no key, and the statement's guard fails on a
// paced key), so it would not lease anyway.
func (s *Store) finishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ts[a].ID, ts[b].ID) })
	sorted := make([]store.Transition, len(ts))
	for k, i := range order {
		sorted[k] = ts[i]
	}
	commit := (p.Max <= 0 || p.Released != nil) && s.finishes.mayCommit(sorted)
	errs, leased, released, err := s.finishSorted(ctx, sorted, p, commit)
	if commit && needsMore(err) {
		// Nothing was written: finish again, the usual way.
		s.finishes.missed()
		errs, leased, released, err = s.finishSorted(ctx, sorted, p, false)
	}
	if err != nil {
		return nil, nil, err
	}
	if p.Released != nil {
		p.Released(released)
	}
	out := make([]error, len(ts))
	for k, i := range order {
		out[i] = errs[k]
		ts[i] = sorted[k] // a paced retry's EligibleAt and Record (store.PacedRetry)
	}
	return out, leased, nil
}

// finishSorted is finishLease on ts in id order; with commit, the finish
// goes out with its COMMIT (finishCommits).
func (s *Store) finishSorted(ctx context.Context, ts []store.Transition, p store.LeaseParams, commit bool) (errs []error, leased []*job.Job, released bool, err error) {
	err = s.inPipe(ctx, false, func(tx *pipeTx) error {
		var err error
		leased = nil
		f := &finishTx{ctx: ctx, tx: tx, commit: commit}
		if errs, released, err = store.FinishReleased(f, ts); err != nil || p.Max <= 0 {
			return err
		}
		if f.committed || p.Released != nil && !released {
			// Committed with its statement, it released nothing
			// (finishLease); otherwise the finish released nothing.
			return nil
		}
		f.planAsBefore()
		leased, err = store.Lease(&leaseTx{ctx: ctx, tx: tx, p: p}, p, newToken)
		return err
	})
	return errs, leased, released, err
}

// finishTx implements store.FinishTx on one transaction.
type finishTx struct {
	ctx context.Context
	tx  querier // a pipeTx: its Execs go out with the next read
	// keys are the limit keys EndAttempts locked with the jobs.
	keys map[string]*admission.State
	// generic is set while the transaction plans on generic plans
	// (genericPlanOn); planAsBefore restores the previous mode.
	generic bool
	// commit sends COMMIT with EndAttempts's statement (finishCommits),
	// which fails instead when the finish needs another statement;
	// committed is set once it went out.
	commit, committed bool
}

// errCommitted reports a statement a finish needed after it committed
// with EndAttempts: endAttemptsSQL's guard should have failed instead.
var errCommitted = errors.New("postgres: finish: a statement after the commit")

var _ store.FinishTx = (*finishTx)(nil)

// endAttemptsSQL ends a whole batch of attempts in one statement, and
// locks the limit keys of the jobs it ended in the same statement. The
// guarded update of each job (state running, its lease token, its attempt
// when given, its lease expired by then when given) also appends the
// attempt record to the history in its row. The arrays hold one element
// per transition, in the caller's (id) order; $15 tells which outcomes
// may write an unpaced key (store.KeyEffect.Disturbs). A job that is not
// returned met a failed guard: one locked elsewhere is waited for, and
// the guard is then checked on the version its locker left (PostgreSQL's
// re-check of an UPDATE's WHERE), so a job a reaper ended meanwhile is a
// conflict.
//
// The statement returns a row per ended job (id, keys, group, cost; the
// key columns NULL) and then a row per locked key (the job columns NULL).
// With $16 set it then fails (needsMoreMark) when a locked key is paced
// or a key was not locked: the finish commits with this statement
// (finishCommits) only when nothing else is to be written.
// The key lock comes after the jobs' row locks: its names are the ended
// jobs' (the RETURNING of the UPDATE), and each half of the lock sorts
// all of them by name before it locks the first, so the whole UPDATE has
// run by then. That is the lock order of package store.Finish (jobs, then
// keys in name order) in one statement instead of two; the keys of a job
// that conflicted are no longer locked at all.
//
// The UPDATE takes the row locks itself. A separate SELECT ... ORDER BY id
// FOR NO KEY UPDATE used to take them first, in id order, so that two
// finishes naming the same jobs (a worker's and the reaper's) could not
// deadlock; it wrote a row-lock WAL record per job (1.0 of the lease +
// finish's 13.5 records per job) and scanned the rows twice. The UPDATE's
// own lock order is its plan's: the unnest in id order driving index
// lookups, or a scan of jobs in physical order, both the same for two
// finishes with the same plan. Two finishes that overlap with different
// plans can deadlock; PostgreSQL then aborts one, which inPipe retries
// (40P01) in a new transaction. That is rare (a reaper ending a lease its
// worker is finishing at that moment) and costs a deadlock_timeout.
var endAttemptsSQL = `WITH u AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::int[], $7::int[], $8::int[],
			$9::bytea[], $10::bigint[], $11::bigint[], $12::text[], $13::bigint[], $14::int[], $15::bool[])
			AS u(id, token, state, reason, eligible, congestion, transient, schema_, result, finished, now, record, expired_by, attempt, disturbs)
	), ended AS (
	UPDATE jobs SET state = u.state, reason = u.reason, eligible_at = coalesce(u.eligible, jobs.eligible_at),
		attempts_congestion = u.congestion, attempts_transient = u.transient, attempts_schema = u.schema_,
		result = coalesce(u.result, jobs.result), lease_token = NULL, lease_expires_at = NULL,
		finished_at = u.finished, updated_at = u.now,
		history = ` + foldHistory("jobs.history", "u.record") + `
	FROM u
	WHERE jobs.id = u.id AND ` + stateIs("running") + ` AND jobs.lease_token = u.token
		AND (u.expired_by IS NULL OR jobs.lease_expires_at <= u.expired_by) AND (u.attempt = 0 OR jobs.attempt = u.attempt)
	RETURNING jobs.id, jobs.limit_keys, jobs.group_id, jobs.cost, u.disturbs
	), ` + endedKeysCTEs + `,
	locked AS MATERIALIZED (` + lockEndedKeysSQL + `)
	SELECT id, limit_keys, group_id, cost` + strings.Repeat(`, NULL`, limitKeyColCount) + ` FROM ended
	UNION ALL
	SELECT NULL, NULL, NULL, NULL, * FROM locked
	UNION ALL
	SELECT NULL, NULL, NULL, NULL, set_config('plan_cache_mode', '` + needsMoreMark + `', true)` +
	strings.Repeat(`, NULL`, limitKeyColCount-1) + `
	WHERE $16 AND (EXISTS (SELECT FROM locked WHERE NOT ` + unpacedSQL + `)
		OR (SELECT count(*) FROM locked) < (SELECT count(*) FROM all_keys))`

// needsMoreMark is the value endAttemptsSQL's guard gives plan_cache_mode
// to fail the statement, and so the transaction and the COMMIT sent with
// it, when $16 is set and the finish needs another statement: a paced key
// (its state is saved), or a key the lock did not return (it is
// relocked). Plain SQL has no RAISE; an invalid setting raises 22023
// with the value in the message, which needsMore looks for.
const needsMoreMark = "ratelane_finish_needs_more"

// needsMore reports endAttemptsSQL's guard's failure.
func needsMore(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22023" && strings.Contains(pe.Message, needsMoreMark)
}

// finishCommits decides which finishes go out with their COMMIT: a
// finish whose statement is all it needs is one round trip instead of
// two (the second carried only COMMIT: 642 of a 20,000-job drain's
// ~2,300 round trips). That is known before it runs for the outcomes
// (no job back to waiting or to a retry, whose group is readied; no
// refusal, pause or hint, which write their keys; no job twice, nor a
// parent's advance (store.Transition.Parent), which take a second
// statement) but only after it for the keys: paced keys
// are saved. endAttemptsSQL checks them under its lock and fails, and
// the finish runs again the usual way; a store that met a paced key then
// finishes the usual way for its next slowAfterMiss finishes, so that a
// paced workload pays a failed statement once in that many.
type finishCommits struct {
	slow atomic.Int32
}

// slowAfterMiss is how many finishes skip the commit with the statement
// after one was refused.
const slowAfterMiss = 256

// mayCommit reports whether the finish of ts (in id order) may go out
// with its COMMIT.
func (c *finishCommits) mayCommit(ts []store.Transition) bool {
	if c.slow.Load() > 0 {
		c.slow.Add(-1)
		return false
	}
	for k, t := range ts {
		if t.To == job.StateWaiting || t.To == job.StateRetryScheduled || t.Keys.Disturbs() || t.Parent != nil ||
			k > 0 && ts[k-1].ID == t.ID {
			return false
		}
	}
	return true
}

func (c *finishCommits) missed() { c.slow.Store(slowAfterMiss) }

// endedKeysCTEs name the limit keys of the jobs in a relation "ended"
// (columns limit_keys, and disturbs: whether the job's outcome may write
// an unpaced key), all of them and those to lock exclusively, for
// lockEndedKeysSQL (see lockKeys). The names are read once, in
// materialized CTEs: as subqueries in each half of the lock, the planner
// ran the jobs lookup once per limit key for the unpaced half (16 keys:
// 16 times 64 lookups, 1.2 ms, for a 64-job finish).
const endedKeysCTEs = `all_keys AS MATERIALIZED (SELECT DISTINCT unnest(limit_keys) AS name FROM ended),
	excl_keys AS MATERIALIZED (SELECT DISTINCT unnest(limit_keys) AS name FROM ended WHERE disturbs)`

// lockEndedKeysSQL locks the keys endedKeysCTEs name, in name order.
var lockEndedKeysSQL = splitLockSQL(`name IN (SELECT name FROM all_keys)`, `name IN (SELECT name FROM excl_keys)`, false)

// limitKeyColCount is the number of store.LimitKeyCols, the columns the
// job rows of endAttemptsSQL leave NULL.
var limitKeyColCount = strings.Count(store.LimitKeyCols, ",") + 1

// EndAttempts ends every transition's attempt and locks the limit keys of
// the jobs it ended with one statement (endAttemptsSQL), on its generic
// plan (genericPlanOn): two statements in one round trip. (One statement
// per job, pipelined, cost the server one execution each: 64 per batch of
// 64; the key lock as a statement of its own and the plan mode's restore
// after it cost two more executions per batch.) With f.commit, COMMIT goes
// out with them; a result read after it (an error scanning the rows)
// does not undo it.
func (f *finishTx) EndAttempts(ts []store.Transition) ([]store.Ended, error) {
	if f.committed {
		return nil, errCommitted
	}
	b := &pgx.Batch{}
	if !f.generic {
		b.Queue(genericPlanOn)
	}
	pipe, commit := f.tx.(*pipeTx)
	commit = commit && f.commit
	b.Queue(endAttemptsSQL, append(endAttemptsArgs(ts), commit)...)
	var br pgx.BatchResults
	if commit {
		br, f.committed = pipe.SendBatchCommit(f.ctx, b), true
	} else {
		br = f.tx.SendBatch(f.ctx, b)
	}
	defer br.Close()
	if !f.generic {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		f.generic = true
	}
	got, keys, err := scanEnded(br.Query())
	if err != nil {
		return nil, err
	}
	out := make([]store.Ended, len(ts))
	for i, t := range ts {
		e, ok := got[t.ID]
		e.Conflict = !ok
		out[i] = e
	}
	if f.keys == nil {
		f.keys = keys
	} else {
		maps.Copy(f.keys, keys) // a later call of the same Finish (store.Finish's repeats)
	}
	return out, br.Close()
}

// endAttemptsArgs are endAttemptsSQL's arrays for ts.
func endAttemptsArgs(ts []store.Transition) []any {
	n := len(ts)
	var (
		ids, tokens, states, reasons, records = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		eligible, finished, expiredBy         = make([]*int64, n), make([]*int64, n), make([]*int64, n)
		nows                                  = make([]int64, n)
		congestion, transient, schema, att    = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		results                               = make([][]byte, n)
		disturbs                              = make([]bool, n)
		// The non-NULL elements of finished and eligible point into
		// these, rather than each into an int64 of its own (nullNS).
		finishedAt, eligibleAt = make([]int64, n), make([]int64, n)
	)
	for i, t := range ts {
		now := nowOr(t.Keys.Now, t.Record.At)
		if t.To.Final() && !now.IsZero() {
			finishedAt[i] = now.UnixNano()
			finished[i] = &finishedAt[i]
		}
		if at := nowOr(t.EligibleAt, now); (t.To == job.StateWaiting || t.To == job.StateRetryScheduled) && !at.IsZero() {
			eligibleAt[i] = at.UnixNano()
			eligible[i] = &eligibleAt[i]
		}
		ids[i], tokens[i], states[i], reasons[i] = t.ID, t.LeaseToken, string(t.To), string(t.Reason)
		congestion[i], transient[i], schema[i] = int32(t.Attempts.Congestion), int32(t.Attempts.Transient), int32(t.Attempts.Schema)
		results[i], nows[i], records[i] = nullBytes(t.Result), ns(now), string(recordJSON(t.Record))
		expiredBy[i], att[i] = nullNS(t.LeaseExpiredBy), int32(t.Record.Attempt)
		// Unpaced keys are locked exclusively only for the jobs whose
		// outcome may write them (a refusal, a pause, a hint; see lockKeys).
		disturbs[i] = t.Keys.Disturbs()
	}
	return []any{textArray(ids), textArray(tokens), textArray(states), textArray(reasons), nullInt8Array(eligible),
		congestion, transient, schema, results, nullInt8Array(finished), int8Array(nows), textArray(records),
		nullInt8Array(expiredBy), att, disturbs}
}

// scanEnded reads endAttemptsSQL's rows: the ended jobs by id, and the
// keys it locked by name. A row is a job's when its first column, the
// job id, is not NULL.
func scanEnded(rows pgx.Rows, err error) (map[string]store.Ended, map[string]*admission.State, error) {
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	jobs := make(map[string]store.Ended)
	keys := make(map[string]*admission.State)
	jobDest := make([]any, 4+limitKeyColCount) // the key columns skipped (nil)
	for rows.Next() {
		if rows.RawValues()[0] == nil {
			st, err := scanKey(keyRow{rows})
			if err != nil {
				return nil, nil, err
			}
			keys[st.Name] = st
			continue
		}
		var id string
		var e store.Ended
		jobDest[0], jobDest[1], jobDest[2], jobDest[3] = &id, &e.Keys, &e.Group, &e.Cost
		if err := rows.Scan(jobDest...); err != nil {
			return nil, nil, err
		}
		jobs[id] = e
	}
	return jobs, keys, rows.Err()
}

// keyRow scans a key row of endAttemptsSQL, skipping its job columns.
type keyRow struct{ rows pgx.Rows }

func (r keyRow) Scan(dest ...any) error {
	return r.rows.Scan(append([]any{nil, nil, nil, nil}, dest...)...)
}

// genericPlanOn and genericPlanOff bracket the finish's statement
// (endAttemptsSQL): after genericPlanOn it runs on its prepared
// statement's generic plan. Left to choose, PostgreSQL planned the
// finish afresh at many executions (a custom plan for the arrays given is
// costed below the generic one): in a 20,000-job drain the key lock,
// then a statement of its own, was planned 491 times for 1,073
// executions, 1.36 s of planning against 2.09 s of execution, and
// endAttempts 337-495 times (pg_stat_statements with track_planning;
// River's two drain statements planned 18 times in all). The generic
// plans are the custom ones (endAttempts: the unnest driving jobs_pkey
// lookups; 447,000 buffers per drain either way). The plan does not
// decide what the key lock locks or in which order: each half sorts by
// name before it locks. Both settings are local to the transaction; the
// previous mode is kept in a placeholder setting so it can be put back.
// genericPlanOff is sent only when the transaction runs another
// statement after the finish (planAsBefore): most finish transactions
// commit right after it, and the commit ends the setting.
const (
	genericPlanOn = `SELECT set_config('ratelane.plan_cache_mode', current_setting('plan_cache_mode'), true),
		set_config('plan_cache_mode', 'force_generic_plan', true)`
	genericPlanOff = `SELECT set_config('plan_cache_mode', current_setting('ratelane.plan_cache_mode'), true)`
)

// planAsBefore restores the plan cache mode EndAttempts changed, if it
// did, before a statement other than the finish's: queued, it goes out
// with that statement.
func (f *finishTx) planAsBefore() {
	if !f.generic || f.committed {
		return
	}
	f.generic = false
	_, _ = f.tx.Exec(f.ctx, genericPlanOff) // a pipeTx: its error is reported by the next statement
}

// next readies the transaction for a statement after EndAttempts's: the
// plan mode as before; errCommitted when EndAttempts committed.
func (f *finishTx) next() error {
	if f.committed {
		return errCommitted
	}
	f.planAsBefore()
	return nil
}

// LockKeysWait returns the keys EndAttempts locked, or locks them now
// when it did not lock them all.
func (f *finishTx) LockKeysWait(names []string) (map[string]*admission.State, error) {
	out := make(map[string]*admission.State, len(names))
	var missing bool
	for _, n := range names {
		st, ok := f.keys[n]
		if !ok {
			missing = true
			continue
		}
		out[n] = st
	}
	if !missing {
		return out, nil
	}
	// A key whose pacing changed under the split lock: lock it now.
	if err := f.next(); err != nil {
		return nil, err
	}
	return relockMissing(f.ctx, f.tx, names, out)
}

// ReadKeys reads the keys without locking them: one round trip, only in a
// finish with a retry after a refusal that named no delay.
func (f *finishTx) ReadKeys(names []string) (map[string]*admission.State, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	return collectKeys(f.tx.Query(f.ctx, `SELECT `+store.LimitKeyCols+` FROM limit_keys WHERE name = ANY($1)`, names))
}

func (f *finishTx) SaveKeys(keys []*admission.State) error {
	if err := f.next(); err != nil {
		return err
	}
	return saveKeys(f.ctx, f.tx, keys)
}

func (f *finishTx) GroupReady(group int64, at time.Time) error {
	if err := f.next(); err != nil {
		return err
	}
	return groupReady(f.ctx, f.tx, group, at)
}

func (f *finishTx) GroupUnblock(group int64) error {
	if err := f.next(); err != nil {
		return err
	}
	_, err := f.tx.Exec(f.ctx, `UPDATE job_groups SET blocked_until = 0 WHERE id = $1 AND blocked_until > 0`, group)
	return err
}

// groupReadySQL lowers the group's ready_at to $2: a NULL ready_at (no
// waiting job) takes it, as LEAST, which ignores a NULL, would. A group
// already ready by then is locked but not rewritten: the unconditional
// LEAST gave the row a new version (not HOT: ready_at is in the predicate
// of job_groups_round, so a new index entry too) for no change, at every
// retry and every job back to waiting into a group that was ready anyway.
// SQLite's groupReady has the same condition (session 26, s26h3).
//
// The lock comes first, in the CTE, and the condition is read from the
// row it locked: a lease holding the group (ReadyGroups locks it) may be
// about to give it a NULL ready_at (TouchGroups of an empty group, from a
// snapshot without this transaction's job). A plain conditional UPDATE
// would test the version its snapshot sees, find it ready and skip the
// row without waiting for that lease; the group would then end with a
// waiting job and no ready_at. A locking read waits, and then returns
// the version the lease committed, and the UPDATE re-checks its row
// against it.
const groupReadySQL = `WITH l AS (SELECT id, ready_at FROM job_groups WHERE id = $1 FOR NO KEY UPDATE)
	UPDATE job_groups g SET ready_at = $2 FROM l
	WHERE g.id = l.id AND (l.ready_at IS NULL OR l.ready_at > $2)`

// groupReady lowers the group's ready_at to at (groupReadySQL).
func groupReady(ctx context.Context, q querier, group int64, at time.Time) error {
	_, err := q.Exec(ctx, groupReadySQL, group, ns(at))
	return err
}

// appendRecordSQL appends the record $2 to the history of job $1, or
// folds it into the last record (foldHistory).
var appendRecordSQL = `UPDATE jobs SET history = ` + foldHistory("history", "$2::text") + ` WHERE id = $1`

// appendRecord adds one line to a job's history, or folds a pending
// pass into the last line (store.FoldsRecord). The caller holds the
// job's row lock.
func appendRecord(ctx context.Context, q querier, id string, r job.AttemptRecord) error {
	_, err := q.Exec(ctx, appendRecordSQL, id, recordJSON(r))
	return err
}

// Publish moves a validated job to published: a compare-and-set that
// succeeds at most once. ErrConflict afterwards, ErrNotFound for no job.
func (s *Store) Publish(ctx context.Context, id string, now time.Time) error {
	return publishOn(ctx, s.pool, id, now)
}

// publishOn is Publish's guarded UPDATE on db (the pool, or an advance's
// transaction with store.AdvanceParams.Publish).
func publishOn(ctx context.Context, db querier, id string, now time.Time) error {
	tag, err := db.Exec(ctx, `UPDATE jobs SET state = 'published', finished_at = $2, updated_at = $2,
		publish_claim = NULL, publish_claim_until = NULL
		WHERE id = $1 AND state = 'validated'`, id, ns(now))
	return guarded(ctx, db, tag, err, id)
}

// ClaimPublish takes a validated job's publication for token until until
// (store.Store.ClaimPublish). The guarded UPDATE is atomic under
// PostgreSQL's row lock: of two nodes claiming at once, the second
// re-reads the row after the first commits and finds it claimed.
func (s *Store) ClaimPublish(ctx context.Context, id, token string, now, until time.Time) error {
	if token == "" {
		return errors.New("postgres: claim publish: empty token")
	}
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET publish_claim = $2, publish_claim_until = $3
		WHERE id = $1 AND state = 'validated'
		AND (publish_claim IS NULL OR publish_claim_until <= $4 OR publish_claim = $2)`,
		id, token, ns(until), ns(now))
	return guarded(ctx, s.pool, tag, err, id)
}

// Cancel ends a non-final job as terminal/cancelled and returns it. A
// running job's lease is revoked (its worker's Finish then gets
// ErrConflict) and its keys' in-flight counts are released here, locking
// the keys in name order after the job row, as Finish does.
func (s *Store) Cancel(ctx context.Context, id string, now time.Time) (*job.Job, error) {
	return s.move(ctx, id, "cancel", func(tx pgx.Tx) error {
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
			return releaseKeys(ctx, tx, j.LimitKeys, now, j.Cost)
		}
		return nil
	})
}

// move runs an operator's move of job id (Cancel, Redrive) as fn in one
// transaction and reads the job back in it; an error names the move.
func (s *Store) move(ctx context.Context, id, move string, fn func(tx pgx.Tx) error) (*job.Job, error) {
	var out *job.Job
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := fn(tx)
		if err == nil {
			out, err = getJob(ctx, tx, id, false)
		}
		return err
	})
	if err != nil {
		return nil, wrap(err, "%s job %s", move, id)
	}
	return out, nil
}

// releaseKeys ends one lease in flight on each named key at now, for a
// start of the given cost (admission.State.End: its request may have gone
// out, so its windows log it now).
func releaseKeys(ctx context.Context, q querier, names []string, now time.Time, cost int64) error {
	states, err := lockKeys(ctx, q, names, nil, false)
	if err != nil {
		return err
	}
	save := make([]*admission.State, 0, len(states))
	for _, st := range states {
		if st.Unpaced() {
			continue // its in-flight count is derived, not kept
		}
		st.End(now, cost)
		save = append(save, st)
	}
	return saveKeys(ctx, q, save)
}

// Redrive returns a terminal job to waiting, eligible at now, with its
// per-budget attempt counters reset (the total Attempt keeps counting, so
// history lines stay distinct) and the redrive recorded in its history.
// ErrConflict when the job is not terminal.
func (s *Store) Redrive(ctx context.Context, id string, now time.Time) (*job.Job, error) {
	return s.move(ctx, id, "redrive", func(tx pgx.Tx) error {
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
		return appendRecord(ctx, tx, id, store.RedriveRecord(now, attempt, job.Reason(reason)))
	})
}
