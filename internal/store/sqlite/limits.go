package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// loadKeys reads the named keys' states; a key with no row is left out.
// An unpaced key's state comes from s.unpaced once read: lease and finish
// read every key of every group they touch, and a key nobody configured
// (every key of bench throughput) is never written by either, so reading
// its row again each call was a statement per key per call for nothing
// (docs/benchmarks.md, "Session 9 (s9h4)"). Each caller gets its own copy.
func (s *Store) loadKeys(tx *writeTx, names []string) (map[string]*admission.State, error) {
	out := make(map[string]*admission.State, len(names))
	for _, n := range names {
		if st, ok := s.unpaced[n]; ok {
			out[n] = &st
			continue
		}
		var stored int
		st, err := scanKey(s.queryRow(tx, `SELECT `+store.LimitKeyCols+`, coalesce(length(shapes), 0) FROM limit_keys WHERE name = ?`, n), &stored)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.shapesLen[n] = stored
		if st.Unpaced() {
			s.unpaced[n] = *st
		}
		out[n] = st
	}
	return out, nil
}

// saveKeys writes the states back; each key written leaves s.unpaced, to be
// read again from its row (a pause of an unpaced key, a reconfiguration).
func (s *Store) saveKeys(tx *writeTx, keys []*admission.State) error {
	for _, st := range keys {
		delete(s.unpaced, st.Name)
		_, err := s.exec(tx, `UPDATE limit_keys SET rate = ?, burst = ?, concurrency = ?, adaptive = ?, min_rate = ?,
			learned_rate = ?, tat = ?, paused_until = ?, in_flight = ?, last_decrease = ? WHERE name = ?`,
			st.Rate, st.Burst, st.Concurrency, st.Adaptive, st.MinRate, st.LearnedRate, ns(st.TAT),
			ns(st.PausedUntil), st.InFlight, ns(st.LastRefusal), st.Name)
		if err != nil {
			return err
		}
		// Only keys with windows or discovery have start logs; a bucket
		// key skips the blob (binding it measured slower on this driver).
		if st.Adaptive || len(st.Windows) > 0 {
			if err := s.saveShapes(tx, st); err != nil {
				return err
			}
		}
	}
	return nil
}

// saveShapes writes st's start logs and discovery state (the shapes
// column), a long log padded to shapesRoom of the stored length.
func (s *Store) saveShapes(tx *writeTx, st *admission.State) error {
	var blob any
	if b := st.MarshalShapes(nil); len(b) > 0 {
		if room := shapesRoom(len(b), s.shapesLen[st.Name]); room > len(b) {
			b = append(b, make([]byte, room-len(b))...)
		}
		s.shapesLen[st.Name] = len(b)
		blob = b
	} else {
		s.shapesLen[st.Name] = 0
	}
	_, err := s.exec(tx, `UPDATE limit_keys SET shapes = ? WHERE name = ?`, blob, st.Name)
	return err
}

// shapesPadFrom is the length of a shapes blob from which saveShapes pads
// it: a shorter one stays inline in its limit_keys row (a WITHOUT ROWID
// leaf keeps ~1,000 bytes of a row inline), where a change of size
// rewrites only the leaf.
const shapesPadFrom = 1024

// shapesRoom is the length to store a shapes blob of n bytes in when the
// row holds have bytes now. A row longer than its leaf keeps inline puts
// the rest on overflow pages, and SQLite rewrites such a row in place only
// at the same size: at another size it frees the overflow pages and takes
// new ones, which writes page 1 (the freelist's head and count, the
// file's size) and a freelist trunk page besides. A sliding window's start
// log changes length with almost every lease and finish (a start in, old
// ones out), so each such write of a key with a minute of starts (~2.7 KiB
// in bench batch-isolation) wrote three pages more than the row's own
// (docs/benchmarks.md, "Session 34 (s34h1)"). The log is padded with
// zero bytes, which decoding ignores past the encoded logs, to the stored
// length while it fits and fills at least half of it, or else to a
// quarter more than it needs in steps of 256 bytes.
func shapesRoom(n, have int) int {
	switch {
	case n < shapesPadFrom:
		return n
	case n <= have && n >= have/2:
		return have
	}
	return (n + n/4 + 255) &^ 255
}

// upsertLimit is store.Writes.UpsertLimit: the key created if missing,
// reconfigured by store.ReconfigureKey and saved in one write.
func (s *Store) upsertLimit(ctx context.Context, c admission.Config, now time.Time, declared string) (admission.State, bool, error) {
	var (
		out     admission.State
		applied bool
	)
	err := s.write(ctx, func(tx *writeTx) error {
		// Every write below changes the row; saveKeys drops the entry
		// again after the read.
		delete(s.unpaced, c.Name)
		if err := s.ensureKey(tx, c.Name, c, now); err != nil {
			return err
		}
		states, err := s.loadKeys(tx, []string{c.Name})
		if err != nil {
			return err
		}
		st := states[c.Name]
		applied, err = store.ReconfigureKey(st, c, now, declared, store.KeyTx{
			Declared: func() (string, error) {
				var last sql.NullString
				err := s.queryRow(tx, `SELECT declared FROM limit_keys WHERE name = ?`, c.Name).Scan(&last)
				return last.String, err
			},
			// The single writer makes the count exact.
			Running: func() (n int, err error) {
				return n, s.queryRow(tx, runningOfKeySQL, c.Name).Scan(&n)
			},
			Save: func(st *admission.State, declared string) error { return s.saveConfigured(tx, st, declared) },
		})
		out = *st
		return err
	})
	return out, applied && err == nil, err
}

