package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// ns is store.UnixNano: the zero time is 0.
func ns(t time.Time) int64 { return store.UnixNano(t) }

// nullNS is ns for nullable columns: the zero time is NULL.
func nullNS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// tm converts stored Unix nanoseconds back; 0 and NULL are the zero time.
func tm(n sql.NullInt64) time.Time {
	if !n.Valid || n.Int64 == 0 {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// groupKeys is the canonical form of a key set: sorted, as JSON. Jobs
// naming the same keys in another order share a group.
func groupKeys(keys []string) string {
	if slices.IsSorted(keys) {
		return stringsJSON(keys)
	}
	k := slices.Clone(keys)
	slices.Sort(k)
	return stringsJSON(k)
}

// stringsJSON encodes keys exactly as json.Marshal does. Every inserted
// job encodes its limit keys twice (the column and its group's sorted
// set); the common case, plain strings, is written by hand in one
// allocation instead of json.Marshal's reflection and copies
// (docs/benchmarks.md, "Session 11 (s11h4)"). TestStringsJSON checks it
// against json.Marshal.
func stringsJSON(keys []string) string {
	if keys == nil {
		return "null"
	}
	n := 2
	for _, k := range keys {
		if !plainJSON(k) {
			b, _ := json.Marshal(keys)
			return string(b)
		}
		n += len(k) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('[')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String()
}

const jobCols = `id, kind, region, lane, tenant, limit_keys, cost, priority, payload, idempotency_key,
	deadline, budget_congestion, budget_transient, budget_schema, parent_id, depth, state, reason,
	eligible_at, attempt, attempts_congestion, attempts_transient, attempts_schema, lease_token,
	lease_expires_at, result, created_at, updated_at, finished_at`

// leasedCols is what MarkLeased reads back of a job it leased: the rowid
// and jobCols without the columns its UPDATE set to values it knows
// (state, lease token, lease expiry, updated_at), without two that the
// schema's CHECK fixes for a job leased from waiting (reason is empty,
// finished_at NULL), without three its group holds (kind, lane, tenant:
// Heads found the job through its group) and without the three Heads read
// in the same transaction (id, cost and the group: the rowid names the
// head). Each column read back costs a VM step, two to four driver calls
// (a text column's declared type among them) and a conversion, on every
// job of every lease; so the nine columns that hold their defaults in the
// common job (the store's region, no idempotency key, deadline, parent,
// depth or result, no failed attempt yet) are read as one, rare: NULL
// when all nine do (and the caller sets the region), else the job is one
// of the few whose nine MarkLeased reads back by leasedRareSQL. The
// region is the one parameter (plain "?", before the read-back's rowids).
const leasedCols = `rowid, limit_keys, priority, payload, budget_congestion, budget_transient, budget_schema,
	eligible_at, attempt, created_at,
	CASE WHEN region = ? AND idempotency_key = '' AND deadline IS NULL AND parent_id = '' AND depth = ''
		AND result IS NULL AND attempts_congestion = 0 AND attempts_transient = 0 AND attempts_schema = 0
		THEN NULL ELSE 1 END`

// leasedRareCols are the columns leasedCols reads as one: those of a job
// whose rare column is not NULL, read by scanLeasedRare.
const leasedRareCols = `rowid, region, idempotency_key, deadline, parent_id, depth,
	attempts_congestion, attempts_transient, attempts_schema, result`

// scanLeasedRare reads a row of leasedRareCols into the job its rowid
// names in jobs.
func scanLeasedRare(r scanner, jobs map[int64]*job.Job) error {
	var (
		rowid    int64
		deadline sql.NullInt64
		result   []byte
		f        job.Job
	)
	if err := r.Scan(&rowid, &f.Region, &f.IdempotencyKey, &deadline, &f.ParentID, &f.Depth,
		&f.Attempts.Congestion, &f.Attempts.Transient, &f.Attempts.Schema, &result); err != nil {
		return err
	}
	j := jobs[rowid]
	if j == nil {
		return fmt.Errorf("sqlite: lease: read back rowid %d, not one leased", rowid)
	}
	j.Region, j.IdempotencyKey, j.Deadline, j.ParentID, j.Depth, j.Attempts = f.Region, f.IdempotencyKey,
		tm(deadline), f.ParentID, f.Depth, f.Attempts
	if len(result) > 0 {
		j.Result = result
	}
	return nil
}

// jobRow holds what a scan of jobCols or leasedCols reads into before it
// becomes a job: the columns stored in another form than the job's
// (keys as JSON, times as nullable nanoseconds, empty blobs). scanJob and
// scanLeased read different columns; what they share is decoded once, by
// job.
type jobRow struct {
	j                          job.Job
	keys                       string
	payload, result            []byte
	deadline, eligible, create sql.NullInt64
}

// head is where jobCols' columns id through depth are read to, appended
// to dest.
func (r *jobRow) head(dest []any) []any {
	j := &r.j
	return append(dest, &j.ID, &j.Kind, &j.Region, &j.Lane, &j.Tenant, &r.keys, &j.Cost, &j.Priority, &r.payload,
		&j.IdempotencyKey, &r.deadline, &j.Budgets.Congestion, &j.Budgets.Transient, &j.Budgets.Schema,
		&j.ParentID, &j.Depth)
}

// job decodes the row's stored forms into its job.
func (r *jobRow) job() (*job.Job, error) {
	j := &r.j
	if err := jsonStrings(r.keys, &j.LimitKeys); err != nil {
		return nil, err
	}
	if len(r.payload) > 0 {
		j.Payload = r.payload
	}
	if len(r.result) > 0 {
		j.Result = r.result
	}
	j.Deadline, j.EligibleAt, j.CreatedAt = tm(r.deadline), tm(r.eligible), tm(r.create)
	return j, nil
}

// scanLeased reads a row of leasedCols; the caller sets the rest. It
// scans into *any and converts the values itself: database/sql converts
// an INTEGER into an *int by formatting it and parsing it back (reflection
// and an allocation per column), and into an *int64 or a sql.NullInt64 by
// reflection, where into an *any it stores what the driver returned
// (int64, string, a copy of a []byte, or nil). It returns the job, its
// rowid and whether its rare column was set (leasedCols: the caller then
// reads the nine it stands for, else it sets the region); b is the
// caller's buffer, reused row after row.
func scanLeased(r scanner, b *anyRow) (*job.Job, int64, bool, error) {
	v, err := b.scan(r, 11)
	defer clear(v) // holds no row's values after the row
	if err != nil {
		return nil, 0, false, err
	}
	var row jobRow
	j := &row.j
	var c leasedConv
	rowid := c.int(v[0])
	row.keys, j.Priority, row.payload = c.str(v[1]), int(c.int(v[2])), c.bytes(v[3])
	j.Budgets.Congestion, j.Budgets.Transient, j.Budgets.Schema = int(c.int(v[4])), int(c.int(v[5])), int(c.int(v[6]))
	row.eligible, j.Attempt, row.create = c.null(v[7]), int(c.int(v[8])), c.null(v[9])
	rare := v[10] != nil
	if c.err != nil {
		return nil, 0, false, c.err
	}
	j, err = row.job()
	return j, rowid, rare, err
}

// anyRow is a buffer, reused row after row, that a row is scanned into as
// *any destinations (scanLeased, headScan, ReadyGroups): database/sql then
// stores what the driver returned (int64, string, a copy of a []byte, or
// nil), which the caller converts (leasedConv), where a row's own
// variables escaped to the heap and an INTEGER went into an *int64 by
// reflection.
type anyRow struct{ v, dest []any }

// scan reads r's row of n columns into the buffer and returns its values,
// which the caller clears after the row.
func (b *anyRow) scan(r scanner, n int) ([]any, error) {
	if len(b.v) != n {
		b.v, b.dest = make([]any, n), make([]any, n)
		for i := range b.v {
			b.dest[i] = &b.v[i]
		}
	}
	return b.v, r.Scan(b.dest...)
}

// leasedConv converts scanLeased's values, keeping the first value of an
// unexpected type as its error.
type leasedConv struct{ err error }

func (c *leasedConv) fail(v any, want string) {
	if c.err == nil {
		c.err = fmt.Errorf("sqlite: leased job: a column of %T, want %s", v, want)
	}
}

func (c *leasedConv) str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	c.fail(v, "text")
	return ""
}

func (c *leasedConv) int(v any) int64 {
	if x, ok := v.(int64); ok {
		return x
	}
	c.fail(v, "an integer")
	return 0
}

func (c *leasedConv) null(v any) sql.NullInt64 {
	if v == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: c.int(v), Valid: true}
}

func (c *leasedConv) bytes(v any) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return x
	case string:
		return []byte(x)
	}
	c.fail(v, "a blob")
	return nil
}

