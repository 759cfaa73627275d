package store

import (
	"context"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// ScanRows is a query's rows as both drivers return them: pgx.Rows as it
// is, database/sql's *sql.Rows behind a Close without a result.
type ScanRows interface {
	Rows
	Scanner
	Close()
}

// SQLReads are the reads of schedules, batches and documents (objects)
// that both SQL drivers run alike: the same statement, the same scanner,
// the same paging. A
// driver embeds one, made with the function that runs a query its way,
// and so has these methods of the store contract. (The writes stay with
// the drivers: how a guarded write runs differs, a single-writer SQLite
// transaction against PostgreSQL row locks.)
type SQLReads struct {
	read   func(ctx context.Context, q *Query) (ScanRows, error)
	oldest func(lane job.Lane, now time.Time) *Query
}

// NewSQLReads returns the shared reads over read, which runs q (q.SQL()
// on SQLite, q.Numbered() on PostgreSQL) on the driver's read connections
// and returns its rows; the caller closes them. oldest is the driver's
// query for OldestReady: one row, the eligible_at (NULL for none) of
// lane's oldest job ready at now, waiting or a retry due; it is where the
// drivers' indexes differ.
func NewSQLReads(read func(ctx context.Context, q *Query) (ScanRows, error), oldest func(lane job.Lane, now time.Time) *Query) SQLReads {
	return SQLReads{read: read, oldest: oldest}
}

// Stats counts jobs by lane and state (every lane present, with no states
// when it has no jobs) and reports OldestReady at now (Store.Stats). It
// scans the jobs table; call it for dashboards and metrics, not per
// request.
func (r SQLReads) Stats(ctx context.Context, now time.Time) (Stats, error) {
	st := Stats{Counts: make(map[job.Lane]map[job.State]int64, len(job.Lanes))}
	for _, l := range job.Lanes {
		st.Counts[l] = map[job.State]int64{}
	}
	type count struct {
		lane  job.Lane
		state job.State
		n     int64
	}
	counts, err := readAll(ctx, r, NewQuery(`SELECT lane, state, count(*) FROM jobs GROUP BY lane, state`), func(row Scanner) (c count, err error) {
		return c, row.Scan(&c.lane, &c.state, &c.n)
	})
	if err != nil {
		return st, err
	}
	for _, c := range counts {
		if st.Counts[c.lane] == nil {
			st.Counts[c.lane] = map[job.State]int64{}
		}
		st.Counts[c.lane][c.state] = c.n
		if c.state == job.StateRunning {
			st.Running += c.n
		}
	}
	st.OldestReady, err = r.OldestReady(ctx, now)
	return st, err
}

// OldestReady reports the age at now of each lane's oldest ready job
// (Store.OldestReady), one indexed query a lane; a lane with none is
// absent.
func (r SQLReads) OldestReady(ctx context.Context, now time.Time) (map[job.Lane]time.Duration, error) {
	out := map[job.Lane]time.Duration{}
	for _, lane := range job.Lanes {
		at, err := readOne(ctx, r, r.oldest(lane, now), func(row Scanner) (at *int64, err error) {
			return at, row.Scan(&at)
		})
		if err != nil {
			return nil, err
		}
		if at != nil {
			out[lane] = now.Sub(UnixTime(at))
		}
	}
	return out, nil
}

// readAll runs q and scans each of its rows with scan.
func readAll[T any](ctx context.Context, r SQLReads, q *Query, scan func(Scanner) (T, error)) ([]T, error) {
	rows, err := r.read(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return CollectRows(rows, func() (T, error) { return scan(rows) })
}

// readOne runs q and scans its first row, or returns ErrNotFound when it
// has none.
func readOne[T any](ctx context.Context, r SQLReads, q *Query, scan func(Scanner) (T, error)) (T, error) {
	var zero T
	rows, err := r.read(ctx, q)
	if err != nil {
		return zero, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return zero, err
		}
		return zero, ErrNotFound
	}
	return scan(rows)
}

// Columns of the schedule and batch tables, in the order the scanners
// read them and the drivers' INSERTs write them.
const (
	ScheduleCols = `id, tenant, region, name, cron, every_ns, anchor, timezone, missed, catch_up_max, max_late_ns,
	template, kind, paused, next_at, last_tick_at, last_job_id, produced, skipped, version, created_at, updated_at`
	BatchCols = `id, tenant, region, provider, state, deadline, max_attempts, summary, created_at, updated_at`
	// batchReadCols are BatchCols and the creating mark, which only a
	// single-writer store's CreateBatch writes.
	batchReadCols  = BatchCols + `, creating`
	BatchItemCols  = `batch_id, custom_id, job_id, object_id, idx, state, attempts, chunk_key, disposition, reason, result, updated_at`
	BatchChunkCols = `chunk_key, batch_id, state, record, updated_at`
)

func scanSchedule(r Scanner) (*Schedule, error) {
	var s Schedule
	var every, maxLate int64
	var anchor, next, last, created, updated *int64
	err := r.Scan(&s.ID, &s.Tenant, &s.Region, &s.Name, &s.Cron, &every, &anchor, &s.TimeZone, &s.Missed, &s.CatchUpMax, &maxLate,
		&s.Template, &s.Kind, &s.Paused, &next, &last, &s.LastJobID, &s.Produced, &s.Skipped, &s.Version, &created, &updated)
	if err != nil {
		return nil, err
	}
	s.Every, s.MaxLate = time.Duration(every), time.Duration(maxLate)
	s.Anchor, s.NextAt, s.LastTickAt = UnixTime(anchor), UnixTime(next), UnixTime(last)
	s.CreatedAt, s.UpdatedAt = UnixTime(created), UnixTime(updated)
	return &s, nil
}

// GetSchedule returns one schedule or ErrNotFound; see Schedules.
func (r SQLReads) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	return readOne(ctx, r, NewQuery(`SELECT `+ScheduleCols+` FROM schedules WHERE id = ?`, id), scanSchedule)
}

