package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// Existing=true. Jobs of another region are refused; a job whose id is
// taken fails the call with store.ErrConflict.
//
// A small call (single-job HTTP enqueues) is coalesced with the calls of
// other goroutines that wait at the same moment into one transaction (see
// inserter); each still gets its own results and its own error.
//
// Locks are taken in one global order (new keys by name, groups by
// lane/tenant/kind/keys, jobs by tenant/idempotency key), so concurrent
// inserts wait for each other but never deadlock.
func (s *Store) Insert(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if err := store.CheckInsert(s.cfg.Region, jobs); err != nil {
		return nil, err
	}
	var res []store.InsertResult
	err := s.costChecked(ctx, jobs, def, func() (err error) {
		res, err = s.insertOrCoalesce(ctx, jobs, def)
		return err
	})
	return res, err
}

// costChecked runs insert, an insert of jobs that checks ctx's costs in
// SQL (costCheckSQL) when ctx asks for the check (store.WithCostCheck),
// and words a refusal as CheckCosts does. A cost no key admits is refused
// before insert runs; after a refusal in SQL, which rolled everything
// back, CheckCosts reads the configurations and names it. Should it find
// none, a reconfiguration committed in between admitted the cost: insert
// runs again, checked again, up to maxTxAttempts times.
func (s *Store) costChecked(ctx context.Context, jobs []*job.Job, def admission.Config, insert func() error) error {
	check := store.CostCheck(ctx)
	if check && !store.CostBounded(jobs) {
		// A cost no key admits: CheckCosts names it without a key's help.
		if err := store.CheckCosts(ctx, s, jobs, def); err != nil {
			return err
		}
	}
	for attempt := 1; ; attempt++ {
		err := insert()
		if !check || pgCode(err) != costRefusedCode {
			return err
		}
		if err := store.CheckCosts(ctx, s, jobs, def); err != nil {
			return err
		}
		if attempt == maxTxAttempts {
			return err
		}
	}
}

// insertOrCoalesce is Insert after its checks: a small call coalesced
// with others (inserter), a large one alone.
func (s *Store) insertOrCoalesce(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	if len(jobs) <= coalesceMaxCall {
		return s.inserts.insert(ctx, jobs, def)
	}
	return s.insertNow(ctx, jobs, def)
}

// costRefusedCode is the SQLSTATE of cost_refused (migration 0037).
const costRefusedCode = "RLC01"

// costCheckSQL fails its transaction (cost_refused) when one of the keys
// $1, each with the largest cost $2 of a job naming it (store.MaxCosts),
// can never admit that cost: admission.Config.CheckCost for costs from 1
// to admission.MaxCost (store.CostBounded), in SQL. A per-start key
// charges 1; a key's largest start (admission.Config.MaxCost) is the
// least of its burst (defaulted to max(1, rate)) when it has a rate and
// its windows' limits, none (NULL, which refuses nothing) for an unpaced
// key. It runs after the keys' creation, so a key new to this insert is
// checked against def as CheckCosts checks it; it locks nothing.
const costCheckSQL = `SELECT cost_refused(k.name)
	FROM unnest($1::text[], $2::int8[]) AS u(name, cost) JOIN limit_keys k ON k.name = u.name
	WHERE (CASE WHEN k.per_start THEN 1 ELSE u.cost END)::float8 > LEAST(
		CASE WHEN k.rate > 0 THEN COALESCE(NULLIF(k.burst, 0), GREATEST(1, k.rate)) END,
		(SELECT min((w->>'limit')::float8) FROM jsonb_array_elements(k.windows) AS w))`

// insertNow is Insert in a transaction of its own: one round trip (BEGIN,
// key creation, group upsert, job insert and COMMIT pipelined), plus one
// read after the commit when some jobs met an existing idempotency key.
// The statements take whole arrays (unnest), so their number does not grow
// with the batch: 1,000 jobs were 1,000 INSERT executions on the server.
func (s *Store) insertNow(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	out, _, err := s.insertLeaseNow(ctx, jobs, def, store.LeaseParams{})
	return out, err
}

