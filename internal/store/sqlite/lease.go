package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Lease admits and leases jobs in one write; see store.Lease for the order.
func (s *Store) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	var out []*job.Job
	err := s.write(ctx, func(tx *writeTx) error {
		var err error
		out, err = (&txOps{s: s, tx: tx}).lease(p)
		return err
	})
	return out, err
}

// leaseIfMay is FinishLease's lease: it runs the lease only when a read
// in the same transaction (mayLease) says it may take something. The
// write statistics of a cpulabels build time the two steps by the
// write's lane.
func (o *txOps) leaseIfMay(lane job.Lane, p store.LeaseParams) ([]*job.Job, error) {
	t0 := stepStart()
	may, err := o.mayLease(p)
	if err != nil || !may {
		noteStep(lane, "FinishLease read, no lease", t0)
		return nil, err
	}
	noteStep(lane, "FinishLease read", t0)
	t1 := stepStart()
	out, err := o.lease(p)
	noteStep(lane, "FinishLease lease", t1)
	return out, err
}

// lease runs store.Lease on o under one new token for the whole call:
// MarkLeased marks every job of a call with it (one constant in its
// UPDATE) and refuses a call that hands out more than one. Lease and
// FinishLease both go through here so that they cannot disagree.
func (o *txOps) lease(p store.LeaseParams) ([]*job.Job, error) {
	o.s.leaseRuns.Add(1)
	token := newToken()
	return store.Lease(o, p, func() string { return token })
}

// Finish applies attempt-ending transitions in one write.
func (s *Store) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	var out []error
	err := s.write(ctx, func(tx *writeTx) error {
		var err error
		out, err = store.Finish(&txOps{s: s, tx: tx}, ts)
		return err
	})
	return out, err
}