// ListSchedules returns schedules in id order; see Schedules.
func (r SQLReads) ListSchedules(ctx context.Context, p ScheduleListParams) ([]*Schedule, error) {
	q := NewQuery(`SELECT `+ScheduleCols+` FROM schedules`).Where(`id > ?`, p.After).WhereSet(`tenant = ?`, p.Tenant)
	return r.Schedules(ctx, q.Then(`ORDER BY id LIMIT ?`, PageSize(p.Limit)))
}

// Schedules returns the schedules q selects (SELECT ScheduleCols FROM
// schedules ...): a driver's own listing, such as DueSchedules, whose
// condition it writes in its own dialect for its partial index.
func (r SQLReads) Schedules(ctx context.Context, q *Query) ([]*Schedule, error) {
	return readAll(ctx, r, q, scanSchedule)
}

// ScheduleTickOf returns the ledger entry of the tick that produced a
// job; see Schedules.
func (r SQLReads) ScheduleTickOf(ctx context.Context, jobID string) (ScheduleTick, error) {
	q := NewQuery(`SELECT schedule_id, tick_at, claimed_at FROM schedule_ticks WHERE job_id = ? ORDER BY tick_at DESC LIMIT 1`, jobID)
	return readOne(ctx, r, q, func(row Scanner) (ScheduleTick, error) {
		t := ScheduleTick{JobID: jobID}
		var tick, claimed *int64
		err := row.Scan(&t.ScheduleID, &tick, &claimed)
		t.Tick, t.ClaimedAt = UnixTime(tick), UnixTime(claimed)
		return t, err
	})
}

// ListScheduleTicks returns a schedule's recent ledger entries; see
// Schedules.
func (r SQLReads) ListScheduleTicks(ctx context.Context, scheduleID string, limit int) ([]ScheduleTick, error) {
	q := NewQuery(`SELECT tick_at, job_id, claimed_at FROM schedule_ticks WHERE schedule_id = ? ORDER BY tick_at DESC LIMIT ?`,
		scheduleID, PageSize(limit))
	return readAll(ctx, r, q, func(row Scanner) (ScheduleTick, error) {
		t := ScheduleTick{ScheduleID: scheduleID}
		var tick, claimed *int64
		err := row.Scan(&tick, &t.JobID, &claimed)
		t.Tick, t.ClaimedAt = UnixTime(tick), UnixTime(claimed)
		return t, err
	})
}