// insertLeaseNow is insertNow and then, when p.Max > 0, Lease with p in
// the same transaction (store.InsertLeaser): the insert's round trip goes
// without COMMIT, the lease's follow, and COMMIT with or after its last:
// one transaction and one commit where an insert and a lease made two.
// The lease's locks skip rows locked by other transactions, never the
// insert's own, so it sees the jobs just inserted.
func (s *Store) insertLeaseNow(ctx context.Context, jobs []*job.Job, def admission.Config, p store.LeaseParams) ([]store.InsertResult, []*job.Job, error) {
	out := make([]store.InsertResult, len(jobs))
	var dup []int
	var leased []*job.Job
	err := s.inPipe(ctx, false, func(tx *pipeTx) error {
		leased = nil
		send := tx.SendBatchCommit
		if p.Max > 0 {
			send = tx.SendBatch
		}
		var err error
		if dup, err = sendInsert(ctx, send, jobs, def, out); err != nil || p.Max <= 0 {
			return err
		}
		leased, err = store.Lease(&leaseTx{ctx: ctx, tx: tx, p: p}, p, newToken)
		return err
	})
	if err == nil {
		// After the commit: the jobs holding the idempotency keys are
		// committed too (this insert waited for them on the index entry).
		err = fillExisting(ctx, s.pool, jobs, dup, out)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("insert: %w", err)
	}
	return out, leased, nil
}

