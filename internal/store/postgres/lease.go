package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// promoteBatch bounds how many due retries one lease call promotes, so that
// a large wave of retries cannot make one lease transaction long.
const promoteBatch = 1000

// Lease admits and leases up to p.Max jobs in one short transaction; see
// store.Lease for the scheduling order and the package comment for why it
// never waits on another node.
func (s *Store) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	var out []*job.Job
	err := s.inPipe(ctx, s.cfg.AsyncLease, func(tx *pipeTx) error {
		var err error
		tx.set(leaseSettings)
		out, err = store.Lease(&leaseTx{ctx: ctx, tx: tx, p: p}, p, newToken)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return out, nil
}

// leaseTx implements store.LeaseTx on one transaction. Every row it returns
// is locked with SKIP LOCKED, so it never waits for another transaction.
type leaseTx struct {
	ctx context.Context
	tx  *pipeTx // its Execs go out with the next read
	p   store.LeaseParams
	// pre holds each lane's first ReadyGroups, fetched by OldestReady in
	// its round trip (see OldestReady), or the batch lane's fetched with
	// the interactive lane's (see ReadyGroups); nil until then.
	pre map[job.Lane]*readyGroups
	// read is set once a ReadyGroups call queried.
	read bool
}

// readyGroups is one ReadyGroups call's arguments and result.
type readyGroups struct {
	f      store.GroupFilter
	now    time.Time
	limit  int
	groups []store.Group
	used   bool
}

var (
	_ store.LeaseTx     = (*leaseTx)(nil)
	_ store.ManyHeadsTx = (*leaseTx)(nil)
	_ store.KeysHeadsTx = (*leaseTx)(nil)
)

// leaseSettings are the lease transaction's settings (pipeTx.set), for
// every statement it runs. With the scans they switch off the planner may
// read job_groups only by a plain index scan, which for the ready-groups
// reads is job_groups_round in round order, stopping at the limit; every
// other lease statement finds its rows by an index anyway (see
// TestLeaseGenericPlans).
//
// Every group a lease serves gets a new row version and a new
// job_groups_round entry (TouchGroups changes served_seq, so the update is
// not HOT), and the old entries stay in the index until a vacuum: at
// 20,000 jobs drained in one burst, thousands of them, with a minute of
// autovacuum naptime. The planner, expecting a handful of rows, read the
// groups by a bitmap scan of every entry of the lane and sorted them:
// each lease read every dead entry again, and its heap tuple, 1,725
// entries per read on average and 223 per job over a drain
// (pg_stat_user_indexes, ratelane bench throughput --store postgres).
// A plain index scan marks an entry whose row version is dead to every
// transaction (LP_DEAD, what a bitmap scan cannot do), so later reads pass
// over it without visiting the heap, and it stops after limit live groups.
//
// force_generic_plan runs every statement on its cached generic plan:
// left to choose, PostgreSQL planned the ready-groups read afresh at
// about half its executions (534-540 plans in 1,143-1,151 calls of a
// 20,000-job BenchmarkEngineDrain, 42-47 ms of planning against 38-46 ms
// of execution; pg_stat_statements with track_planning), and the other
// lease statements at their first five executions on each connection.
//
// The settings were once set around the ready-groups reads alone and
// restored after them (four set_config statements a lease); set once
// after BEGIN they cost none of their own (docs/benchmarks.md, "Session
// 18 (s18h3)").
var leaseSettings = newTxSettings(
	"enable_bitmapscan", "off",
	"enable_seqscan", "off",
	"plan_cache_mode", "force_generic_plan",
)

// promoteSQL moves up to $2 due retries to waiting. Rows locked elsewhere
// (a cancel, another node's promotion) are skipped rather than waited
// for; a later call promotes them.
const promoteSQL = `UPDATE jobs SET state = 'waiting', updated_at = $1
		WHERE id IN (SELECT id FROM jobs WHERE state = 'retry_scheduled' AND eligible_at <= $1
			ORDER BY eligible_at LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED)`

// PromoteDue moves due retries to waiting. Their groups need no update: a
// scheduled job's group already has ready_at <= its eligible_at (see
// GroupReady and TouchGroup). The write is queued, and OldestReady, when
// it comes next, runs it in its own statement (promoteOldestSQL).
func (l *leaseTx) PromoteDue(now time.Time) error {
	_, err := l.tx.Exec(l.ctx, promoteSQL, ns(now), promoteBatch)
	return err
}

// oldestReadySQL is the lane's oldest ready eligible_at, NULL when none:
// the first entry of jobs_lane_ready in index order. It is written as
// ORDER BY ... LIMIT 1 rather than min(), which the planner turns into the
// same one-entry read only when its statistics expect many waiting jobs:
// before the first ANALYZE of a freshly filled table (the state of a
// backlog inserted just before its drain) it planned min() as an
// aggregate over every waiting entry, 19 ms and 817 buffers at 20,000
// waiting, against 0.05 ms and 12 buffers.
const oldestReadySQL = `SELECT (SELECT eligible_at FROM jobs WHERE state = 'waiting' AND lane = $1 AND eligible_at <= $2
	ORDER BY eligible_at LIMIT 1)`

// promoteOldestSQL is promoteSQL ($3, $4) and then oldestReadySQL ($1,
// $2) in one statement. Its query does not see the rows its WITH clause
// updates (one snapshot for both), so the jobs promoted into the lane
// are counted from what the update returns.
const promoteOldestSQL = `WITH promoted AS (UPDATE jobs SET state = 'waiting', updated_at = $3
		WHERE id IN (SELECT id FROM jobs WHERE state = 'retry_scheduled' AND eligible_at <= $3
			ORDER BY eligible_at LIMIT $4 FOR NO KEY UPDATE SKIP LOCKED)
		RETURNING lane, eligible_at)
	SELECT LEAST((SELECT eligible_at FROM jobs WHERE state = 'waiting' AND lane = $1 AND eligible_at <= $2
		ORDER BY eligible_at LIMIT 1), (SELECT min(eligible_at) FROM promoted WHERE lane = $1 AND eligible_at <= $2))`

// oldestQuery is the statement and arguments of OldestReady: with the
// promotion folded in when it is still queued.
func (l *leaseTx) oldestQuery(lane job.Lane, now time.Time) (string, []any) {
	if args, ok := l.tx.take(promoteSQL); ok {
		return promoteOldestSQL, append([]any{string(lane), ns(now)}, args...)
	}
	return oldestReadySQL, []any{string(lane), ns(now)}
}

// OldestReady of the interactive lane is what store.Lease asks first,
// before it looks at the batch lane and then the interactive lane, whose
// first ReadyGroups calls follow with arguments known now: the lease's
// filter (the batch lane's with BatchKinds), now, and limits of
// 2*min(BatchMin, BatchLaneCap())+16 and, when the batch
// lane gives nothing, 2*Max+16. Both lanes' groups are read by one
// statement (readyBothSQL), in the round trip of BEGIN, the settings and
// the promotion, so such a lease is three round trips, not five. The
// groups are locked a little earlier, by the same transaction,
// which changes nothing for another node; those a call does not use stay
// locked until the commit, as a ReadyGroups call's unused groups always
// do (SKIP LOCKED: another node takes other groups meanwhile).
func (l *leaseTx) OldestReady(lane job.Lane, now time.Time) (time.Time, bool, error) {
	var at *int64
	sql, args := l.oldestQuery(lane, now)
	if lane != job.LaneInteractive || l.pre != nil {
		err := l.tx.QueryRow(l.ctx, sql, args...).Scan(&at)
		return nullTM(at), at != nil, err
	}
	f := store.GroupFilter{Kinds: l.p.Kinds, Tenant: l.p.Tenant}
	bf := store.GroupFilter{Kinds: l.p.BatchKinds(l.p.BatchCap()), Tenant: l.p.Tenant}
	pre := map[job.Lane]*readyGroups{
		job.LaneBatch:       {f: bf, now: now, limit: 2*min(l.p.BatchMin, l.p.BatchLaneCap()) + 16},
		job.LaneInteractive: {f: f, now: now, limit: 2*l.p.Max + 16},
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(readyBothSQL, append(readyGroupsArgs(job.LaneBatch, bf, now, pre[job.LaneBatch].limit),
		readyGroupsArgs(job.LaneInteractive, f, now, pre[job.LaneInteractive].limit)...)...)
	br := l.tx.SendBatch(l.ctx, b)
	defer br.Close()
	if err := br.QueryRow().Scan(&at); err != nil {
		return time.Time{}, false, err
	}
	groups, err := collectGroups(br.Query())
	if err != nil {
		return time.Time{}, false, err
	}
	for _, g := range groups {
		// Each lane's groups come in their round order: the statement
		// takes row locks, so it never runs in parallel, and its Append
		// returns the batch lane's read and then the interactive lane's.
		pre[g.Lane].groups = append(pre[g.Lane].groups, g)
	}
	l.pre = pre
	return nullTM(at), at != nil, br.Close()
}

// readyGroupsFrom is the ready-groups read of one lane with its arguments
// numbered from $n (see readyGroupsArgs).
func readyGroupsFrom(n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(n+i-1) }
	return `SELECT id, lane, tenant, kind, keys FROM job_groups
		WHERE lane = ` + p(1) + ` AND ready_at <= ` + p(2) + ` AND blocked_until <= ` + p(2) + `
			AND (cardinality(` + p(3) + `::text[]) = 0 OR kind = ANY(` + p(3) + `))
			AND (` + p(5) + ` = '' OR tenant = ` + p(5) + `)
		ORDER BY served_seq LIMIT ` + p(4) + ` FOR NO KEY UPDATE SKIP LOCKED`
}

var (
	// readyGroupsSQL is one lane's ready groups.
	readyGroupsSQL = readyGroupsFrom(1)
	// readyBothSQL is two lanes' ready groups, the first's and then the
	// second's, in one statement. (A locking clause is not allowed on a
	// branch of a UNION; it is on a subquery in FROM.)
	readyBothSQL = `SELECT * FROM (` + readyGroupsFrom(1) + `) AS first UNION ALL SELECT * FROM (` + readyGroupsFrom(6) + `) AS second`
)

func readyGroupsArgs(lane job.Lane, f store.GroupFilter, now time.Time, limit int) []any {
	kinds := f.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	return []any{string(lane), ns(now), kinds, limit, f.Tenant}
}

func collectGroups(rows pgx.Rows, err error) ([]store.Group, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Group, error) {
		var g store.Group
		var lane string
		err := r.Scan(&g.ID, &lane, &g.Tenant, &g.Kind, &g.Keys)
		g.Lane = job.Lane(lane)
		return g, err
	})
}