func scanBatch(r Scanner) (*Batch, error) {
	var b Batch
	var deadline, created, updated *int64
	var creating int64
	if err := r.Scan(&b.ID, &b.Tenant, &b.Region, &b.Provider, &b.State, &deadline, &b.MaxAttempts, &b.Summary,
		&created, &updated, &creating); err != nil {
		return nil, err
	}
	b.Deadline, b.CreatedAt, b.UpdatedAt = UnixTime(deadline), UnixTime(created), UnixTime(updated)
	b.Creating = creating != 0
	return &b, nil
}

func scanBatchItem(r Scanner) (BatchItem, error) {
	var it BatchItem
	var updated *int64
	var result []byte // NULL until the item succeeds; database/sql scans NULL into a []byte, not a json.RawMessage
	err := r.Scan(&it.BatchID, &it.CustomID, &it.JobID, &it.ObjectID, &it.Index, &it.State, &it.Attempts, &it.ChunkKey,
		&it.Disposition, &it.Reason, &result, &updated)
	if result != nil {
		it.Result = result
	}
	it.UpdatedAt = UnixTime(updated)
	return it, err
}

func scanBatchChunk(r Scanner) (BatchChunk, error) {
	var c BatchChunk
	var updated *int64
	err := r.Scan(&c.Key, &c.BatchID, &c.State, &c.Record, &updated)
	c.UpdatedAt = UnixTime(updated)
	return c, err
}

// GetBatch returns one batch with its counts, or ErrNotFound; see Batches.
func (r SQLReads) GetBatch(ctx context.Context, id string) (*Batch, error) {
	b, err := r.GetBatchHead(ctx, id)
	if err != nil {
		return nil, err
	}
	return b, r.countBatch(ctx, b)
}

// GetBatchHead returns one batch without counting its items, or
// ErrNotFound; see BatchSettles.
func (r SQLReads) GetBatchHead(ctx context.Context, id string) (*Batch, error) {
	return readOne(ctx, r, NewQuery(`SELECT `+batchReadCols+` FROM batches WHERE id = ?`, id), scanBatch)
}

// countBatch fills b.Counts from its items.
func (r SQLReads) countBatch(ctx context.Context, b *Batch) error {
	type count struct {
		state string
		n     int
	}
	cs, err := readAll(ctx, r, NewQuery(`SELECT state, count(*) FROM batch_items WHERE batch_id = ? GROUP BY state`, b.ID),
		func(row Scanner) (count, error) {
			var c count
			err := row.Scan(&c.state, &c.n)
			return c, err
		})
	if err != nil {
		return err
	}
	b.Counts = BatchCounts{}
	for _, c := range cs {
		b.Counts.Add(c.state, c.n)
	}
	return nil
}

