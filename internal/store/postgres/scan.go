package postgres

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

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

// appendHistory is the new value of the history column with the record
// $n appended, without parsing the array.
func appendHistory(n int) string {
	p := "$" + strconv.Itoa(n) + "::text"
	return `CASE WHEN history IS NULL THEN '[' || ` + p + ` || ']' ELSE left(history, -1) || ',' || ` + p + ` || ']' END`
}

func scanJob(row pgx.Row) (*job.Job, error) {
	return scan(row, false)
}

func scanJobHistory(row pgx.Row) (*job.Job, error) {
	return scan(row, true)
}

func scan(row pgx.Row, withHistory bool) (*job.Job, error) {
	var (
		j                          job.Job
		lane, state, reason        string
		payload, result, history   []byte
		token                      *string
		deadline, lease, finished  *int64
		eligible, created, updated int64
		budgets                    = &j.Budgets
		attempts                   = &j.Attempts
		dest                       []any
	)
	dest = []any{&j.ID, &j.Kind, &j.Region, &lane, &j.Tenant, &j.LimitKeys, &j.Cost, &j.Priority, &payload,
		&j.IdempotencyKey, &deadline, &budgets.Congestion, &budgets.Transient, &budgets.Schema, &j.ParentID,
		&j.Depth, &state, &reason, &eligible, &j.Attempt, &attempts.Congestion, &attempts.Transient,
		&attempts.Schema, &token, &lease, &result, &created, &updated, &finished}
	if withHistory {
		dest = append(dest, &history)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	j.Lane, j.State, j.Reason = job.Lane(lane), job.State(state), job.Reason(reason)
	j.Payload, j.Result = rawJSON(payload), rawJSON(result)
	j.Deadline, j.LeaseExpiresAt, j.FinishedAt = nullTM(deadline), nullTM(lease), nullTM(finished)
	j.EligibleAt, j.CreatedAt, j.UpdatedAt = tm(eligible), tm(created), tm(updated)
	if token != nil {
		j.LeaseToken = *token
	}
	if len(history) > 0 {
		if err := json.Unmarshal(history, &j.History); err != nil {
			return nil, fmt.Errorf("job %s: decode history: %w", j.ID, err)
		}
	}
	return &j, nil
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

// scanKey reads a row of store.LimitKeyCols.
func scanKey(row pgx.Row) (*admission.State, error) {
	var (
		st                   admission.State
		tat, paused, refused int64
		windows, shapes      []byte
	)
	err := row.Scan(&st.Name, &st.Rate, &st.Burst, &st.Concurrency, &st.Adaptive, &st.MinRate,
		&st.LearnedRate, &tat, &paused, &st.InFlight, &refused, &windows, &shapes, &st.PerStart)
	if err != nil {
		return nil, err
	}
	st.TAT, st.PausedUntil, st.LastRefusal = tm(tat), tm(paused), tm(refused)
	if err := store.DecodeLimitKey(&st, windows, shapes); err != nil {
		return nil, err
	}
	return &st, nil
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