// ReadyGroups locks the groups it returns, so two nodes take different
// groups. The lock is FOR NO KEY UPDATE, the weakest that excludes other
// lease transactions. (It was chosen so as not to block the key-share
// lock a concurrent Insert took on the group through the jobs.group_id
// foreign key, which migration 0033 dropped.)
//
// A lane's first call is answered by what OldestReady fetched when its
// arguments match, or by nothing when that found no group of the lane; any
// other call queries.
//
// A lease's first query, when it is for the interactive lane and the batch
// lane may come after it (store.Lease's steps: no batch share first, then
// interactive, then batch up to its bound), reads the batch lane's groups
// too, in the same statement (readyBothSQL): the batch lane's read is then
// answered from it, without a round trip of its own when it found no
// group, the usual case of a queue with no batch work (half the ready
// reads of a bench/peers throughput run, one round trip in every lease).
// It reads at most one batch group: "none" is all it can answer (a
// group found makes the batch read query again, with its own limit, as
// before), and a lease whose interactive lane fills it keeps at most that
// one batch group locked until its commit, not a batch read's worth.
func (l *leaseTx) ReadyGroups(lane job.Lane, f store.GroupFilter, now time.Time, limit int) ([]store.Group, error) {
	if rg := l.pre[lane]; rg != nil && !rg.used && rg.now.Equal(now) &&
		rg.f.Tenant == f.Tenant && slices.Equal(rg.f.Kinds, f.Kinds) && (len(rg.groups) == 0 || rg.limit == limit) {
		rg.used = true // once: the shared code may look again after its leases changed the lane
		return rg.groups, nil
	}
	first := !l.read
	l.read = true
	if first && l.pre == nil && lane == job.LaneInteractive && l.p.Lane == "" && l.p.BatchLaneCap() > 0 {
		bf := store.GroupFilter{Kinds: l.p.BatchKinds(l.p.BatchCap()), Tenant: l.p.Tenant}
		const bl = 1 // see above: a read of limit 1 answers only "none"
		groups, err := collectGroups(l.tx.Query(l.ctx, readyBothSQL,
			append(readyGroupsArgs(job.LaneInteractive, f, now, limit), readyGroupsArgs(job.LaneBatch, bf, now, bl)...)...))
		if err != nil {
			return nil, err
		}
		batch := &readyGroups{f: bf, now: now, limit: bl}
		var inter []store.Group
		for _, g := range groups {
			if g.Lane == job.LaneBatch {
				batch.groups = append(batch.groups, g)
			} else {
				inter = append(inter, g)
			}
		}
		l.pre = map[job.Lane]*readyGroups{job.LaneBatch: batch}
		return inter, nil
	}
	return collectGroups(l.tx.Query(l.ctx, readyGroupsSQL, readyGroupsArgs(lane, f, now, limit)...))
}