// ListBatches returns batches newest first, with their counts; see
// Batches.
func (r SQLReads) ListBatches(ctx context.Context, p BatchListParams) ([]*Batch, error) {
	q := NewQuery(`SELECT `+batchReadCols+` FROM batches`).Where(`creating = 0`).
		WhereSet(`id < ?`, p.Before).WhereSet(`tenant = ?`, p.Tenant).WhereSet(`state = ?`, p.State).
		Then(`ORDER BY id DESC LIMIT ?`, PageSize(p.Limit))
	bs, err := readAll(ctx, r, q, scanBatch)
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		if err := r.countBatch(ctx, b); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

// BatchItemPage is BatchItems' page size when BatchItemParams.Limit is 0:
// a batch driver reads a whole chunk's items, far more than a listing
// page, so items are not bounded by PageSize.
const BatchItemPage = 1000

// BatchItems returns a batch's items in custom_id order; see Batches.
func (r SQLReads) BatchItems(ctx context.Context, p BatchItemParams) ([]BatchItem, error) {
	return readAll(ctx, r, BatchItemsQuery(p), scanBatchItem)
}

// BatchItemsQuery is BatchItems' statement for both SQL drivers.
func BatchItemsQuery(p BatchItemParams) *Query {
	limit := p.Limit
	if limit <= 0 {
		limit = BatchItemPage
	}
	q := NewQuery(`SELECT ` + BatchItemCols + ` FROM batch_items`)
	if len(p.JobIDs) == 0 {
		q.Where(`batch_id = ?`, p.BatchID)
	} else {
		// Each job's items through batch_items_job, not the whole
		// batch's through the primary key: without statistics SQLite
		// chose the key, for its custom_id order, and read every item
		// of the batch (thousands) for a group's few tens. batch_id ||
		// '' is no indexed term of batch_id, on either driver.
		args := padIDs(p.JobIDs)
		q.Where(`batch_id || '' = ?`, p.BatchID).Where(`job_id IN (?`+strings.Repeat(`, ?`, len(args)-1)+`)`, args...)
	}
	q.Where(`custom_id > ?`, p.After).WhereSet(`job_id = ?`, p.JobID).WhereSet(`state = ?`, p.State)
	return q.Then(`ORDER BY custom_id LIMIT ?`, limit)
}

// padIDs returns ids as statement arguments, the last one repeated up to
// a power of two, so that the texts of an IN list a driver prepares are a
// few shapes, not one per count (GetObjects, BatchItemParams.JobIDs).
func padIDs(ids []string) []any {
	n := 1
	for n < len(ids) {
		n *= 2
	}
	args := make([]any, n)
	for i := range n {
		args[i] = ids[min(i, len(ids)-1)]
	}
	return args
}

// BatchChunks returns a batch's chunks in key order; see Batches.
func (r SQLReads) BatchChunks(ctx context.Context, batchID string) ([]BatchChunk, error) {
	return readAll(ctx, r, NewQuery(`SELECT `+BatchChunkCols+` FROM batch_chunks WHERE batch_id = ? ORDER BY chunk_key`, batchID),
		scanBatchChunk)
}

// scanObject reads id, body, updated_at into a document of kind.
func scanObject(kind string) func(Scanner) (Object, error) {
	return func(r Scanner) (Object, error) {
		o := Object{Kind: kind}
		var at *int64
		err := r.Scan(&o.ID, &o.Body, &at)
		o.UpdatedAt = UnixTime(at)
		return o, err
	}
}

// GetObject returns one document, or ErrNotFound.
func (r SQLReads) GetObject(ctx context.Context, kind, id string) (Object, error) {
	o, err := readOne(ctx, r, NewQuery(`SELECT id, body, updated_at FROM objects WHERE kind = ? AND id = ?`, kind, id), scanObject(kind))
	o.Kind, o.ID = kind, id
	return o, err
}

// getObjectsPage is the most ids one GetObjects statement names.
const getObjectsPage = 256

// GetObjects returns the documents of kind among ids, by id
// (Store.GetObjects). Each statement names a power of two of ids (the last
// one repeated to fill it), at most getObjectsPage, so the texts a driver
// prepares are a few shapes, not one per count.
func (r SQLReads) GetObjects(ctx context.Context, kind string, ids []string) (map[string]Object, error) {
	out := make(map[string]Object, len(ids))
	for len(ids) > 0 {
		page := ids[:min(len(ids), getObjectsPage)]
		ids = ids[len(page):]
		ps := padIDs(page)
		q := NewQuery(`SELECT id, body, updated_at FROM objects WHERE kind = ? AND id IN (?`+strings.Repeat(`, ?`, len(ps)-1)+`)`,
			append([]any{kind}, ps...)...)
		os, err := readAll(ctx, r, q, scanObject(kind))
		if err != nil {
			return nil, err
		}
		for _, o := range os {
			out[o.ID] = o
		}
	}
	return out, nil
}

// ListObjects returns documents of a kind in id order, after the id
// after, one page (PageSize, as List).
func (r SQLReads) ListObjects(ctx context.Context, kind, after string, limit int) ([]Object, error) {
	q := NewQuery(`SELECT id, body, updated_at FROM objects WHERE kind = ? AND id > ? ORDER BY id LIMIT ?`,
		kind, after, PageSize(limit))
	return readAll(ctx, r, q, scanObject(kind))
}