func allKeys(jobs []*job.Job) []string {
	var names []string
	for _, j := range jobs {
		names = append(names, j.LimitKeys...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// upsertGroupsSQL creates the groups of $1..$7 or lowers their ready_at
// (a NULL ready_at, a group of accepted jobs only, lowers nothing: LEAST
// ignores NULLs), in lane/tenant/kind/keys order. A group's keys are the
// slice [$4, $5] of the flat array $6, which an array of arrays cannot
// express (unnest flattens it). A group whose ready_at is already early
// enough is locked (ON CONFLICT locks the row even when its WHERE is false),
// which orders this insert with a lease touching the group, but not
// rewritten: a busy group took a new row version per insert.
const upsertGroupsSQL = `INSERT INTO job_groups (lane, tenant, kind, keys, ready_at)
	SELECT g.lane, g.tenant, g.kind, ($6::text[])[g.ks:g.ke], g.ready
	FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $7::bigint[]) AS g(lane, tenant, kind, ks, ke, ready)
	ORDER BY g.lane, g.tenant, g.kind, ($6::text[])[g.ks:g.ke]
	ON CONFLICT (lane, tenant, kind, keys) DO UPDATE SET ready_at = LEAST(job_groups.ready_at, EXCLUDED.ready_at)
		WHERE job_groups.ready_at IS DISTINCT FROM LEAST(job_groups.ready_at, EXCLUDED.ready_at)`

// insertJobsSQL inserts jobs, each with its group's id. The ids are
// looked up once per group, by the group's unique key (the group statement
// before it created or found every one), into the array gid.ids in the
// groups' order ($23..$27 and the flat array $28, as upsertGroupsSQL's $1
// to $6), and each job takes element $7 of it. (A lookup per job, a
// subquery in the select list, was 1.0 index scan and row fetch of
// job_groups per job: 1,000 for a 1,000-job batch over 16 groups.) A job's
// limit keys are [ks, ke] of the flat array $6. The jobs with an
// idempotency key go in with insertKeyedSQL, the others with
// insertPlainSQL.
const insertJobsSQL = `INSERT INTO jobs (id, kind, region, lane, tenant, limit_keys, cost, priority, payload,
		idempotency_key, deadline, budget_congestion, budget_transient, budget_schema, parent_id, depth, group_id,
		state, eligible_at, created_at, updated_at)
	SELECT u.id, u.kind, $1::text, u.lane, u.tenant, ($6::text[])[u.ks:u.ke], u.cost, u.priority, u.payload,
		u.idem, u.deadline, u.bc, u.bt, u.bs, u.parent, u.depth, gid.ids[u.g],
		u.state, u.eligible, u.created, u.created
	FROM (SELECT array_agg((SELECT g.id FROM job_groups g WHERE g.lane = o.lane AND g.tenant = o.tenant
				AND g.kind = o.kind AND g.keys = ($28::text[])[o.ks:o.ke]) ORDER BY o.n) AS ids
			FROM unnest($23::text[], $24::text[], $25::text[], $26::int[], $27::int[]) WITH ORDINALITY
				AS o(lane, tenant, kind, ks, ke, n)) AS gid,
		unnest($2::text[], $3::text[], $4::text[], $5::text[], $8::int[], $9::int[], $10::bigint[], $11::int[],
		$12::bytea[], $13::text[], $14::bigint[], $15::int[], $16::int[], $17::int[], $18::text[], $19::text[],
		$20::text[], $21::bigint[], $22::bigint[], $7::int[]) WITH ORDINALITY
		AS u(id, kind, lane, tenant, ks, ke, cost, priority, payload, idem, deadline, bc, bt, bs, parent, depth,
			state, eligible, created, g, n)`

// insertKeyedSQL inserts jobs that have an idempotency key, in (tenant,
// key) order, and returns the ids of those inserted; the others met an
// existing key (also one earlier in the same batch).
const insertKeyedSQL = insertJobsSQL + `
	ORDER BY u.tenant, u.idem, u.n
	ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key <> '' DO NOTHING
	RETURNING id`

// insertPlainSQL inserts jobs without an idempotency key. Without ON
// CONFLICT a row is a plain insert: ON CONFLICT makes each row a
// speculative insertion, with a confirmation record in the WAL (48 bytes
// per job) and its own index pre-check, even for rows its partial index
// can never hold.
const insertPlainSQL = insertJobsSQL

// sendInsert sends, through send, the statements that insert jobs: the
// limit keys' creation, the cost check when ctx asks for it
// (store.WithCostCheck), the groups' upsert and the jobs' inserts (those
// without an idempotency key, then those with one), each one statement for
// the whole batch. It fills out for the jobs inserted and returns the
// indexes of those that met an existing idempotency key (fillExisting
// reads them). A taken job id fails it with ErrConflict.
func sendInsert(ctx context.Context, send func(context.Context, *pgx.Batch) pgx.BatchResults, jobs []*job.Job,
	def admission.Config, out []store.InsertResult) ([]int, error) {
	b := &pgx.Batch{}
	queueEnsureKeys(b, allKeys(jobs), def)
	if store.CostCheck(ctx) {
		names, costs := store.MaxCosts(jobs)
		b.Queue(costCheckSQL, textArray(names), int8Array(costs))
	}
	groups := queueUpsertGroups(b, jobs)
	var plain, keyed []*job.Job
	for _, j := range jobs {
		if j.IdempotencyKey == "" {
			plain = append(plain, j)
		} else {
			keyed = append(keyed, j)
		}
	}
	if len(plain) > 0 {
		b.Queue(insertPlainSQL, insertJobsArgs(plain, groups)...).Exec(func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() != int64(len(plain)) {
				return fmt.Errorf("inserted %d of %d jobs", tag.RowsAffected(), len(plain))
			}
			return nil
		})
	}
	inserted := make(map[string]bool, len(keyed))
	if len(keyed) > 0 {
		b.Queue(insertKeyedSQL, insertJobsArgs(keyed, groups)...).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				inserted[id] = true
			}
			return rows.Err()
		})
	}
	if err := send(ctx, b).Close(); err != nil {
		if pgCode(err) == "23505" {
			return nil, fmt.Errorf("%w: a job id is taken: %w", store.ErrConflict, err)
		}
		return nil, err
	}
	var dup []int
	for i, j := range jobs {
		if j.IdempotencyKey == "" || inserted[j.ID] {
			out[i] = store.InsertResult{Job: storedCopy(j)}
		} else {
			dup = append(dup, i)
		}
	}
	return dup, nil
}