type scanner interface{ Scan(dest ...any) error }

func scanJob(r scanner) (*job.Job, error) {
	var (
		row                   jobRow
		token                 sql.NullString
		lease, update, finish sql.NullInt64
		buf                   [29]any
	)
	j := &row.j
	err := r.Scan(append(row.head(buf[:0]), &j.State, &j.Reason, &row.eligible, &j.Attempt, &j.Attempts.Congestion,
		&j.Attempts.Transient, &j.Attempts.Schema, &token, &lease, &row.result, &row.create, &update, &finish)...)
	if err != nil {
		return nil, err
	}
	if j, err = row.job(); err != nil {
		return nil, err
	}
	j.LeaseToken = token.String
	j.LeaseExpiresAt, j.UpdatedAt, j.FinishedAt = tm(lease), tm(update), tm(finish)
	return j, nil
}

// scanKey reads a row of store.LimitKeyCols, then any extra columns into
// extra.
func scanKey(r scanner, extra ...any) (*admission.State, error) {
	var (
		st                      admission.State
		tat, paused, lastRefuse sql.NullInt64
		windows                 string
		shapes                  []byte
	)
	err := r.Scan(append([]any{&st.Name, &st.Rate, &st.Burst, &st.Concurrency, &st.Adaptive, &st.MinRate,
		&st.LearnedRate, &tat, &paused, &st.InFlight, &lastRefuse, &windows, &shapes, &st.PerStart}, extra...)...)
	if err != nil {
		return nil, err
	}
	st.TAT, st.PausedUntil, st.LastRefusal = tm(tat), tm(paused), tm(lastRefuse)
	if err := store.DecodeLimitKey(&st, []byte(windows), shapes); err != nil {
		return nil, err
	}
	return &st, nil
}