func (l *leaseTx) Heads(g store.Group, now time.Time, limit int) ([]store.Candidate, error) {
	rows, err := l.tx.Query(l.ctx, `SELECT id, cost FROM jobs WHERE group_id = $1 AND state = 'waiting' AND eligible_at <= $2
		ORDER BY priority DESC, eligible_at, id LIMIT $3 FOR NO KEY UPDATE SKIP LOCKED`, g.ID, ns(now), limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[store.Candidate])
}

// manyHeadsSQL is the Heads query run once per group by a lateral join.
const manyHeadsSQL = `SELECT g.id, h.id, h.cost FROM unnest($1::bigint[]) AS g(id)
	CROSS JOIN LATERAL (SELECT id, cost FROM jobs WHERE group_id = g.id AND state = 'waiting' AND eligible_at <= $2
		ORDER BY priority DESC, eligible_at, id LIMIT $3 FOR NO KEY UPDATE SKIP LOCKED) AS h`

// ManyHeads fetches several groups' heads in one round trip.
func (l *leaseTx) ManyHeads(gs []store.Group, now time.Time, limit int) (map[int64][]store.Candidate, error) {
	rows, err := l.tx.Query(l.ctx, manyHeadsSQL, groupIDs(gs), ns(now), limit)
	if err != nil {
		return nil, err
	}
	return collectHeads(rows, len(gs))
}