// insertGroups are the groups of an insert: upsertGroupsSQL's first six
// arrays, which insertJobsSQL takes again to look the groups' ids up, and
// each group's ordinal (from 1) in them.
type insertGroups struct {
	args []any
	n    map[groupKey]int32
}

// queueUpsertGroups queues the upsert of the jobs' groups: each group once,
// ready at its earliest waiting job (NULL when it has none here).
func queueUpsertGroups(b *pgx.Batch, jobs []*job.Job) insertGroups {
	ready := map[groupKey]*int64{}
	var order []groupKey
	for _, j := range jobs {
		g := groupOf(j)
		at, seen := ready[g]
		if !seen {
			order = append(order, g)
		}
		if j.State == job.StateWaiting && (at == nil || ns(j.EligibleAt) < *at) {
			at = nullNS(j.EligibleAt)
			if at == nil {
				at = new(int64) // a zero EligibleAt is "now"
			}
		}
		ready[g] = at
	}
	n := len(order)
	lanes, tenants, kinds := make([]string, n), make([]string, n), make([]string, n)
	ks, ke, at := make([]int32, n), make([]int32, n), make([]*int64, n)
	ord := make(map[groupKey]int32, n)
	var flat []string
	for i, g := range order {
		lanes[i], tenants[i], kinds[i], at[i] = string(g.lane), g.tenant, g.kind, ready[g]
		ks[i] = int32(len(flat) + 1)
		flat = append(flat, strings.Split(g.keys, "\x00")...)
		ke[i] = int32(len(flat))
		ord[g] = int32(i + 1)
	}
	args := []any{textArray(lanes), textArray(tenants), textArray(kinds), ks, ke, textArray(flat)}
	b.Queue(upsertGroupsSQL, append(args, nullInt8Array(at))...)
	return insertGroups{args: args, n: ord}
}

// insertJobsArgs are the arguments of insertJobsSQL for jobs (at least
// one) of the insert whose groups are groups: one array per column.
func insertJobsArgs(jobs []*job.Job, groups insertGroups) []any {
	n := len(jobs)
	var (
		ids, kinds, lanes, tenants, idems = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		parents, depths, states           = make([]string, n), make([]string, n), make([]string, n)
		ks, ke, prios, bc, bt, bs, gs     = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		costs, eligible, created          = make([]int64, n), make([]int64, n), make([]int64, n)
		deadlines                         = make([]*int64, n)
		payloads                          = make([][]byte, n)
		keys                              []string
	)
	for i, j := range jobs {
		ids[i], kinds[i], lanes[i], tenants[i], idems[i] = j.ID, j.Kind, string(j.Lane), j.Tenant, j.IdempotencyKey
		parents[i], depths[i], states[i] = j.ParentID, j.Depth, string(j.State)
		ks[i] = int32(len(keys) + 1)
		keys = append(keys, j.LimitKeys...)
		ke[i], gs[i] = int32(len(keys)), groups.n[groupOf(j)]
		prios[i], bc[i], bt[i], bs[i] = int32(j.Priority), int32(j.Budgets.Congestion), int32(j.Budgets.Transient), int32(j.Budgets.Schema)
		costs[i], eligible[i], created[i] = j.Cost, ns(j.EligibleAt), ns(j.CreatedAt)
		deadlines[i], payloads[i] = nullNS(j.Deadline), nullBytes(j.Payload)
	}
	return append([]any{jobs[0].Region, textArray(ids), textArray(kinds), textArray(lanes), textArray(tenants), textArray(keys),
		gs, ks, ke, int8Array(costs), prios, payloads, textArray(idems), nullInt8Array(deadlines), bc, bt, bs,
		textArray(parents), textArray(depths), textArray(states), int8Array(eligible), int8Array(created)}, groups.args...)
}

