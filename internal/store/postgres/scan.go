package postgres

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// ns is store.UnixNano: the zero time is 0.
func ns(t time.Time) int64 { return store.UnixNano(t) }

// nullNS is ns for nullable columns: the zero time is NULL.
func nullNS(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

// tm is store.UnixTime of a NOT NULL column: 0 is the zero time.
func tm(n int64) time.Time { return store.UnixTime(&n) }

// nullTM is store.UnixTime: NULL and 0 are the zero time.
func nullTM(n *int64) time.Time { return store.UnixTime(n) }

// int8TM is nullTM for a column read into a pgtype.Int8.
func int8TM(n pgtype.Int8) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return tm(n.Int64)
}

// nullBytes stores an empty payload or result as NULL.
func nullBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// groupKeys is the canonical key set of a group: sorted, so jobs naming the
// same keys in another order share a group.
func groupKeys(keys []string) []string {
	k := slices.Clone(keys)
	slices.Sort(k)
	return k
}

// jobCols are the columns scanJob reads, in order.
const jobCols = `id, kind, region, lane, tenant, limit_keys, cost, priority, payload, idempotency_key,
	deadline, budget_congestion, budget_transient, budget_schema, parent_id, depth, state, reason,
	eligible_at, attempt, attempts_congestion, attempts_transient, attempts_schema, lease_token,
	lease_expires_at, result, created_at, updated_at, finished_at`

// historyCol is an extra column after jobCols: the attempt history, one
// JSON array kept in the job's row (NULL before the first record).
const historyCol = `history`

// foldHistory is the new value of the history column hist with the record
// rec (an SQL expression of its JSON text, as recordJSON writes it)
// appended, or folded into the last record as store.AppendFolded does
// when rec is a pending pass (store.FoldsRecord). A record of any other
// outcome is told by its text (json.Marshal writes "outcome":"pending"
// with no space, and a quote inside a string is escaped, so no other
// record contains it) and appended without parsing the array, as before;
// only a pending pass parses the history (::jsonb), which folding keeps
// short (store.HistoryFoldAll). The records are compared as jsonb, every
// field but the ones a pass changes; jsonb's text of the folded array
// differs from json.Marshal's in spacing and key order only, and the next
// plain append extends it as text all the same.
func foldHistory(hist, rec string) string {
	appended := `left(` + hist + `, -1) || ',' || ` + rec + ` || ']'`
	return `CASE WHEN ` + hist + ` IS NULL THEN '[' || ` + rec + ` || ']'
		WHEN strpos(` + rec + `, '"outcome":"pending"') = 0 THEN ` + appended + `
		ELSE (SELECT CASE WHEN f.h -> -1 ->> 'outcome' = 'pending'
				AND (jsonb_array_length(f.h) >= ` + strconv.Itoa(store.HistoryFoldAll) + `
					OR (f.h -> -1) - '{at,attempt,delay_ns,count,first_at}'::text[] = f.r - '{at,attempt,delay_ns}'::text[])
			THEN jsonb_set(f.h, '{-1}', f.r || jsonb_build_object(
				'count', coalesce((f.h -> -1 ->> 'count')::bigint, 1) + 1,
				'first_at', coalesce(f.h -> -1 -> 'first_at', f.h -> -1 -> 'at')))::text
			ELSE ` + appended + ` END
			FROM (SELECT ` + hist + `::jsonb AS h, ` + rec + `::jsonb AS r) f)
	END`
}

func scanJob(row pgx.Row) (*job.Job, error) {
	return scan(row, false)
}

func scanJobHistory(row pgx.Row) (*job.Job, error) {
	return scan(row, true)
}

// jobScratch holds what scan reads a row into besides the job itself: the
// columns that need a conversion, and the destination list. Each of them
// escaped to the heap on its own when they were scan's locals (their
// addresses go into an []any), 13 allocations a job on the lease's hot
// path; pooled, they are none.
type jobScratch struct {
	lane, state, reason      string
	payload, result, history []byte
	// The nullable columns are read into pgtype values: into a pointer,
	// pgx allocates the value it points to (reflect.New), two a leased job.
	token                      pgtype.Text
	deadline, lease, finished  pgtype.Int8
	eligible, created, updated int64
	dest                       []any
}