// LockKeysManyHeads is LockKeys and then ManyHeads in one round trip.
func (l *leaseTx) LockKeysManyHeads(names []string, gs []store.Group, now time.Time, limit int) (map[string]*admission.State, map[int64][]store.Candidate, error) {
	b := &pgx.Batch{}
	b.Queue(lockKeysSQL(true), slices.Sorted(slices.Values(names)), []string{})
	b.Queue(manyHeadsSQL, groupIDs(gs), ns(now), limit)
	br := l.tx.SendBatch(l.ctx, b)
	defer br.Close()
	keys, err := collectKeys(br.Query())
	if err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	heads, err := collectHeads(rows, len(gs))
	if err != nil {
		return nil, nil, err
	}
	return keys, heads, br.Close()
}

func groupIDs(gs []store.Group) int8Array {
	ids := make(int8Array, len(gs))
	for i, g := range gs {
		ids[i] = g.ID
	}
	return ids
}

// collectHeads reads manyHeadsSQL's rows, which come group by group (the
// lateral join runs once per group, in the order of the ids), into one
// slice of candidates, and maps each group to its part of it: an append
// per row to a slice per group grew each one separately (four allocations
// a job of a 20,000-job drain).
func collectHeads(rows pgx.Rows, groups int) (map[int64][]store.Candidate, error) {
	defer rows.Close()
	out := make(map[int64][]store.Candidate, groups)
	var (
		all   []store.Candidate
		start int
		// Scanned into once per call: a row's own variables escaped to
		// the heap, two allocations a row.
		g, cur int64
		c      store.Candidate
		dest   = []any{&g, &c.ID, &c.Cost}
	)
	flush := func() {
		if len(all) == start {
			return
		}
		// The capacity ends at the group's last candidate, so that an
		// append to one group's slice cannot write the next's.
		part := all[start:len(all):len(all)]
		if prev, ok := out[cur]; ok { // the group again (not expected)
			part = append(slices.Clip(prev), part...)
		}
		out[cur] = part
		start = len(all)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if g != cur {
			flush()
			cur = g
		}
		all = append(all, c)
	}
	flush()
	return out, rows.Err()
}

