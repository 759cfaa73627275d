package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Insert persists jobs in one durable write (in pieces when ctx is a
// batch-lane store.WithPieces one: writePieces); see store.Store.
func (s *Store) Insert(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	if err := store.CheckInsert(s.cfg.Region, jobs); err != nil {
		return nil, err
	}
	if store.CostCheck(ctx) {
		// The configurations are an in-process read here, before the
		// write: no round trip to save (see store.WithCostCheck).
		if err := store.CheckCosts(ctx, s, jobs, def); err != nil {
			return nil, err
		}
	}
	out := make([]store.InsertResult, len(jobs))
	write := func(tx *writeTx, lo, hi int) error {
		res, err := s.insertJobs(tx, jobs[lo:hi], def)
		copy(out[lo:hi], res)
		return err
	}
	var err error
	if store.InPieces(ctx) {
		// A batch-lane manifest's jobs, marked divisible by its caller:
		// a piece at a time, interactive writes between (writePieces).
		err = s.writePieces(ctx, len(jobs), write)
	} else {
		err = s.write(ctx, func(tx *writeTx) error { return write(tx, 0, len(jobs)) })
	}
	if err != nil {
		return make([]store.InsertResult, len(jobs)), err
	}
	return out, nil
}

// insertOne inserts one job inside tx (a schedule's tick).
func (s *Store) insertOne(tx *writeTx, j *job.Job, def admission.Config) (store.InsertResult, error) {
	res, err := s.insertJobs(tx, []*job.Job{j}, def)
	if err != nil {
		return store.InsertResult{}, err
	}
	return res[0], nil
}

// idemKey is a job's idempotency key within its tenant.
type idemKey struct{ tenant, key string }

// groupOf names a job's group row (job_groups' unique columns).
type groupOf struct{ lane, tenant, kind, keys string }

// insertJobs inserts jobs inside tx with a number of statements that grows
// with the batch's distinct tenants, limit keys and groups, not with its
// jobs: the profile of bench http-batch had one idempotency lookup, one
// group upsert and one row insert per job as 74% of the CPU of a batch,
// most of it the per-statement cost (binding, stepping, resetting), not
// the B-tree work. The answer is what inserting the jobs one by one in
// order would answer: a job whose idempotency key its tenant already used,
// before or earlier in the batch, is not written and answers with the
// job holding the key.
func (s *Store) insertJobs(tx *writeTx, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	out := make([]store.InsertResult, len(jobs))
	held, err := s.heldKeys(tx, jobs)
	if err != nil {
		return nil, err
	}
	fresh := make([]int, 0, len(jobs))
	existing := map[int]string{} // job index -> the id holding its key
	for i, j := range jobs {
		if j.IdempotencyKey != "" {
			k := idemKey{j.Tenant, j.IdempotencyKey}
			if id, ok := held[k]; ok {
				existing[i] = id
				continue
			}
			held[k] = j.ID // a later item with the same key answers with this job
		}
		fresh = append(fresh, i)
	}
	seenKeys := map[string]bool{}
	groups := map[groupOf]int64{}
	var order []groupOf // first appearance, so upserts run in a stable order
	// ready is the earliest ready time of the group's waiting jobs (unix
	// ns), NULL when the batch has none of the group waiting: the upsert
	// then keeps the stored ready_at.
	ready := map[groupOf]sql.NullInt64{}
	jobGroup := make([]groupOf, len(jobs))
	keysJSON := make([]string, len(jobs)) // limit_keys, by job index
	for _, i := range fresh {
		j := jobs[i]
		for _, k := range j.LimitKeys {
			if seenKeys[k] {
				continue
			}
			seenKeys[k] = true
			if err := s.ensureKey(tx, k, def, j.CreatedAt); err != nil {
				return nil, fmt.Errorf("insert job %s: %w", j.ID, err)
			}
		}
		// The column's encoding serves as the group's when the keys are
		// sorted already (one key always is).
		keysJSON[i] = stringsJSON(j.LimitKeys)
		gk := keysJSON[i]
		if !slices.IsSorted(j.LimitKeys) {
			gk = groupKeys(j.LimitKeys)
		}
		g := groupOf{string(j.Lane), j.Tenant, j.Kind, gk}
		jobGroup[i] = g
		r, seen := ready[g]
		if !seen {
			order = append(order, g)
		}
		if j.State == job.StateWaiting {
			if at := ns(j.EligibleAt); !r.Valid || at < r.Int64 {
				r = sql.NullInt64{Int64: at, Valid: true}
			}
		}
		ready[g] = r
	}
	for _, g := range order {
		// One statement per group at most: ready_at becomes the earliest
		// of the stored value and the batch's, as one upsert per job made
		// it.
		id, err := s.upsertGroup(tx, g, ready[g])
		if err != nil {
			return nil, err
		}
		groups[g] = id
	}
	direct := len(fresh) >= listDirectFrom
	if direct {
		// The run above the mark is listed first, so that this insert's
		// pairs, written directly below, are the only ones above it.
		if err := s.listUnlisted(tx); err != nil {
			return nil, err
		}
	}
	args := make([]any, 0, min(len(fresh), maxInsertRows)*insertJobCols)
	done := 0
	for _, n := range chunkSizes(len(fresh)) {
		args = args[:0]
		chunk := fresh[done : done+n]
		shape := chunkShape(jobs, chunk)
		if shape&insertShared != 0 {
			args = appendShared(args, jobs[chunk[0]])
			if shape&insertSharedCosts != 0 {
				args = appendCosts(args, jobs[chunk[0]])
			}
		}
		for _, i := range chunk {
			j := jobs[i]
			if shape&insertShared == 0 {
				args = append(appendShared(args, j), ns(j.CreatedAt)) // updated_at
			}
			if shape&insertSharedCosts == 0 {
				args = appendCosts(args, j)
			}
			args = append(args, j.ID, keysJSON[i], []byte(j.Payload))
			if shape&insertPlain == 0 {
				args = append(args, j.IdempotencyKey, nullNS(j.Deadline), j.ParentID, j.Depth)
			}
			args = append(args, groups[jobGroup[i]])
		}
		if _, err := s.exec(tx, insertJobsSQL(n, shape), args...); err != nil {
			if n == 1 {
				return nil, fmt.Errorf("insert job %s: %w", jobs[fresh[done]].ID, err)
			}
			return nil, fmt.Errorf("insert jobs %s to %s: %w", jobs[fresh[done]].ID, jobs[fresh[done+n-1]].ID, err)
		}
		done += n
	}
	if direct {
		pairs := make([]groupPair, len(fresh))
		for k, i := range fresh {
			pairs[k] = groupPair{groups[jobGroup[i]], jobs[i].ID}
		}
		if err := s.listDirect(tx, pairs); err != nil {
			return nil, err
		}
	} else {
		if err := s.listLate(tx, jobs, fresh); err != nil {
			return nil, err
		}
		if err := s.countListing(tx, len(fresh)); err != nil {
			return nil, err
		}
	}
	for _, i := range fresh {
		cp := *jobs[i]
		cp.UpdatedAt = cp.CreatedAt
		out[i] = store.InsertResult{Job: &cp}
	}
	for i, id := range existing {
		j, err := s.getTx(tx, id)
		if err != nil {
			return nil, fmt.Errorf("insert job %s: read the job holding its idempotency key: %w", jobs[i].ID, err)
		}
		out[i] = store.InsertResult{Job: j, Existing: true}
	}
	return out, nil
}

// heldKeys returns which of the jobs' idempotency keys are already held,
// and by which job, in one query per tenant and chunk of keys.
func (s *Store) heldKeys(tx *writeTx, jobs []*job.Job) (map[idemKey]string, error) {
	held := map[idemKey]string{}
	byTenant := map[string][]string{}
	var tenants []string
	for _, j := range jobs {
		if j.IdempotencyKey == "" {
			continue
		}
		if _, ok := byTenant[j.Tenant]; !ok {
			tenants = append(tenants, j.Tenant)
		}
		byTenant[j.Tenant] = append(byTenant[j.Tenant], j.IdempotencyKey)
	}
	for _, t := range tenants {
		keys := byTenant[t]
		for done, sizes := 0, chunkSizes(len(keys)); len(sizes) > 0; sizes = sizes[1:] {
			n := sizes[0]
			args := make([]any, 0, n+1)
			args = append(args, t)
			for _, k := range keys[done : done+n] {
				args = append(args, k)
			}
			done += n
			rows, err := s.query(tx, heldKeysSQL(n), args...)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var key, id string
				if err := rows.Scan(&key, &id); err != nil {
					rows.Close()
					return nil, err
				}
				held[idemKey{t, key}] = id
			}
			if err := rows.Close(); err != nil {
				return nil, err
			}
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
	}
	return held, nil
}

// Bounds of the multi-row statements of insertJobs. A statement of n rows
// binds at most n*insertJobCols variables, far below SQLite's limit
// (32,766) at maxInsertRows; the sizes are powers of two so that the
// writer's statement cache holds at most a handful of texts per statement.
const (
	maxInsertRows = 256
	insertJobCols = 21
)

// chunkSizes splits n rows into statement sizes: maxInsertRows while that
// many are left, then the rest as powers of two, largest first.
func chunkSizes(n int) []int {
	var out []int
	for ; n >= maxInsertRows; n -= maxInsertRows {
		out = append(out, maxInsertRows)
	}
	for size := maxInsertRows / 2; n > 0; size /= 2 {
		if n >= size {
			out = append(out, size)
			n -= size
		}
	}
	return out
}

// insertShape says which of the insert's statements writes a chunk of
// rows. Every bound parameter costs a bind through the driver on every
// execution (a text one also a copy into C memory and a free), which in
// a multi-row insert is per job (docs/benchmarks.md, "Session 14
// (s14h3)"). A zero shape binds all 21 columns of every row.
type insertShape uint8

const (
	// insertPlain leaves idempotency_key, deadline, parent_id and depth
	// to their defaults (empty or NULL): every job of the chunk has none
	// (plainInsert).
	insertPlain insertShape = 1 << iota
	// insertShared binds the columns appendShared writes once for the
	// chunk, as the numbered parameters ?1 to ?7 that every row repeats:
	// every job of the chunk has the same (sameShared), as the jobs of one
	// InsertMany of one kind do.
	insertShared
	// insertSharedCosts, only with insertShared, binds appendCosts'
	// columns once for the chunk too, as ?8 to ?12: every job of the chunk
	// has the same cost, priority and budgets (sameCosts), as a kind's
	// jobs do unless their producer sets them one by one. Five binds per
	// job fewer (docs/benchmarks.md, "Session 19 (s19h4)").
	insertSharedCosts
)

// chunkShape returns the leanest insertShape that writes the chunk's
// jobs (indexes into jobs) as they are.
func chunkShape(jobs []*job.Job, chunk []int) insertShape {
	var shape insertShape
	first := jobs[chunk[0]]
	if !slices.ContainsFunc(chunk, func(i int) bool { return !plainInsert(jobs[i]) }) {
		shape |= insertPlain
	}
	// A single row gains nothing from numbered parameters, each of which
	// the driver looks up by name.
	if len(chunk) > 1 && !slices.ContainsFunc(chunk, func(i int) bool { return !sameShared(first, jobs[i]) }) {
		shape |= insertShared
		if !slices.ContainsFunc(chunk, func(i int) bool { return !sameCosts(first, jobs[i]) }) {
			shape |= insertSharedCosts
		}
	}
	return shape
}

// plainInsert reports whether j's row may leave idempotency_key,
// deadline, parent_id and depth to their defaults (insertPlain): a job
// with no idempotency key, deadline or parent.
func plainInsert(j *job.Job) bool {
	return j.IdempotencyKey == "" && j.Deadline.IsZero() && j.ParentID == "" && j.Depth == ""
}

// sameShared reports whether a and b agree on every column appendShared
// writes.
func sameShared(a, b *job.Job) bool {
	return a.Kind == b.Kind && a.Region == b.Region && a.Lane == b.Lane && a.Tenant == b.Tenant && a.State == b.State &&
		a.EligibleAt.Equal(b.EligibleAt) && a.CreatedAt.Equal(b.CreatedAt)
}

// sameCosts reports whether a and b agree on every column appendCosts
// writes.
func sameCosts(a, b *job.Job) bool {
	return a.Cost == b.Cost && a.Priority == b.Priority && a.Budgets == b.Budgets
}

// appendShared appends j's values of the columns insertShared binds once
// per chunk: kind, region, lane, tenant, state, eligible_at and created_at
// (which updated_at repeats). Lane and state as plain strings:
// database/sql converts a named string type by reflection, with an
// allocation.
func appendShared(args []any, j *job.Job) []any {
	return append(args, j.Kind, j.Region, string(j.Lane), j.Tenant, string(j.State), ns(j.EligibleAt), ns(j.CreatedAt))
}

// appendCosts appends j's values of the columns insertSharedCosts binds
// once per chunk: cost, priority and the three budgets.
func appendCosts(args []any, j *job.Job) []any {
	return append(args, j.Cost, j.Priority, j.Budgets.Congestion, j.Budgets.Transient, j.Budgets.Schema)
}

// insertStatement is the insert of n rows of the shape. The shared
// columns come first in every row, then the costs, so that with
// insertShared (and insertSharedCosts) the first row names ?1 to ?7 (?12)
// before its first plain "?", which SQLite then numbers 8 (13).
func insertStatement(n int, shape insertShape) string {
	shared := "?, ?, ?, ?, ?, ?, ?, ?" // updated_at bound as created_at again
	if shape&insertShared != 0 {
		shared = "?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7"
	}
	costs := ", ?, ?, ?, ?, ?"
	if shape&insertSharedCosts != 0 {
		costs = ", ?8, ?9, ?10, ?11, ?12"
	}
	cols, tail := `id, limit_keys, payload, idempotency_key, deadline, parent_id, depth, group_id`, 8
	if shape&insertPlain != 0 {
		cols, tail = `id, limit_keys, payload, group_id`, 4
	}
	row := "(" + shared + costs + strings.Repeat(", ?", tail) + ")"
	return `INSERT INTO jobs (kind, region, lane, tenant, state, eligible_at, created_at, updated_at,
		cost, priority, budget_congestion, budget_transient, budget_schema, ` + cols + `) VALUES ` +
		strings.TrimSuffix(strings.Repeat(row+",", n), ",")
}

// insertSQL[shape][k] and heldSQL[k] are the statements of 1<<k rows or
// keys. insertSharedCosts without insertShared is never asked for.
var insertSQL, heldSQL = func() (ins [8][]string, held []string) {
	for n := 1; n <= maxInsertRows; n *= 2 {
		for shape := range insertShape(len(ins)) {
			ins[shape] = append(ins[shape], insertStatement(n, shape))
		}
		// The repeated "<> ''" lets SQLite use the partial unique index;
		// without it every keyed insert scans the tenant's jobs.
		held = append(held, `SELECT idempotency_key, id FROM jobs WHERE tenant = ? AND idempotency_key <> '' AND idempotency_key IN (`+
			strings.TrimSuffix(strings.Repeat("?,", n), ",")+`)`)
	}
	return ins, held
}()

func insertJobsSQL(n int, shape insertShape) string {
	return insertSQL[shape][bits.TrailingZeros(uint(n))]
}

func heldKeysSQL(n int) string { return heldSQL[bits.TrailingZeros(uint(n))] }

func (s *Store) ensureKey(tx *writeTx, name string, def admission.Config, now time.Time) error {
	def.Name = name
	st := admission.NewState(def)
	_, err := s.exec(tx, `INSERT INTO limit_keys (name, rate, burst, concurrency, adaptive, min_rate, learned_rate, windows, per_start, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`,
		st.Name, st.Rate, st.Burst, st.Concurrency, st.Adaptive, st.MinRate, st.LearnedRate, store.WindowsJSON(st.Windows), st.PerStart, ns(now))
	return err
}

// Get returns one job with its attempt history.
func (s *Store) Get(ctx context.Context, id string) (*job.Job, error) {
	var hist sql.NullString
	j, err := scanJob(withExtra{s.readRow(ctx, `SELECT `+jobCols+`, history FROM jobs WHERE id = ?`, id), []any{&hist}})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if !hist.Valid {
		j.History = impliedHistoryOf(j)
		return j, nil
	}
	j.History, err = parseHistory(hist)
	return j, err
}

// withExtra scans the columns after jobCols into extra.
type withExtra struct {
	r     scanner
	extra []any
}

func (w withExtra) Scan(dest ...any) error { return w.r.Scan(append(dest, w.extra...)...) }

// parseHistory decodes the history column: a JSON array of attempt
// records, NULL before the first one.
func parseHistory(h sql.NullString) ([]job.AttemptRecord, error) {
	if !h.Valid {
		return nil, nil
	}
	var out []job.AttemptRecord
	if err := json.Unmarshal([]byte(h.String), &out); err != nil {
		return nil, fmt.Errorf("decode attempt history: %w", err)
	}
	return out, nil
}

func (s *Store) getTx(tx *writeTx, id string) (*job.Job, error) {
	j, err := scanJob(s.queryRow(tx, `SELECT `+jobCols+` FROM jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return j, err
}

// List returns jobs matching p, newest first (store.ListQuery).
func (s *Store) List(ctx context.Context, p store.ListParams) ([]*job.Job, error) {
	q := listQuery(p)
	if readsMarkRun(p) {
		s.keyListed.Store(true)
	}
	rows, err := s.readQuery(ctx, q.SQL(), q.Args()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, func() (*job.Job, error) { return scanJob(rows) })
}

// listQuery is List's statement. A group's keys are a JSON array; the
// column is qualified because jobs has a column of the same name.
//
// A key's jobs in any state but waiting or retry_scheduled (whose own
// group indexes, jobs_group_head and jobs_group_scheduled, hold every such
// job) are read in two parts (store.ListSideQuery): those in
// job_group_ids, joined to their rows by id, and the newest ones not in it
// yet (ids above jobs_list_mark: at most a listing's worth, listed.go).
func listQuery(p store.ListParams) *store.Query {
	const groupHasKey = `EXISTS (SELECT 1 FROM json_each(job_groups.keys) WHERE value = ?)`
	if !readsMarkRun(p) {
		return store.ListQuery(jobCols, p, groupHasKey)
	}
	return store.ListSideQuery(jobCols, p, groupHasKey, `job_group_ids`, `id > (SELECT id FROM jobs_list_mark)`)
}

// readsMarkRun reports whether List(p) reads job_group_ids and the run of
// ids above jobs_list_mark (listQuery): a key's jobs in any state but
// waiting or retry_scheduled.
func readsMarkRun(p store.ListParams) bool {
	return p.LimitKey != "" && p.State != job.StateWaiting && p.State != job.StateRetryScheduled
}

// Publish is the compare-and-set validated -> published.
func (s *Store) Publish(ctx context.Context, id string, now time.Time) error {
	return s.write(ctx, func(tx *writeTx) error { return s.publishTx(tx, id, now) })
}

// publishTx is Publish's guarded UPDATE inside tx (also an advance's with
// store.AdvanceParams.Publish).
func (s *Store) publishTx(tx *writeTx, id string, now time.Time) error {
	res, err := s.exec(tx, `UPDATE jobs SET state = 'published', finished_at = ?, updated_at = ?,
		publish_claim = NULL, publish_claim_until = NULL
		WHERE id = ? AND state = 'validated'`, ns(now), ns(now), id)
	return s.guarded(tx, res, err, id)
}

// ClaimPublish takes a validated job's publication for token until until
// (store.Store.ClaimPublish).
func (s *Store) ClaimPublish(ctx context.Context, id, token string, now, until time.Time) error {
	if token == "" {
		return errors.New("sqlite: claim publish: empty token")
	}
	return s.write(ctx, func(tx *writeTx) error {
		res, err := s.exec(tx, `UPDATE jobs SET publish_claim = ?, publish_claim_until = ?
			WHERE id = ? AND state = 'validated'
			AND (publish_claim IS NULL OR publish_claim_until <= ? OR publish_claim = ?)`,
			token, ns(until), id, ns(now), token)
		return s.guarded(tx, res, err, id)
	})
}

// guarded turns a guarded UPDATE's result into nil, ErrConflict (the row is
// there but was not in the expected state) or ErrNotFound.
func (s *Store) guarded(tx *writeTx, res sql.Result, err error, id string) error {
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	var one int
	if err := s.queryRow(tx, `SELECT 1 FROM jobs WHERE id = ?`, id).Scan(&one); errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return store.ErrConflict
}

// Heartbeat extends a running job's lease if the token still holds it.
func (s *Store) Heartbeat(ctx context.Context, id, token string, until time.Time) error {
	return s.write(ctx, func(tx *writeTx) error {
		res, err := s.exec(tx, `UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND state = 'running' AND lease_token = ?`,
			ns(until), id, token)
		return s.guarded(tx, res, err, id)
	})
}

// Cancel ends a non-final job as terminal/cancelled.
func (s *Store) Cancel(ctx context.Context, id string, now time.Time) (*job.Job, error) {
	var out *job.Job
	err := s.write(ctx, func(tx *writeTx) error {
		j, err := s.getTx(tx, id)
		if err != nil {
			return err
		}
		if j.State.Final() {
			return store.ErrConflict
		}
		_, err = s.exec(tx, `UPDATE jobs SET state = 'terminal', reason = 'cancelled', lease_token = NULL,
			lease_expires_at = NULL, finished_at = ?, updated_at = ? WHERE id = ?`, ns(now), ns(now), id)
		if err != nil {
			return err
		}
		if err := s.appendRecord(tx, id, job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassCancelled}); err != nil {
			return err
		}
		if j.State == job.StateRunning {
			if err := s.releaseKeys(tx, j.LimitKeys, now, j.Cost); err != nil {
				return err
			}
		}
		out, err = s.getTx(tx, id)
		return err
	})
	return out, err
}

// releaseKeys ends one lease in flight on each named key at now, for a
// start of the given cost (admission.State.End: its request may have gone
// out, so its windows log it now).
func (s *Store) releaseKeys(tx *writeTx, names []string, now time.Time, cost int64) error {
	states, err := s.loadKeys(tx, names)
	if err != nil {
		return err
	}
	var save []*admission.State
	for _, st := range states {
		if st.Unpaced() {
			continue // its in-flight count is derived, not kept
		}
		st.End(now, cost)
		save = append(save, st)
	}
	return s.saveKeys(tx, save)
}

// appendRecord adds one record to a job's history (outside Finish, which
// appends in its own UPDATE). A row whose NULL history stands for its
// first success (impliedRecord) is not appended to as NULL, which would
// read back as r alone: it gets that record written out before r.
func (s *Store) appendRecord(tx *writeTx, id string, r job.AttemptRecord) error {
	q := appendRecordSQL
	if store.FoldsRecord(r) {
		q = appendFoldSQL // a pending pass may fold into the last record
	}
	res, err := s.exec(tx, q, recordJSON(r), id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	j, err := s.getTx(tx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // nothing to append to, as the UPDATE alone answered
	}
	if err != nil {
		return err
	}
	_, err = s.exec(tx, `UPDATE jobs SET history = '[' || ? || ',' || ? || ']' WHERE id = ?`,
		recordJSON(impliedHistoryOf(j)[0]), recordJSON(r), id)
	return err
}

// appendRecordSQL appends the record ?1 to the history of job ?2, unless
// the row's NULL history stands for its first success (impliedRow).
const appendRecordSQL = `UPDATE jobs SET history = ` + appendHistory + ` WHERE id = ?2 AND NOT ` + impliedRow

// appendFoldSQL is appendRecordSQL for a record that may fold into the
// history's last one (foldHistory), with the same parameters in order.
var appendFoldSQL = `UPDATE jobs SET history = ` + foldHistory + ` WHERE id = ? AND NOT ` + impliedRow

// appendHistory is the new value of the history column with the record ?1
// appended: the array is kept as text and extended without parsing it.
const appendHistory = `CASE WHEN history IS NULL THEN '[' || ?1 || ']'
	ELSE substr(history, 1, length(history) - 1) || ',' || ?1 || ']' END`

// Redrive returns a terminal job to waiting with fresh budgets.
func (s *Store) Redrive(ctx context.Context, id string, now time.Time) (*job.Job, error) {
	var out *job.Job
	err := s.write(ctx, func(tx *writeTx) error {
		// The reason the job ended with is read before the UPDATE clears it
		// (one writer: nothing changes it in between), for the history line.
		var group int64
		var attempt int
		var reason string
		if err := s.queryRow(tx, `SELECT group_id, attempt, reason FROM jobs WHERE id = ?`, id).Scan(&group, &attempt, &reason); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		res, err := s.exec(tx, `UPDATE jobs SET state = 'waiting', reason = '', finished_at = NULL, eligible_at = ?,
			attempts_congestion = 0, attempts_transient = 0, attempts_schema = 0, result = NULL, updated_at = ?
			WHERE id = ? AND state = 'terminal'`, ns(now), ns(now), id)
		if err := s.guarded(tx, res, err, id); err != nil {
			return err
		}
		if err := s.groupReady(tx, group, now); err != nil {
			return err
		}
		if err := s.appendRecord(tx, id, store.RedriveRecord(now, attempt, job.Reason(reason))); err != nil {
			return err
		}
		out, err = s.getTx(tx, id)
		return err
	})
	return out, err
}

// Delete removes a dead letter.
func (s *Store) Delete(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *writeTx) error {
		res, err := s.exec(tx, `DELETE FROM jobs WHERE id = ? AND state = 'terminal'`, id)
		if err := s.guarded(tx, res, err, id); err != nil {
			return err
		}
		return nil
	})
}

// expireDeadlinesSQL ends the jobs ExpireDeadlines ends. Its WHERE
// repeats the partial index jobs_deadline's own terms word for word:
// SQLite uses a partial index only when it can prove the query's WHERE
// implies the index's, and it proves that term by term, so `state IN
// (...)` against the index's OR of equalities (migration 0019) made this
// UPDATE scan every row of jobs, finished ones included, in an
// interactive-lane write every ReapEvery: the single writer held for the
// whole scan while interactive writes queued behind it (122 ms per reap,
// 679 at most, on a loaded 10,000-file batch-isolation run;
// docs/benchmarks.md, "Session 19 (s19h5)").
const expireDeadlinesSQL = `UPDATE jobs SET state = 'terminal', reason = 'deadline_exceeded', finished_at = ?, updated_at = ?
	WHERE deadline IS NOT NULL AND deadline < ? AND (state = 'accepted' OR state = 'waiting' OR state = 'retry_scheduled')`

// ExpireDeadlines ends not-yet-running jobs whose deadline passed.
func (s *Store) ExpireDeadlines(ctx context.Context, now time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *writeTx) error {
		res, err := s.exec(tx, expireDeadlinesSQL, ns(now), ns(now), ns(now))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Prune deletes up to store.PruneBatch finished jobs that finished before
// before; call it until it returns 0.
func (s *Store) Prune(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *writeTx) error {
		sel := fmt.Sprintf(`SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ? LIMIT %d`, store.PruneBatch)
		res, err := s.exec(tx, `DELETE FROM jobs WHERE id IN (`+sel+`)`, ns(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Expired returns running jobs whose lease expired by now.
func (s *Store) Expired(ctx context.Context, now time.Time, limit int) ([]*job.Job, error) {
	rows, err := s.readQuery(ctx, `SELECT `+jobCols+` FROM jobs
		WHERE state = 'running' AND lease_expires_at <= ? ORDER BY lease_expires_at LIMIT ?`, ns(now), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, func() (*job.Job, error) { return scanJob(rows) })
}