// saveConfigured writes a reconfigured key, with the declaration applied
// when declared is not "".
func (s *Store) saveConfigured(tx *writeTx, st *admission.State, declared string) error {
	if declared != "" {
		if _, err := s.exec(tx, `UPDATE limit_keys SET declared = ? WHERE name = ?`, declared, st.Name); err != nil {
			return err
		}
	}
	if err := s.saveKeys(tx, []*admission.State{st}); err != nil {
		return err
	}
	// The windows and per_start are configuration: only here do they
	// change; the logs are written even when the key no longer has
	// any, to clear.
	if _, err := s.exec(tx, `UPDATE limit_keys SET windows = ?, per_start = ? WHERE name = ?`, store.WindowsJSON(st.Windows), st.PerStart, st.Name); err != nil {
		return err
	}
	if err := s.saveShapes(tx, st); err != nil {
		return err
	}
	// Groups blocked on the old configuration (a slow rate, a small
	// cap) are looked at again at once, as on PostgreSQL.
	_, err := s.exec(tx, `UPDATE job_groups SET blocked_until = 0
		WHERE blocked_until > 0 AND EXISTS (SELECT 1 FROM json_each(job_groups.keys) WHERE value = ?)`, st.Name)
	return err
}

// unpacedSQL is admission.Config.Unpaced on a limit_keys row.
const unpacedSQL = `(rate = 0 AND concurrency = 0 AND NOT adaptive AND windows = '[]')`

// runningOfKeySQL counts the running jobs naming the key ?1: the in-flight
// count of an unpaced key, which its row does not keep.
const runningOfKeySQL = `SELECT count(*) FROM jobs WHERE state = 'running'
	AND EXISTS (SELECT 1 FROM json_each(jobs.limit_keys) WHERE value = ?1)`

// listKeysSQL lists every key as liveKeyCols would read it, counting the
// running jobs of all keys in one pass rather than once per key.
var listKeysSQL = `SELECT ` + strings.Replace(store.LimitKeyCols, `in_flight`, `CASE WHEN `+unpacedSQL+` THEN coalesce(r.n, 0) ELSE in_flight END`, 1) + `
	FROM limit_keys LEFT JOIN (SELECT j.value AS k, count(*) AS n FROM jobs, json_each(jobs.limit_keys) AS j WHERE jobs.state = 'running' GROUP BY j.value) AS r ON r.k = limit_keys.name ORDER BY name`

// liveKeyCols is keyCols with an unpaced key's in-flight count derived from
// the running jobs.
var liveKeyCols = strings.Replace(store.LimitKeyCols, `in_flight`, `CASE WHEN `+unpacedSQL+` THEN (SELECT count(*) FROM jobs
	WHERE state = 'running' AND EXISTS (SELECT 1 FROM json_each(jobs.limit_keys) WHERE value = limit_keys.name))
	ELSE in_flight END`, 1)

// GetLimit returns one key.
func (s *Store) GetLimit(ctx context.Context, name string) (admission.State, error) {
	k, err := scanKey(s.readRow(ctx, `SELECT `+liveKeyCols+` FROM limit_keys WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return admission.State{}, store.ErrNotFound
	}
	if err != nil {
		return admission.State{}, err
	}
	return *k, nil
}

// LimitConfigs returns the configurations of the named keys that exist,
// in one statement that reads only their rows (the stored in_flight an
// unpaced key does not keep is scanned and dropped, never derived).
func (s *Store) LimitConfigs(ctx context.Context, names []string) (map[string]admission.Config, error) {
	arg, err := json.Marshal(names)
	if err != nil {
		return nil, err
	}
	rows, err := s.readQuery(ctx, `SELECT `+store.LimitKeyCols+` FROM limit_keys WHERE name IN (SELECT value FROM json_each(?))`, string(arg))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]admission.Config, len(names))
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out[k.Name] = k.Config
	}
	return out, rows.Err()
}

// ListLimits returns every key by name.
func (s *Store) ListLimits(ctx context.Context) ([]admission.State, error) {
	rows, err := s.readQuery(ctx, listKeysSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, func() (admission.State, error) {
		k, err := scanKey(rows)
		if err != nil {
			return admission.State{}, err
		}
		return *k, nil
	})
}

// Backlog returns the waiting cost per key for the lane and lanes before it.
func (s *Store) Backlog(ctx context.Context, lane job.Lane, keys []string) (map[string]int64, error) {
	lanes := store.BacklogLanes(lane)
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		var n sql.NullInt64
		// One sum per state, so each walks its own partial index per group.
		groups := `SELECT g.id FROM job_groups g WHERE g.lane IN (` + placeholders(len(lanes)) + `)
			AND EXISTS (SELECT 1 FROM json_each(g.keys) WHERE value = ?)`
		args := append(anys(lanes), k)
		// A per-start key's backlog is its number of waiting jobs: each
		// takes one unit from it, whatever its cost.
		var perStart bool
		if err := s.readRow(ctx, `SELECT per_start FROM limit_keys WHERE name = ?`, k).Scan(&perStart); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		sum := "coalesce(sum(cost), 0)"
		if perStart {
			sum = "count(*)"
		}
		err := s.readRow(ctx, `SELECT (SELECT `+sum+` FROM jobs WHERE state = 'waiting' AND group_id IN (`+groups+`))
			+ (SELECT `+sum+` FROM jobs WHERE state = 'retry_scheduled' AND group_id IN (`+groups+`))`,
			append(args, args...)...).Scan(&n)
		if err != nil {
			return nil, err
		}
		out[k] = n.Int64
	}
	return out, nil
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

func anys[T any](v []T) []any {
	out := make([]any, len(v))
	for i := range v {
		out[i] = v[i]
	}
	return out
}