// LockKeys leaves out keys another transaction holds; the shared code then
// skips the group for this call, which is what keeps two nodes from both
// spending one key's tokens.
func (l *leaseTx) LockKeys(names []string) (map[string]*admission.State, error) {
	return lockKeys(l.ctx, l.tx, names, nil, true)
}

func (l *leaseTx) SaveKeys(keys []*admission.State) error { return saveKeys(l.ctx, l.tx, keys) }

// touchGroupsFrom is TouchGroups' update with its three arrays numbered
// from $n. The sequence numbers are drawn in the given order: the
// innermost query is sorted by ordinality and materialized (OFFSET 0)
// before nextval runs over it, so the round order is the one the caller
// chose.
func touchGroupsFrom(n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(n+i-1) }
	return `UPDATE job_groups g SET served_seq = u.seq, blocked_until = u.blocked,
		ready_at = CASE WHEN u.empty THEN LEAST(
			(SELECT min(eligible_at) FROM jobs WHERE group_id = g.id AND state = 'waiting'),
			(SELECT min(eligible_at) FROM jobs WHERE group_id = g.id AND state = 'retry_scheduled')) ELSE g.ready_at END
		FROM (SELECT o.id, o.blocked, o.empty, nextval('job_groups_served_seq') AS seq FROM (
			SELECT * FROM unnest(` + p(1) + `::bigint[], ` + p(2) + `::bigint[], ` + p(3) + `::bool[]) WITH ORDINALITY AS t(id, blocked, empty, n)
			ORDER BY n OFFSET 0) AS o) AS u
		WHERE g.id = u.id`
}

// touchGroupsSQL is TouchGroups' statement; MarkLeased takes it out of
// the queue when it is still there (markLeasedTouchSQL).
var touchGroupsSQL = touchGroupsFrom(1)

// TouchGroups moves the groups to the back of the round, in order, by
// drawing new served_seq values, in one statement. An empty group's
// ready_at becomes the earliest eligible_at of its waiting and scheduled
// jobs (NULL when none), a lower bound that GroupReady and Insert only ever
// lower.
func (l *leaseTx) TouchGroups(touches []store.GroupTouch) error {
	ids := make([]int64, len(touches))
	blocked := make([]int64, len(touches))
	empty := make([]bool, len(touches))
	for i, t := range touches {
		ids[i], blocked[i], empty[i] = t.ID, ns(t.BlockedUntil), t.Empty
	}
	_, err := l.tx.Exec(l.ctx, touchGroupsSQL, int8Array(ids), int8Array(blocked), empty)
	return err
}