// storedCopy is the job as a read of the row just inserted returns it: the
// columns the insert wrote, at the precision they are stored in (times in
// Unix nanoseconds, read back in UTC), and the defaults of the rest.
func storedCopy(j *job.Job) *job.Job {
	return &job.Job{
		ID: j.ID, Kind: j.Kind, Region: j.Region, Lane: j.Lane, Tenant: j.Tenant,
		LimitKeys: slices.Clone(j.LimitKeys), Cost: j.Cost, Priority: j.Priority,
		Payload: rawJSON(slices.Clone(j.Payload)), IdempotencyKey: j.IdempotencyKey,
		Deadline: nullTM(nullNS(j.Deadline)), Budgets: j.Budgets, ParentID: j.ParentID, Depth: j.Depth,
		State: j.State, EligibleAt: tm(ns(j.EligibleAt)), CreatedAt: tm(ns(j.CreatedAt)), UpdatedAt: tm(ns(j.CreatedAt)),
	}
}

// insertJobs inserts jobs in the transaction tx (after the caller's own
// statements) and fills out; a job that hit an existing idempotency key
// gets the existing job.
func insertJobs(ctx context.Context, tx pgx.Tx, jobs []*job.Job, def admission.Config, out []store.InsertResult) error {
	dup, err := sendInsert(ctx, tx.SendBatch, jobs, def, out)
	if err != nil {
		return err
	}
	return fillExisting(ctx, tx, jobs, dup, out)
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
// without their history (store.ListQuery). Only the filters set appear in
// the SQL, so each combination gets its own cached statement and a plan
// that uses its index.
func (s *Store) List(ctx context.Context, p store.ListParams) ([]*job.Job, error) {
	q := listQuery(p)
	return collectJobs(s.pool.Query(ctx, q.Numbered(), q.Args()...))
}

// listQuery is List's statement; a group's keys are a text[]. A key in
// any state or a final one is read group by group (store.ListKeyQuery):
// there is no index on group_id over every state here. A tenant in any
// state is read from the index of its jobs that are not running and from
// jobs_leases (store.ListTenantQuery): there is no index on tenant over
// every state either (migration 0034).
func listQuery(p store.ListParams) *store.Query {
	switch {
	case store.KeyListNeedsGroups(p):
		return store.ListKeyQuery(jobCols, p, `? = ANY(keys)`)
	case store.TenantListNeedsUnion(p):
		return store.ListTenantQuery(jobCols, p)
	}
	return store.ListQuery(jobCols, p, `? = ANY(keys)`)
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

// statsOldestQuery is the driver's query of store.SQLReads.OldestReady:
// per lane, the first entries of the partial indexes jobs_lane_ready
// (waiting) and jobs_scheduled (retry_scheduled), not a scan of the ready
// jobs. ORDER BY ... LIMIT 1 rather than min(): see oldestReadySQL.
func statsOldestQuery(lane job.Lane, now time.Time) *store.Query {
	return store.NewQuery(`SELECT least(
			(SELECT eligible_at FROM jobs WHERE state = 'waiting' AND lane = ? AND eligible_at <= ? ORDER BY eligible_at LIMIT 1),
			(SELECT eligible_at FROM jobs WHERE state = 'retry_scheduled' AND eligible_at <= ? AND lane = ? ORDER BY eligible_at LIMIT 1))`,
		string(lane), ns(now), ns(now), string(lane))
}

// Backlog returns, for each named key, the total cost of the jobs waiting on
// it (waiting or retry_scheduled) in lane and every lane scheduled before
// it. Every named key is in the result, with 0 when nothing waits.
func (s *Store) Backlog(ctx context.Context, lane job.Lane, keys []string) (map[string]int64, error) {
	lanes := store.BacklogLanes(lane)
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