// FinishLease finishes ts and then leases with p in one write (see
// store.FinishLeaser): one commit, one fsync, instead of two. With
// p.Released set it leases only when the finish released something, and
// it runs the lease only when a read in the same transaction says the
// lease may take something (leaseIfMay).
func (s *Store) FinishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	var errs []error
	var out []*job.Job
	var released bool
	err := s.write(ctx, func(tx *writeTx) error {
		ops := &txOps{s: s, tx: tx}
		var err error
		out = nil
		if errs, released, err = store.FinishReleased(ops, ts); err != nil || p.Max <= 0 || p.Released != nil && !released {
			return err
		}
		// A finish's lease took nothing in most cases beside a sweep (509
		// of 512 interactive finishes' in a 10,000-file batch-isolation
		// sweep: no turn free, no interactive job ready), each running the
		// lease's statements in the writer's transaction: one read in the
		// same transaction, which sees what the finish released, says
		// whether the lease may take anything (docs/benchmarks.md,
		// "Session 31 (s31h2)").
		out, err = ops.leaseIfMay(store.LaneOf(ctx), p)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if p.Released != nil {
		p.Released(released)
	}
	return errs, out, nil
}

var _ store.FinishLeaser = (*Store)(nil)

// txOps implements store.LeaseTx and store.FinishTx on the writer's
// transaction. The single writer makes every lock trivially held.
type txOps struct {
	s  *Store
	tx *writeTx
	// groups is what Heads learned of each candidate, for MarkLeased: its
	// group (a job's kind, lane and tenant are its group's, so they are
	// not read back) and its rowid. One txOps serves one lease call.
	groups map[string]head
	// args is endAttempt's argument list, reused job after job (the
	// driver does not keep it past the statement); now and token hold
	// the last boxed time and lease token: a Finish's transitions share
	// them as a rule (one lease call's token, one finish time), and
	// boxing each again was an allocation per job.
	args  []any
	now   boxed[int64]
	token boxed[string]
}

// boxed keeps a value converted to an interface once, for as long as the
// same value is asked for again.
type boxed[T comparable] struct {
	v  T
	b  any
	ok bool
}

// of returns v as an interface, reusing the last conversion when v is
// the same value.
func (x *boxed[T]) of(v T) any {
	if !x.ok || x.v != v {
		x.v, x.b, x.ok = v, v, true
	}
	return x.b
}

// head is what Heads learned of a candidate: its group, rowid and cost.
type head struct {
	g     *store.Group
	rowid int64
	cost  int64
}

func (o *txOps) PromoteDue(now time.Time) error {
	_, err := o.s.exec(o.tx, `UPDATE jobs SET state = 'waiting', updated_at = ?
		WHERE state = 'retry_scheduled' AND eligible_at <= ?`, ns(now), ns(now))
	return err
}

func (o *txOps) OldestReady(lane job.Lane, now time.Time) (time.Time, bool, error) {
	var at sql.NullInt64
	err := o.s.queryRow(o.tx, oldestWaitingSQL(lane), lane, ns(now)).Scan(&at)
	return tm(at), at.Valid, err
}

// oldestWaitingSQL is the query for the eligible_at of lane's oldest
// waiting job that is eligible at now (parameters: ?1 the lane, ?2 now),
// NULL if none. Since migration 0032 only the interactive lane has an
// index of its own: a batch job writes no entry for this read, which runs
// on every lease for the interactive lane only (its latency budget) and
// for the batch lane in Stats and the predictor's cached ages.
func oldestWaitingSQL(lane job.Lane) string {
	if lane == job.LaneInteractive {
		return oldestInteractiveSQL
	}
	return oldestByGroupSQL
}

// oldestInteractiveSQL reads the first entry of jobs_interactive_ready.
// The lane is a literal, not ?1 (which it leaves unused): the planner uses
// a partial index only where it can see the query implies the index's WHERE.
const oldestInteractiveSQL = `SELECT min(eligible_at) FROM jobs
	WHERE state = 'waiting' AND lane = 'interactive' AND eligible_at <= ?2`

// oldestByGroupSQL finds a lane's oldest ready job through jobs_group_head
// (group_id, priority DESC, eligible_at, id), which is ordered by priority
// before eligible_at: a recursive walk visits each of the lane's groups'
// priorities present among its waiting jobs (one index seek each), and
// the first entry of each (group, priority) is that tier's oldest job. The
// groups are the lane's ready ones (job_groups_round): a group's ready_at
// is a lower bound of its waiting jobs' eligible_at, NULL when it has
// none, which the lease's ReadyGroups relies on too. The oldest of all
// the tiers' first entries is the lane's oldest waiting job, ready if it
// is eligible at now; if it is not, no other is. Groups and distinct
// priorities are few next to jobs, and it runs in Stats and the
// predictor's cached reads only, not per lease.
const oldestByGroupSQL = `WITH RECURSIVE tiers(g, p) AS (
		SELECT id, (SELECT priority FROM jobs WHERE group_id = job_groups.id AND state = 'waiting'
			ORDER BY priority DESC LIMIT 1)
		FROM job_groups WHERE lane = ?1 AND ready_at IS NOT NULL AND ready_at <= ?2
		UNION ALL
		SELECT g, (SELECT priority FROM jobs WHERE group_id = tiers.g AND state = 'waiting' AND priority < tiers.p
			ORDER BY priority DESC LIMIT 1)
		FROM tiers WHERE p IS NOT NULL)
	SELECT m FROM (SELECT min((SELECT min(eligible_at) FROM jobs
			WHERE group_id = tiers.g AND priority = tiers.p AND state = 'waiting')) AS m
		FROM tiers WHERE p IS NOT NULL)
	WHERE m <= ?2`

// limitScan: ReadyGroups and Heads run on every lease with a limit that
// changes from one lease to the next (the free worker slots). SQLite 3.54
// plans a LIMIT with its bound value, so a new value expires the prepared
// statement and the next run parses and plans it again (measured: every
// Heads run re-prepared, ~7% of the writer's CPU in bench throughput).
// Both queries read an index in the ORDER BY order (no sorter, checked by
// TestLeaseScansNeedNoSort), so they carry no LIMIT and the caller stops
// stepping after limit rows, which costs the same as the LIMIT did.
// SQLite 3.54 also re-plans an ORDER BY query whose bare "col = ?"
// parameter goes from 0 or 1 to another value or back: Heads alternates
// between groups, group 1 among them, so its group id is bound through
// CAST, an expression the planner does not look into (same plan, same
// index; TestLeaseScansNotReprepared counts the re-prepares).
func (o *txOps) ReadyGroups(lane job.Lane, f store.GroupFilter, now time.Time, limit int) ([]store.Group, error) {
	args := []any{lane, ns(now), ns(now)}
	args = append(args, anys(f.Kinds)...)
	if f.Tenant != "" {
		args = append(args, f.Tenant)
	}
	rows, err := o.s.query(o.tx, readyGroupsSQL(f), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Group
	var b anyRow
	for len(out) < limit && rows.Next() {
		v, err := b.scan(rows, 4)
		if err != nil {
			return nil, err
		}
		var c leasedConv
		g := store.Group{ID: c.int(v[0]), Lane: lane, Tenant: c.str(v[1]), Kind: c.str(v[2])}
		keys := c.str(v[3])
		clear(v)
		if c.err != nil {
			return nil, c.err
		}
		if err := jsonStrings(keys, &g.Keys); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// readyGroupsSQL is ReadyGroups' query for f: lane, now, now, then f's
// kinds and tenant. No LIMIT parameter: the index job_groups_round yields
// the rows in served_seq order, so reading stops after limit of them (see
// limitScan). The lane is not read back: it is the one asked for.
func readyGroupsSQL(f store.GroupFilter) string {
	q := `SELECT id, tenant, kind, keys FROM job_groups
		WHERE lane = ? AND ready_at IS NOT NULL AND ready_at <= ? AND blocked_until <= ?`
	if len(f.Kinds) > 0 {
		q += ` AND kind IN (` + placeholders(len(f.Kinds)) + `)`
	}
	if f.Tenant != "" {
		q += ` AND tenant = ?`
	}
	return q + ` ORDER BY served_seq`
}

// headsSQL is Heads' query: group id, now. The partial index
// jobs_group_head is in its order, so the scan stops after limit rows
// without a LIMIT clause; CAST keeps the group id from being a bare
// "col = ?" parameter (see limitScan). The rowid is for MarkLeased, in the
// same transaction (a rowid may change only by VACUUM, which cannot run
// inside it).
const headsSQL = `SELECT id, cost, rowid FROM jobs WHERE group_id = CAST(? AS INTEGER) AND state = 'waiting' AND eligible_at <= ?
		ORDER BY priority DESC, eligible_at, id`

func (o *txOps) Heads(g store.Group, now time.Time, limit int) ([]store.Candidate, error) {
	rows, err := o.s.query(o.tx, headsSQL, g.ID, ns(now))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if o.groups == nil {
		// Sized for a lease of the engine's usual batch: growing a map
		// entry by entry rehashes it at every doubling.
		o.groups = make(map[string]head, 64)
	}
	out := make([]store.Candidate, 0, min(limit, 64))
	for len(out) < limit && rows.Next() {
		c, rowid, err := headScan(rows, &o.s.headScan)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		o.groups[c.ID] = head{&g, rowid, c.Cost}
	}
	return out, rows.Err()
}

// headScan reads one row of headsSQL, the candidate and its rowid,
// through b (anyRow): scanned into directly, a row's variables were two
// heap allocations per head.
func headScan(r scanner, b *anyRow) (store.Candidate, int64, error) {
	v, err := b.scan(r, 3)
	defer clear(v) // holds no row's values after the row
	if err != nil {
		return store.Candidate{}, 0, err
	}
	var c leasedConv
	cand := store.Candidate{ID: c.str(v[0]), Cost: c.int(v[1])}
	rowid := c.int(v[2])
	return cand, rowid, c.err
}

func (o *txOps) LockKeys(names []string) (map[string]*admission.State, error) {
	return o.s.loadKeys(o.tx, names)
}

func (o *txOps) LockKeysWait(names []string) (map[string]*admission.State, error) {
	return o.s.loadKeys(o.tx, names)
}

// ReadKeys is LockKeysWait: the single writer holds every lock.
func (o *txOps) ReadKeys(names []string) (map[string]*admission.State, error) {
	return o.s.loadKeys(o.tx, names)
}

func (o *txOps) SaveKeys(keys []*admission.State) error { return o.s.saveKeys(o.tx, keys) }

func (o *txOps) TouchGroups(touches []store.GroupTouch) error {
	var seq int64
	if err := o.s.queryRow(o.tx, `SELECT coalesce(max(served_seq), 0) FROM job_groups`).Scan(&seq); err != nil {
		return err
	}
	if plainTouches(touches) {
		return o.touchAll(touches, seq)
	}
	for i, t := range touches {
		if err := o.touchGroup(t.ID, seq+int64(i)+1, t.BlockedUntil, t.Empty); err != nil {
			return err
		}
	}
	return nil
}

// plainTouches reports whether every touch only moves its group to the
// back of the round, unblocked and not empty (touchAll): every group of
// a lease on unpaced keys with jobs left.
func plainTouches(touches []store.GroupTouch) bool {
	return len(touches) > 1 && !slices.ContainsFunc(touches, func(t store.GroupTouch) bool {
		return t.Empty || !t.BlockedUntil.IsZero()
	})
}

// touchAll is touchGroup of plain touches (plainTouches) in one UPDATE:
// the groups, a JSON array of their ids in touch order, get the served
// sequence numbers after seq in that order, as one touchGroup each gave
// them; one statement instead of one per group, each a bind of three
// parameters, a step and a reset (docs/benchmarks.md, "Session 19
// (s19h4)").
func (o *txOps) touchAll(touches []store.GroupTouch, seq int64) error {
	ids := intsJSON(touches, func(t store.GroupTouch) int64 { return t.ID })
	res, err := o.s.exec(o.tx, touchAllSQL, seq+1, ids)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(touches)) {
		return errors.Join(err, fmt.Errorf("sqlite: touch groups: %d of %d touched", n, len(touches)))
	}
	return nil
}

// intsJSON is a JSON array of the integer each of xs names, for a
// statement's json_each(?).
func intsJSON[T any](xs []T, n func(T) int64) string {
	b := make([]byte, 0, 2+len(xs)*12)
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, n(x), 10)
	}
	return string(append(b, ']'))
}

// touchAllSQL: the first sequence number, the group ids in order (the
// array's key is each id's position).
const touchAllSQL = `UPDATE job_groups SET blocked_until = 0, served_seq = ?1 + t.key
	FROM json_each(?2) AS t WHERE job_groups.id = t.value`

func (o *txOps) touchGroup(id, seq int64, blockedUntil time.Time, empty bool) error {
	_, err := o.s.exec(o.tx, `UPDATE job_groups SET blocked_until = ?, served_seq = ? WHERE id = ?`, ns(blockedUntil), seq, id)
	if err != nil || !empty {
		return err
	}
	// The group had no eligible job: its next ready time is its earliest
	// waiting or scheduled job, or none.
	// Two lookups, each on its own partial index. CAST: a bare
	// "group_id = ?" here re-prepared on every change between group 1
	// and another (see limitScan).
	_, err = o.s.exec(o.tx, `UPDATE job_groups SET ready_at = (SELECT min(m) FROM (
			SELECT min(eligible_at) AS m FROM jobs WHERE group_id = CAST(?1 AS INTEGER) AND state = 'waiting'
			UNION ALL SELECT min(eligible_at) FROM jobs WHERE group_id = CAST(?1 AS INTEGER) AND state = 'retry_scheduled'))
		WHERE id = ?1`, id)
	return err
}

// MarkLeased takes the one token every job of this lease call carries
// (Store.Lease hands store.Lease a generator that returns it for each
// job). One token for the call, not one per job: the UPDATE then sets a
// constant and finds its rows in a JSON array of the rowids Heads read,
// where a join with a JSON object of per-job tokens (UPDATE ... FROM)
// first copied each row's new values into a temporary table, and by
// rowid, not by id, it descends the table's B-tree only, not the id
// index's first. The token fences as before: it is new at every lease
// call, the finish is guarded on (id, token, attempt), and every job of
// the call goes to the same caller. Nor does the UPDATE return the rows
// (RETURNING is coded as a trigger: it loads every column of the old row
// and buffers the returned ones in another temporary table); a SELECT of
// the same rowids reads them back: 144 VM steps per job against 229
// (docs/benchmarks.md, "Session 12 (s12h4)").
func (o *txOps) MarkLeased(leased []store.Leased, now, until time.Time) ([]*job.Job, error) {
	if len(leased) == 0 {
		return nil, nil
	}
	token := leased[0].Token
	b := make([]byte, 0, 2+len(leased)*12)
	b = append(b, '[')
	ids := make(map[int64]string, len(leased)) // the read-back's rowids
	for i, l := range leased {
		if l.Token != token {
			return nil, fmt.Errorf("sqlite: lease job %s: one token per lease call, got %q and %q", l.ID, token, l.Token)
		}
		h, ok := o.groups[l.ID]
		if !ok {
			return nil, fmt.Errorf("sqlite: lease job %s: not a head of its group in this call", l.ID)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, h.rowid, 10)
		ids[h.rowid] = l.ID
	}
	arg := string(append(b, ']'))
	res, err := o.s.exec(o.tx, markLeasedSQL, token, ns(until), ns(now), arg)
	if err != nil {
		return nil, err
	}
	changed, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	rows, err := o.s.query(o.tx, leasedReadSQL, o.s.cfg.Region, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byID := make(map[string]*job.Job, len(leased))
	var rare map[int64]*job.Job // by rowid: the jobs whose rare columns are read next
	for rows.Next() {
		j, rowid, isRare, err := scanLeased(rows, &o.s.leasedScan)
		if err != nil {
			return nil, err
		}
		if isRare {
			if rare == nil {
				rare = map[int64]*job.Job{}
			}
			rare[rowid] = j
		} else {
			j.Region = o.s.cfg.Region
		}
		// The rowid names the head Heads read in this transaction (no
		// VACUUM can renumber rows inside it): its id, cost and group are
		// known, as are what the UPDATE set and what the group holds; none
		// of them is read back.
		id, ok := ids[rowid]
		if !ok {
			return nil, fmt.Errorf("sqlite: lease: read back rowid %d, not one leased", rowid)
		}
		h := o.groups[id]
		g := h.g
		j.ID, j.Cost = id, h.cost
		j.Kind, j.Lane, j.Tenant = g.Kind, g.Lane, g.Tenant
		j.State, j.LeaseToken, j.LeaseExpiresAt, j.UpdatedAt = job.StateRunning, token, until.UTC(), now.UTC()
		byID[j.ID] = j
		o.s.rememberLease(j, g.ID, h.rowid)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := o.readRare(rare); err != nil {
		return nil, err
	}
	out := make([]*job.Job, 0, len(leased))
	for _, l := range leased {
		j := byID[l.ID]
		if j == nil {
			return nil, fmt.Errorf("lease job %s: not found", l.ID)
		}
		out = append(out, j)
	}
	// Every job read back must be one the UPDATE moved: the transaction
	// rolls back if one was no longer waiting.
	if changed != int64(len(byID)) {
		return nil, fmt.Errorf("lease: %d of %d jobs no longer waiting", int64(len(byID))-changed, len(byID))
	}
	return out, nil
}

// markLeasedSQL moves the jobs named by a JSON array of rowids from
// waiting to running under one token: token, lease expiry, now, rowids.
const markLeasedSQL = `UPDATE jobs SET state = 'running', lease_token = ?, lease_expires_at = ?, attempt = attempt + 1, updated_at = ?
		WHERE rowid IN (SELECT value FROM json_each(?)) AND state = 'waiting'`

// leasedReadSQL reads back what MarkLeased did not set of the jobs named
// by a JSON array of rowids: the store's region, the rowids.
const leasedReadSQL = `SELECT ` + leasedCols + ` FROM jobs WHERE rowid IN (SELECT value FROM json_each(?))`

// leasedRareSQL reads the rare columns (leasedRareCols) of the jobs named
// by a JSON array of rowids.
const leasedRareSQL = `SELECT ` + leasedRareCols + ` FROM jobs WHERE rowid IN (SELECT value FROM json_each(?))`

// readRare fills in the rare columns (leasedCols) of the leased jobs
// that have any set, by rowid, in one statement.
func (o *txOps) readRare(jobs map[int64]*job.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	rowids := intsJSON(slices.Collect(maps.Keys(jobs)), func(r int64) int64 { return r })
	rows, err := o.s.query(o.tx, leasedRareSQL, rowids)
	if err != nil {
		return err
	}
	defer rows.Close()
	n := 0
	for ; rows.Next(); n++ {
		if err := scanLeasedRare(rows, jobs); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n != len(jobs) {
		return fmt.Errorf("sqlite: lease: read the rare columns of %d of %d jobs", n, len(jobs))
	}
	return nil
}

// EndAttempts ends the attempts in runs where it can (endRuns: one UPDATE
// for the jobs of one lease call that end the same way at the same time,
// a batch of successes as a rule) and each other attempt with one
// prepared statement: a guarded UPDATE of the job that also appends the
// attempt record to the history in the row. (One UPDATE joined with a
// JSON object of per-job values measured no faster on this driver: it
// copies each row's new values into a temporary table; in instructions it
// cost 20% more, docs/benchmarks.md "Session 7 (s7h4)". A run's UPDATE
// sets the same values on every row, like MarkLeased's.)
func (o *txOps) EndAttempts(ts []store.Transition) ([]store.Ended, error) {
	out := make([]store.Ended, len(ts))
	ended, err := o.endRuns(ts, out)
	if err != nil {
		return nil, err
	}
	for i, t := range ts {
		if ended[i] {
			continue
		}
		keys, group, cost, err := o.endAttempt(t)
		if errors.Is(err, store.ErrConflict) {
			out[i].Conflict = true
			continue
		}
		if err != nil {
			return nil, err
		}
		out[i].Keys, out[i].Group, out[i].Cost = keys, group, cost
	}
	return out, nil
}

// run is a set of plain finishes (endAttemptPlainSQL) that one UPDATE
// ends together: the same new state, lease token, attempt, time and
// record, as the jobs of one lease call that the engine finishes in one
// batch have (its finish stamps a batch with one time; a success's record
// is its time, attempt and class).
type run struct {
	to      job.State
	token   string
	attempt int64
	now     int64
	// record is compared as a value and encoded once per run (recordJSON
	// formats its time: it was an allocation and ~1 k instructions per
	// job when the run's key held its text). Two records of the same
	// instant with other locations or monotonic readings are different
	// keys: they go as separate runs, each with its own text.
	record job.AttemptRecord
	// implied: the record is the one a NULL history stands for
	// (impliedRecord), which the UPDATE then leaves NULL.
	implied bool
}

// endRuns ends, one UPDATE per run of two or more, the transitions of ts
// that would take endAttemptPlainSQL, sets their out entries and reports
// which it ended; the others are left to endAttempt. A run's UPDATE
// finds its rows by the rowids the lease read (leaseFacts.rowid) and is
// guarded as endAttemptPlainSQL's is but for the id, which it need not
// check: rowids change only by a VACUUM, which no connection can run
// without a commit that empties Store.leases (checkDataVersion), and the
// token, new at every lease call, is on no row of another call. It runs in
// a savepoint: if any of the run's jobs is no longer running under its
// lease (changed rows fewer than the run's), the savepoint is rolled back
// and every job of the run goes by endAttempt, which tells which. One
// statement per run instead of one per job: every statement is a bind of
// each parameter through database/sql and the driver, a step and a reset
// (docs/benchmarks.md, "Session 19 (s19h4)").
func (o *txOps) endRuns(ts []store.Transition, out []store.Ended) ([]bool, error) {
	ended := make([]bool, len(ts))
	var order []run
	var runs map[run][]int
	for i, t := range ts {
		f, ok := o.s.leases[t.ID]
		if _, plain := endAttemptPlainSQLs[t.To]; !ok || !plain || f.token != t.LeaseToken || !plainEnd(t, f) {
			continue
		}
		if runs == nil {
			runs = map[run][]int{}
		}
		r := run{t.To, t.LeaseToken, int64(t.Record.Attempt), ns(t.Keys.Now), t.Record, impliedRecord(t)}
		if _, seen := runs[r]; !seen {
			order = append(order, r)
		}
		runs[r] = append(runs[r], i)
	}
	for _, r := range order {
		idx := runs[r]
		if len(idx) < 2 {
			continue
		}
		ok, err := o.endRun(r, ts, idx)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for _, i := range idx {
			f := o.s.leases[ts[i].ID]
			delete(o.s.leases, ts[i].ID)
			out[i].Keys, out[i].Group, out[i].Cost = f.keys, f.group, f.cost
			ended[i] = true
		}
	}
	return ended, nil
}

// plainEnd reports whether t keeps eligible_at, result, the failure
// counters (those of its lease, f) and the empty reason of a running job,
// names its attempt and does not ask for an expired lease: what
// endAttemptPlainSQL writes.
func plainEnd(t store.Transition, f leaseFacts) bool {
	return t.EligibleAt.IsZero() && len(t.Result) == 0 && t.LeaseExpiredBy.IsZero() && t.Record.Attempt != 0 &&
		t.Reason == "" && t.Attempts == f.attempts && !store.FoldsRecord(t.Record)
}

// endRun ends the run's jobs (indexes into ts) in one UPDATE inside a
// savepoint, and reports whether it ended all of them; if not, nothing of
// it is kept.
func (o *txOps) endRun(r run, ts []store.Transition, idx []int) (bool, error) {
	rowids := intsJSON(idx, func(i int) int64 { return o.s.leases[ts[i].ID].rowid })
	if _, err := o.s.exec(o.tx, `SAVEPOINT run`); err != nil {
		return false, err
	}
	args := []any{r.now, recordJSON(r.record), rowids, r.token, r.attempt}
	if r.to.Final() {
		args = append([]any{r.now}, args...) // finished_at, then updated_at
	}
	q := endRunSQLs[r.to]
	if r.implied {
		q = endRunImpliedSQL
	}
	res, err := o.s.exec(o.tx, q, args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err == nil && n == int64(len(idx)) {
		_, err = o.s.exec(o.tx, `RELEASE run`)
		return err == nil, err
	}
	if _, rerr := o.s.exec(o.tx, `ROLLBACK TO run`); rerr != nil {
		return false, errors.Join(err, rerr)
	}
	if _, rerr := o.s.exec(o.tx, `RELEASE run`); rerr != nil {
		return false, errors.Join(err, rerr)
	}
	return false, err
}

// endRunSQL is endAttemptPlainSQL for a run of jobs (endRuns): the rows
// named by a JSON array of rowids, without the id check. Parameters: the
// time (twice, finished_at and updated_at, for a final state), the
// record, the rowids, the token, the attempt.
func endRunSQL(to job.State, history string) string {
	times := `updated_at = ?`
	if to.Final() {
		times = `finished_at = ?, updated_at = ?`
	}
	return `UPDATE jobs SET state = '` + string(to) + `',
		lease_token = NULL, lease_expires_at = NULL, ` + times + `,
		history = ` + history + `
	WHERE rowid IN (SELECT value FROM json_each(?)) AND state = 'running' AND lease_token = ? AND attempt = ?`
}

// endRunSQLs is endRunSQL of each state endAttemptPlainSQLs has.
var endRunSQLs = func() map[job.State]string {
	m := map[job.State]string{}
	for to := range endAttemptPlainSQLs {
		m[to] = endRunSQL(to, finishHistory)
	}
	return m
}()

// endRunImpliedSQL is endRunSQL to published for a run whose record is
// implied (impliedRecord): a NULL history stays NULL.
var endRunImpliedSQL = endRunSQL(job.StatePublished, impliedHistory)

// leaseFacts is what the finish of a lease needs of its job besides the
// guard: its limit keys, group and cost. No statement changes them after
// the insert, so MarkLeased's read of them holds until the finish, which
// then updates the row without RETURNING: SQLite buffers a RETURNING
// statement's rows in an ephemeral B-tree, a page cache and a zeroed page
// per execution, the largest part of a success's finish
// (docs/benchmarks.md, "Session 8 (s8h3)").
type leaseFacts struct {
	token string
	keys  []string
	group int64
	cost  int64
	// rowid is the row's rowid when it was leased (Heads read it): the
	// plain finish finds the row by it, not through the id index.
	rowid int64
	// attempts are the job's failure counters when it was leased: a
	// finish that keeps them (a success) need not write them.
	attempts job.Attempts
}

// maxLeaseFacts bounds Store.leases. A lease that ends other than by
// Finish (cancelled, deleted, leased again after expiry) leaves its entry
// behind; at the bound the map is emptied, and the finishes of the leases
// it held read their facts back as before (RETURNING). Running jobs are
// bounded by the workers, far below this.
const maxLeaseFacts = 1 << 16

// rememberLease records j's lease for its finish. The entry is a hint
// checked against the lease token: if the lease's transaction is rolled
// back, no finish carries that token and the guarded UPDATE matches no row.
func (s *Store) rememberLease(j *job.Job, group, rowid int64) {
	if len(s.leases) >= maxLeaseFacts {
		clear(s.leases)
	}
	s.leases[j.ID] = leaseFacts{token: j.LeaseToken, keys: slices.Clone(j.LimitKeys), group: group, cost: j.Cost, rowid: rowid, attempts: j.Attempts}
}

// The finish's statements take their parameters as plain "?", in order,
// each used once: modernc.org/sqlite looks up every parameter's name on
// every execution and turns a named one ("?12") into a Go string, one
// allocation per parameter per finish. The values that were bound twice
// ("?4 = 0 OR ...") are written with coalesce instead: a NULL argument
// keeps the column, or makes the guard term true.

// endAttemptSet is the finish's UPDATE without its WHERE clause: the new
// state and the attempt record appended to the history.
const endAttemptSet = endAttemptSetHead + finishHistory

// endAttemptSetHead is endAttemptSet up to the history's new value.
const endAttemptSetHead = `UPDATE jobs SET state = ?, reason = ?, eligible_at = coalesce(?, eligible_at),
		attempts_congestion = ?, attempts_transient = ?, attempts_schema = ?, result = coalesce(?, result),
		lease_token = NULL, lease_expires_at = NULL, finished_at = ?, updated_at = ?,
		history = `

// finishHistory is the history with the record (one plain parameter)
// appended, as appendHistory does but with the record bound once. The
// test comes first: a first attempt's history is NULL, and
// coalesce(substr(history, ...) || ',', '[') called length and substr on
// the NULL every time, two SQL function calls per finish.
const finishHistory = `CASE WHEN history IS NULL THEN '[' ELSE substr(history, 1, length(history) - 1) || ',' END || ? || ']'`

// foldHistory is finishHistory for a record that may fold into the
// history's last record (store.FoldsRecord): the rule of
// store.AppendFolded in SQL, the record still one plain parameter (bound
// once, as r of the subquery). It parses the history (json_extract), which
// the plain append never does; a history that folds stays short
// (store.HistoryFoldAll), so the parse and the rewrite of the row cost
// about the same on every pass instead of growing with the job's age. The
// comparison of the two records goes through json_remove on both sides,
// so that both are rendered alike; a fold's own fields (count, first_at)
// are set last by json_set, after the fields the record came with.
var foldHistory = `(SELECT CASE WHEN history IS NOT NULL AND json_extract(history, '$[#-1].outcome') = 'pending'
		AND (json_array_length(history) >= ` + strconv.Itoa(store.HistoryFoldAll) + `
			OR json_remove(json_extract(history, '$[#-1]'), '$.at', '$.attempt', '$.delay_ns', '$.count', '$.first_at')
				= json_remove(r, '$.at', '$.attempt', '$.delay_ns'))
	THEN json_set(history, '$[#-1]', json_set(r,
		'$.count', coalesce(json_extract(history, '$[#-1].count'), 1) + 1,
		'$.first_at', coalesce(json_extract(history, '$[#-1].first_at'), json_extract(history, '$[#-1].at'))))
	ELSE CASE WHEN history IS NULL THEN '[' ELSE substr(history, 1, length(history) - 1) || ',' END || r || ']' END
	FROM (SELECT ? AS r))`

// impliedHistory is finishHistory for an implied record (impliedRecord):
// a NULL history, the job's first record, is left NULL, which Get reads
// back as that record (impliedHistoryOf); a history with records gets the
// record appended, as finishHistory does. The record is bound either way.
const impliedHistory = `CASE WHEN history IS NULL THEN NULL ELSE substr(history, 1, length(history) - 1) || ',' || ? || ']' END`

// impliedRecord reports whether t ends its job's first attempt as a plain
// success straight to published, its record stamped with the finish's
// time: a record that the published row's own columns restate (attempt 1,
// finished_at), so that a NULL history can stand for it and the finish
// need not write it (impliedHistoryOf reads it back). That is the
// engine's finish of a job whose kind has no validation step, most of
// bench throughput: ~70 bytes fewer in each such row, its page and the
// WAL (docs/benchmarks.md, "Session 20 (s20h4)"). A NULL history of a
// published job at attempt 1 has no other source: every other finish
// appends its record, and a job reaches published only by a finish or by
// Publish from validated, which its own finish recorded.
func impliedRecord(t store.Transition) bool {
	r := t.Record
	return t.To == job.StatePublished && r == job.AttemptRecord{At: r.At, Attempt: 1, Outcome: job.ClassSuccess} &&
		ns(r.At) == ns(t.Keys.Now)
}

// impliedHistoryOf is the history a job read with a NULL history column
// has: none, or for a published job at attempt 1 the record its finish
// left implied (impliedRecord).
func impliedHistoryOf(j *job.Job) []job.AttemptRecord {
	if j.State != job.StatePublished || j.Attempt != 1 || j.FinishedAt.IsZero() {
		return nil
	}
	return []job.AttemptRecord{{At: j.FinishedAt, Attempt: 1, Outcome: job.ClassSuccess}}
}

// impliedRow is true of a row whose NULL history stands for the record
// impliedHistoryOf reads back: its test, in SQL.
const impliedRow = `(history IS NULL AND state = 'published' AND attempt = 1 AND finished_at IS NOT NULL)`

// endAttemptGuard is the finish's guard after the job id: running under
// the lease token, at the attempt (NULL: any) and with the lease expired
// by then (NULL: not asked; a running job always has an expiry).
const endAttemptGuard = ` AND state = 'running' AND lease_token = ? AND attempt = coalesce(?, attempt)
			AND lease_expires_at <= coalesce(?, lease_expires_at)`

// endAttemptSQL ends a remembered lease, with no RETURNING.
const endAttemptSQL = endAttemptSet + ` WHERE id = ?` + endAttemptGuard

// endAttemptFoldSQL is endAttemptSQL for a record that may fold into the
// history's last one (store.FoldsRecord: a pending pass), with the same
// parameters: only such finishes pay for foldHistory's parse of the
// history.
var endAttemptFoldSQL = endAttemptSetHead + foldHistory + ` WHERE id = ?` + endAttemptGuard

// endAttemptFoldReturningSQL is endAttemptReturningSQL for a record that
// may fold (endAttemptFoldSQL).
var endAttemptFoldReturningSQL = endAttemptSetHead + foldHistory + ` WHERE id = ?` + endAttemptGuard + endAttemptReturning

// endAttemptPlainSQL is endAttemptSQL for a transition that keeps
// eligible_at, result, the failure counters and the empty reason of a
// running job, names its attempt and does not ask for an expired lease (a
// success, as a rule): eight parameters fewer, each a bind through the
// driver per job, the new state among them (written as a literal, one
// statement text per state: modernc.org/sqlite copies every bound text
// into C memory). It finds the row by the rowid the lease read
// (leaseFacts.rowid), one descent of the table's B-tree instead of the id
// index's and then the table's, and checks the id besides: a rowid that no
// longer names the job (a VACUUM since the lease may renumber rows)
// matches no row, and endAttempt then tries endAttemptSQL by id. The
// time is bound once: a final state's finished_at is updated_at (?1, the
// one parameter the driver looks up by name), and another state leaves
// finished_at NULL, as it is while running.
func endAttemptPlainSQL(to job.State, history string) string {
	times := `updated_at = ?`
	if to.Final() {
		times = `finished_at = ?1, updated_at = ?1`
	}
	return `UPDATE jobs SET state = '` + string(to) + `',
		lease_token = NULL, lease_expires_at = NULL, ` + times + `,
		history = ` + history + `
	WHERE rowid = ? AND id = ? AND state = 'running' AND lease_token = ? AND attempt = ?`
}

// endAttemptPlainSQLs is endAttemptPlainSQL of each state a finish with an
// empty reason may end in; a transition to another goes by endAttemptSQL.
var endAttemptPlainSQLs = func() map[job.State]string {
	m := map[job.State]string{}
	for _, to := range []job.State{job.StateAccepted, job.StateWaiting, job.StateRetryScheduled,
		job.StateValidated, job.StatePublished} {
		m[to] = endAttemptPlainSQL(to, finishHistory)
	}
	return m
}()

// endAttemptImpliedSQL is endAttemptPlainSQL to published for an implied
// record (impliedRecord).
var endAttemptImpliedSQL = endAttemptPlainSQL(job.StatePublished, impliedHistory)

// endAttemptReturningSQL ends a lease not remembered, reading back what
// the finish needs of the job.
const endAttemptReturningSQL = endAttemptSet + ` WHERE id = ?` + endAttemptGuard + endAttemptReturning

// endAttemptReturning is what a finish of a lease not remembered reads
// back.
const endAttemptReturning = `
		RETURNING limit_keys, group_id, cost`

func (o *txOps) endAttempt(t store.Transition) ([]string, int64, int64, error) {
	now := t.Keys.Now
	var eligible, finished, attempt any
	if e := ns(t.EligibleAt); e != 0 {
		eligible = e // 0 keeps eligible_at, as in every other transition
	}
	if t.To.Final() {
		finished = ns(now)
	}
	if t.Record.Attempt != 0 {
		attempt = int64(t.Record.Attempt)
	}
	// In the statements' order: the SET's, then the guard's, in one slice
	// (two appended together cost a copy and an allocation per job).
	// A transition that keeps eligible_at, result, the counters and the
	// empty reason, names its attempt and does not ask for an expired lease
	// (a success, as a rule) binds eight parameters fewer
	// (endAttemptPlainSQL).
	f, remembered := o.s.leases[t.ID]
	remembered = remembered && f.token == t.LeaseToken
	result, expired := nullBytes(t.Result), nullNS(t.LeaseExpiredBy)
	plainSQL, plain := endAttemptPlainSQLs[t.To]
	fold := store.FoldsRecord(t.Record)
	plain = plain && remembered && eligible == nil && result == nil && expired == nil && attempt != nil &&
		t.Reason == "" && t.Attempts == f.attempts && !fold
	var args []any
	record := recordJSON(t.Record)
	general := func() []any {
		return []any{string(t.To), string(t.Reason), eligible, t.Attempts.Congestion, t.Attempts.Transient,
			t.Attempts.Schema, result, finished, ns(now), record,
			t.ID, t.LeaseToken, attempt, expired}
	}
	if plain {
		o.args = append(o.args[:0], o.now.of(ns(now)), record, f.rowid, t.ID, o.token.of(t.LeaseToken), attempt)
		args = o.args
	} else {
		args = general()
	}
	if remembered {
		// Only this finish can use the entry: the guard below either ends
		// the lease or finds it ended already.
		delete(o.s.leases, t.ID)
		q := endAttemptSQL
		if fold {
			q = endAttemptFoldSQL
		}
		if plain {
			q = plainSQL
			if impliedRecord(t) {
				q = endAttemptImpliedSQL
			}
		}
		res, err := o.s.exec(o.tx, q, args...)
		if err != nil {
			return nil, 0, 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, 0, 0, err
		}
		if n == 0 && plain {
			// The rowid may no longer name the job: the guard decides by
			// id (the general statement with the plain one's NULLs).
			if res, err = o.s.exec(o.tx, endAttemptSQL, general()...); err != nil {
				return nil, 0, 0, err
			}
			if n, err = res.RowsAffected(); err != nil {
				return nil, 0, 0, err
			}
		}
		if n == 0 {
			return nil, 0, 0, store.ErrConflict
		}
		return f.keys, f.group, f.cost, nil
	}
	var keys string
	var group, cost int64
	q := endAttemptReturningSQL
	if fold {
		q = endAttemptFoldReturningSQL
	}
	err := o.s.queryRow(o.tx, q, args...).Scan(&keys, &group, &cost)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, 0, store.ErrConflict
	}
	if err != nil {
		return nil, 0, 0, err
	}
	var names []string
	if err := jsonStrings(keys, &names); err != nil {
		return nil, 0, 0, err
	}
	return names, group, cost, nil
}

func (o *txOps) GroupReady(group int64, at time.Time) error { return o.s.groupReady(o.tx, group, at) }

func (o *txOps) GroupUnblock(group int64) error {
	_, err := o.s.exec(o.tx, `UPDATE job_groups SET blocked_until = 0 WHERE id = ? AND blocked_until > 0`, group)
	return err
}

func (s *Store) groupReady(tx *writeTx, group int64, at time.Time) error {
	return s.groupReadyNS(tx, group, ns(at))
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// statsOldestQuery is the driver's query of store.SQLReads.OldestReady:
// a lane's oldest eligible waiting job (oldestWaitingSQL) or, if older, a
// retry due but not yet promoted (the partial index jobs_scheduled).
func statsOldestQuery(lane job.Lane, now time.Time) *store.Query {
	return store.NewQuery(oldestReadySQL(lane), lane, ns(now))
}

// oldestReadySQL is OldestReady's query for lane: ?1 the lane, ?2 now.
func oldestReadySQL(lane job.Lane) string {
	if lane == job.LaneInteractive {
		return oldestReadyInteractiveSQL
	}
	return oldestReadyByGroupSQL
}

// The two lanes' OldestReady queries, built once rather than per call:
// the oldest waiting job (oldestWaitingSQL) or, if older, a retry due but
// not yet promoted (jobs_scheduled).
var (
	oldestReadyInteractiveSQL = oldestOrDueSQL(oldestInteractiveSQL)
	oldestReadyByGroupSQL     = oldestOrDueSQL(oldestByGroupSQL)
)

func oldestOrDueSQL(waiting string) string {
	return `SELECT min(m) FROM (SELECT (` + waiting + `) AS m
		UNION ALL SELECT min(eligible_at) FROM jobs WHERE state = 'retry_scheduled' AND eligible_at <= ?2 AND lane = ?1)`
}

// mayLeaseGroups is how many ready groups MayLease looks into at most:
// beyond that it answers true and lets the lease decide. A lease that
// takes a group's last job leaves the group's ready_at in place (a lower
// bound) until a later lease reads the group empty; a burst over many
// groups (a fan-out to thousands of subscribers' keys) leaves thousands
// such, and a read that probed every one on each 50 ms poll cost 1.6 ms
// at 9,728 of them, for as long as the engine stayed idle, where the
// polls' leases used to put them right (2*Max+16 groups each) within a
// few seconds (docs/benchmarks.md, "Session 29: the merge (lead)").
const mayLeaseGroups = 64

// MayLease reports whether a Lease with p at p.Now might take a job or
// promote a due retry (store.LeaseProber): a read on the read pool, which
// takes no writer. It looks for what Lease would take or promote: a
// waiting job eligible at p.Now in a ready group of p's lane and kinds
// (jobs_group_head, one seek per such group), and a retry due at p.Now
// (PromoteDue). It does not stop at a group's ready_at: that is only a
// lower bound, left in place when a lease takes a group's last job until
// the next lease finds the group empty; that lease took nothing and its
// only write was the group's new ready time and place in the round, which
// any later lease that reads the group writes as well. More than
// mayLeaseGroups ready groups is a true: the lease that follows reads
// them, and so clears the stale ones, as the polls' leases always did.
// Blocked groups and refusing keys count as leasable: Lease decides those.
// Only groups of the lanes and kinds p's lease could take count
// (mayLeaseSQL): one read answers for an engine whose CPU governor has no
// turn free.
func (s *Store) MayLease(ctx context.Context, p store.LeaseParams) (bool, error) {
	q, args := mayLeaseSQL(p)
	var may bool
	err := s.readRow(ctx, q, args...).Scan(&may)
	return may, err
}

// mayLease is MayLease inside the writer's transaction: FinishLease asks
// it after the finish, whose writes (a group readied, a key released) it
// sees, before it runs the lease's statements.
func (o *txOps) mayLease(p store.LeaseParams) (bool, error) {
	q, args := mayLeaseSQL(p)
	var may bool
	err := o.s.queryRow(o.tx, q, args...).Scan(&may)
	return may, err
}

// mayLeaseSQL is MayLease's query for p: ready groups of the lanes and
// kinds a lease with p could take. The interactive lane unless p.Lane is
// the batch lane; the batch lane unless p.Lane is the interactive lane or
// p's batch bound admits none (BatchLaneCap), and then of the kinds the
// bound leaves (BatchKinds; with p.Kinds empty, those BatchMax does not
// count). With no turn of its CPU governor free (BatchMax -1) an engine's
// lease can take no ready job of a sweep's computing kinds: those groups
// are no reason to lease.
func mayLeaseSQL(p store.LeaseParams) (string, []any) {
	args := []any{ns(p.Now)}
	var lanes []string
	if p.Lane != job.LaneBatch {
		c := `lane = ?`
		args = append(args, job.LaneInteractive)
		if len(p.Kinds) > 0 {
			c += ` AND kind IN (` + placeholders(len(p.Kinds)) + `)`
			args = append(args, anys(p.Kinds)...)
		}
		lanes = append(lanes, c)
	}
	if p.Lane != job.LaneInteractive && p.BatchLaneCap() > 0 {
		c := `lane = ?`
		args = append(args, job.LaneBatch)
		switch kinds := p.BatchKinds(p.BatchCap()); {
		case len(kinds) > 0:
			c += ` AND kind IN (` + placeholders(len(kinds)) + `)`
			args = append(args, anys(kinds)...)
		case p.BatchCap() == 0 && len(p.BatchMaxKinds) > 0:
			c += ` AND kind NOT IN (` + placeholders(len(p.BatchMaxKinds)) + `)`
			args = append(args, anys(p.BatchMaxKinds)...)
		}
		lanes = append(lanes, c)
	}
	cond := `0`
	if len(lanes) > 0 {
		cond = `(` + strings.Join(lanes, `) OR (`) + `)`
	}
	q := `WITH g AS (SELECT id FROM job_groups WHERE ready_at IS NOT NULL AND ready_at <= ?1 AND (` + cond + `)
		LIMIT ` + strconv.Itoa(mayLeaseGroups+1) + `)
		SELECT (SELECT count(*) FROM g) > ` + strconv.Itoa(mayLeaseGroups) + `
		OR EXISTS (SELECT 1 FROM g WHERE EXISTS (SELECT 1 FROM jobs WHERE group_id = g.id AND state = 'waiting' AND eligible_at <= ?1))
		OR EXISTS (SELECT 1 FROM jobs WHERE state = 'retry_scheduled' AND eligible_at <= ?1)`
	return q, args
}