// recordJSON encodes an attempt record for the history column, exactly as
// encoding/json does. Every finish writes one, so the common record (no
// why, no error, an outcome of plain characters) is appended by hand:
// json.Marshal's reflection over the struct cost more than the rest of
// the Go side of a finish (docs/benchmarks.md, "Session 8 (s8h3)").
// TestRecordJSON checks both paths against json.Marshal.
func recordJSON(r job.AttemptRecord) string {
	if y := r.At.Year(); r.Why != "" || r.Error != "" || r.Count != 0 || !r.FirstAt.IsZero() || !plainJSON(string(r.Outcome)) || y < 0 || y > 9999 {
		b, _ := json.Marshal(r)
		return string(b)
	}
	b := make([]byte, 0, 96)
	b = append(b, `{"at":"`...)
	b = r.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	b = append(b, `,"outcome":"`...)
	b = append(b, r.Outcome...)
	b = append(b, '"')
	if r.Status != 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(r.Status), 10)
	}
	if r.Delay != 0 {
		b = append(b, `,"delay_ns":`...)
		b = strconv.AppendInt(b, int64(r.Delay), 10)
	}
	b = append(b, '}')
	return string(b)
}

// plainJSON reports whether s is encoded by encoding/json as itself in
// quotes: printable ASCII with nothing it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

// plainByte[c] says c is printable ASCII that encoding/json writes as
// itself: one load per byte where the comparisons took seven (the lease
// checks every job's id and token).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// jsonStrings decodes a JSON array of strings, as the driver stores limit
// keys (json.Marshal's output: no spaces). Every lease and group read
// decodes one per job or group; the common form, strings with no escape,
// is split by hand, which costs a fraction of json.Unmarshal's reflection
// and allocations. Anything else goes to json.Unmarshal, which also
// reports malformed input. TestJSONStrings checks both paths against it.
func jsonStrings(s string, out *[]string) error {
	if keys, ok := plainStrings(s); ok {
		*out = keys
		return nil
	}
	return json.Unmarshal([]byte(s), out)
}

// plainStrings splits `["a","b"]` into its strings when every one is
// plain (no backslash, no control character, valid UTF-8) and the array has no spaces;
// ok is false for any other input.
func plainStrings(s string) (keys []string, ok bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, false
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return []string{}, true
	}
	keys = make([]string, 0, 1+strings.Count(body, `","`))
	for {
		if len(body) < 2 || body[0] != '"' {
			return nil, false
		}
		end := strings.IndexByte(body[1:], '"') + 1
		if end == 0 {
			return nil, false
		}
		k := body[1:end]
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] == '\\' {
				return nil, false
			}
		}
		if !utf8.ValidString(k) {
			return nil, false // json.Unmarshal would replace the bad bytes
		}
		keys = append(keys, k)
		body = body[end+1:]
		if body == "" {
			return keys, true
		}
		if body[0] != ',' {
			return nil, false
		}
		body = body[1:]
	}
}