var jobScratchPool = sync.Pool{New: func() any { return new(jobScratch) }}

// reset drops what the scratch refers to, so that the pool retains no job's
// payload or result.
func (c *jobScratch) reset() {
	clear(c.dest)
	*c = jobScratch{dest: c.dest[:0]}
}

func scan(row pgx.Row, withHistory bool) (*job.Job, error) {
	j := new(job.Job)
	c := jobScratchPool.Get().(*jobScratch)
	defer func() {
		c.reset()
		jobScratchPool.Put(c)
	}()
	budgets, attempts := &j.Budgets, &j.Attempts
	c.dest = append(c.dest[:0], &j.ID, &j.Kind, &j.Region, &c.lane, &j.Tenant, &j.LimitKeys, &j.Cost, &j.Priority, &c.payload,
		&j.IdempotencyKey, &c.deadline, &budgets.Congestion, &budgets.Transient, &budgets.Schema, &j.ParentID,
		&j.Depth, &c.state, &c.reason, &c.eligible, &j.Attempt, &attempts.Congestion, &attempts.Transient,
		&attempts.Schema, &c.token, &c.lease, &c.result, &c.created, &c.updated, &c.finished)
	if withHistory {
		c.dest = append(c.dest, &c.history)
	}
	if err := row.Scan(c.dest...); err != nil {
		return nil, err
	}
	j.Lane, j.State, j.Reason = job.Lane(c.lane), job.State(c.state), job.Reason(c.reason)
	j.Payload, j.Result = rawJSON(c.payload), rawJSON(c.result)
	j.Deadline, j.LeaseExpiresAt, j.FinishedAt = int8TM(c.deadline), int8TM(c.lease), int8TM(c.finished)
	j.EligibleAt, j.CreatedAt, j.UpdatedAt = tm(c.eligible), tm(c.created), tm(c.updated)
	j.LeaseToken = c.token.String // "" when NULL
	if len(c.history) > 0 {
		if err := json.Unmarshal(c.history, &j.History); err != nil {
			return nil, fmt.Errorf("job %s: decode history: %w", j.ID, err)
		}
	}
	return j, nil
}

func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// collectJobs reads every row of rows as a job (without history).
func collectJobs(rows pgx.Rows, err error) ([]*job.Job, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*job.Job, error) { return scanJob(r) })
}

// keyScratch is scanKey's jobScratch: a key is read on every lease and
// every finish, sixteen of them a batch in the throughput workload.
type keyScratch struct {
	tat, paused, refused int64
	windows, shapes      []byte
	dest                 []any
}

var keyScratchPool = sync.Pool{New: func() any { return new(keyScratch) }}

// scanKey reads a row of store.LimitKeyCols.
func scanKey(row pgx.Row) (*admission.State, error) {
	st := new(admission.State)
	c := keyScratchPool.Get().(*keyScratch)
	defer func() {
		clear(c.dest)
		*c = keyScratch{dest: c.dest[:0]}
		keyScratchPool.Put(c)
	}()
	c.dest = append(c.dest[:0], &st.Name, &st.Rate, &st.Burst, &st.Concurrency, &st.Adaptive, &st.MinRate,
		&st.LearnedRate, &c.tat, &c.paused, &st.InFlight, &c.refused, &c.windows, &c.shapes, &st.PerStart)
	if err := row.Scan(c.dest...); err != nil {
		return nil, err
	}
	st.TAT, st.PausedUntil, st.LastRefusal = tm(c.tat), tm(c.paused), tm(c.refused)
	if err := store.DecodeLimitKey(st, c.windows, c.shapes); err != nil {
		return nil, err
	}
	return st, nil
}

// collectKeys reads every row of rows as a key state, by name.
func collectKeys(rows pgx.Rows, err error) (map[string]*admission.State, error) {
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*admission.State, error) { return scanKey(r) })
	if err != nil {
		return nil, err
	}
	out := make(map[string]*admission.State, len(list))
	for _, st := range list {
		out[st.Name] = st
	}
	return out, nil
}

// recordJSON encodes one attempt record for the history column.
func recordJSON(r job.AttemptRecord) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		// AttemptRecord has only plain fields; Marshal cannot fail on it.
		panic(fmt.Sprintf("encode attempt record: %v", err))
	}
	return b
}