// markLeasedSQL leases the jobs $1 with the tokens $2. The guard on state
// is written so that it cannot use an index (see stateIs).
var markLeasedSQL = `UPDATE jobs SET state = 'running', lease_token = u.token,
		lease_expires_at = $4, attempt = attempt + 1, updated_at = $3
	FROM unnest($1::text[], $2::text[]) AS u(leased_id, token)
	WHERE id = u.leased_id AND ` + stateIs("waiting") + `
	RETURNING ` + jobCols

// markLeasedTouchSQL is the last TouchGroups ($5-$7) and markLeasedSQL in
// one statement. The touch used to run first, on its own; in the WITH
// clause it reads the same jobs (one snapshot, before the jobs' update),
// so an empty group's ready_at comes out the same. The two write
// different tables, whose rows this transaction has locked already (the
// groups by ReadyGroups, the jobs by Heads), so the order of the writes
// between them, SaveKeys' included, changes nothing.
var markLeasedTouchSQL = `WITH touched AS (` + touchGroupsFrom(5) + `) ` + markLeasedSQL

// MarkLeased leases every chosen job in one UPDATE, each with its own token,
// and returns them in the order they were chosen. A TouchGroups still
// queued goes into the same statement.
func (l *leaseTx) MarkLeased(leased []store.Leased, now, until time.Time) ([]*job.Job, error) {
	ids, tokens := make([]string, len(leased)), make([]string, len(leased))
	for i, c := range leased {
		ids[i], tokens[i] = c.ID, c.Token
	}
	sql, args := markLeasedSQL, []any{textArray(ids), textArray(tokens), ns(now), ns(until)}
	if touch, ok := l.tx.take(touchGroupsSQL); ok {
		sql, args = markLeasedTouchSQL, append(args, touch...)
	}
	// The lease's last statement: COMMIT goes out with it.
	jobs, err := collectJobs(l.tx.QueryCommit(l.ctx, sql, args...))
	if err != nil {
		return nil, err
	}
	if len(jobs) != len(leased) {
		// Heads locked every candidate, so this is a bug, not a race.
		return nil, fmt.Errorf("mark leased: %d of %d jobs were no longer waiting", len(leased)-len(jobs), len(leased))
	}
	byID := make(map[string]*job.Job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	for i, c := range leased {
		jobs[i] = byID[c.ID]
	}
	return jobs, nil
}

// stateIs is a guard on a job's state, for an UPDATE that finds its rows
// by id, written so that the planner cannot match it to the partial
// indexes on state (jobs_lane_ready, jobs_group_head, jobs_leases): their
// predicate is "state = '...'", and an expression over state does not
// imply it. The rows are then found by jobs_pkey, one lookup per id, or
// by a scan of the table when its real size (which the planner knows
// without statistics) makes that cheaper, i.e. for a small table.
// Written plainly, the guard let the planner read every row of the state
// through the partial index and hash-join the ids against them whenever
// its statistics expected few such rows, as before the first ANALYZE of a
// freshly filled table: a 64-job MarkLeased read all 20,000 waiting jobs
// (1,425 buffers, 21 ms; 809 buffers, 0.9 ms by id).
func stateIs(state string) string {
	return `(jobs.state || '') = '` + state + `'`
}

// Heartbeat extends a running job's lease to until, if token still holds
// it: ErrConflict when the lease was lost, ErrNotFound when there is no job.
func (s *Store) Heartbeat(ctx context.Context, id, token string, until time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET lease_expires_at = $3 WHERE id = $1 AND state = 'running' AND lease_token = $2`,
		id, token, ns(until))
	return guarded(ctx, s.pool, tag, err, id)
}

// Expired returns up to limit running jobs whose lease expired by now,
// oldest expiry first. It locks nothing: the reaper ends each with a
// guarded Finish, which a worker that is merely late loses or wins cleanly.
func (s *Store) Expired(ctx context.Context, now time.Time, limit int) ([]*job.Job, error) {
	return collectJobs(s.pool.Query(ctx, `SELECT `+jobCols+` FROM jobs
		WHERE state = 'running' AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2`, ns(now), limit))
}
