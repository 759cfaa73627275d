package postgres

import (
	"time"

	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/store"
)

// lockKeys loads and locks the named keys in name order. With skipLocked, a
// key locked by another transaction is left out instead of waited for (the
// lease path); without it the call waits (the finish and cancel paths, which
// never hold a key a lease transaction waits for, since none ever waits).
// Missing keys are left out.
//
// Paced keys, and the names in exclusive, are locked FOR NO KEY UPDATE:
// their row is about to be written. An unpaced key (see
// admission.Config.Unpaced) is only read by lease and finish, so it is
// locked FOR KEY SHARE, which no other lease or finish conflicts with (one
// of them locking every unpaced key of a batch used to make concurrent
// leases skip the whole batch's groups and come back empty); only
// UpsertLimit's FOR UPDATE conflicts with it, so that a reconfiguration
// that starts pacing a key counts its running jobs after every lease and
// finish that read it as unpaced has committed. A key whose pacing
// changed between the two halves' checks is in neither: left out when
// skipping, relocked exclusively when waiting.
func lockKeys(ctx context.Context, q querier, names, exclusive []string, skipLocked bool) (map[string]*admission.State, error) {
	names = slices.Sorted(slices.Values(names))
	got, err := collectKeys(q.Query(ctx, lockKeysSQL(skipLocked), names, exclusiveOrEmpty(exclusive)))
	if err != nil || skipLocked || len(got) == len(names) {
		return got, err
	}
	return relockMissing(ctx, q, names, got)
}

// relockMissing locks exclusively, in name order, the names lockKeys did
// not return (missing keys stay missing) and adds them to got.
func relockMissing(ctx context.Context, q querier, names []string, got map[string]*admission.State) (map[string]*admission.State, error) {
	var missing []string
	for _, n := range names {
		if _, ok := got[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return got, nil
	}
	more, err := collectKeys(q.Query(ctx, `SELECT `+store.LimitKeyCols+` FROM limit_keys WHERE name = ANY($1) ORDER BY name FOR NO KEY UPDATE`, missing))
	if err != nil {
		return nil, err
	}
	for n, st := range more {
		got[n] = st
	}
	return got, nil
}

func exclusiveOrEmpty(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}

// unpacedSQL is admission.Config.Unpaced on a limit_keys row.
const unpacedSQL = `(rate = 0 AND concurrency = 0 AND NOT adaptive AND windows = '[]'::jsonb)`

// lockKeysSQL selects and locks the keys named by $1, those named by $2
// exclusively whatever their pacing (see lockKeys); each half in name order.
func lockKeysSQL(skipLocked bool) string {
	return splitLockSQL(`name = ANY($1)`, `name = ANY($2)`, skipLocked)
}

// splitLockSQL locks the limit keys matching sel: paced ones and those
// matching excl FOR NO KEY UPDATE, in name order, then the other unpaced
// ones FOR KEY SHARE.
func splitLockSQL(sel, excl string, skipLocked bool) string {
	skip := ``
	if skipLocked {
		skip = ` SKIP LOCKED`
	}
	return `SELECT * FROM (SELECT ` + store.LimitKeyCols + ` FROM limit_keys WHERE ` + sel + ` AND (NOT ` + unpacedSQL + ` OR ` + excl + `)
			ORDER BY name FOR NO KEY UPDATE` + skip + `) AS paced
		UNION ALL
		SELECT * FROM (SELECT ` + store.LimitKeyCols + ` FROM limit_keys WHERE ` + sel + ` AND ` + unpacedSQL + ` AND NOT (` + excl + `)
			ORDER BY name FOR KEY SHARE` + skip + `) AS unpaced`
}

// saveKeys writes back the live state of locked keys in one statement. It
// leaves the configuration alone: only UpsertLimit changes that.
func saveKeys(ctx context.Context, q querier, keys []*admission.State) error {
	if len(keys) == 0 {
		return nil
	}
	var (
		names            = make([]string, len(keys))
		learned          = make([]float64, len(keys))
		tat, paused, dec = make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys))
		inFlight         = make([]int32, len(keys))
		shapes           = make([][]byte, len(keys))
	)
	for i, st := range keys {
		names[i], learned[i], inFlight[i] = st.Name, st.LearnedRate, int32(st.InFlight)
		tat[i], paused[i], dec[i] = ns(st.TAT), ns(st.PausedUntil), ns(st.LastRefusal)
		shapes[i] = st.MarshalShapes(nil)
	}
	_, err := q.Exec(ctx, `UPDATE limit_keys k SET learned_rate = u.learned_rate, tat = u.tat,
			paused_until = u.paused_until, in_flight = u.in_flight, last_decrease = u.last_decrease,
			shapes = u.shapes, updated_at = now()
		FROM unnest($1::text[], $2::float8[], $3::int8[], $4::int8[], $5::int4[], $6::int8[], $7::bytea[])
			AS u(name, learned_rate, tat, paused_until, in_flight, last_decrease, shapes)
		WHERE k.name = u.name`, names, learned, tat, paused, inFlight, dec, shapes)
	return err
}

// ensureKeys creates the named keys that do not exist yet with the default
// configuration. Existing keys are neither changed nor locked, so this never
// waits on a lease; it only waits for another transaction creating the same
// key, and names are created in sorted order so two such waits cannot cross.
func ensureKeys(ctx context.Context, q querier, names []string, def admission.Config) error {
	_, err := q.Exec(ctx, ensureKeysSQL, ensureKeysArgs(names, def)...)
	return err
}

// queueEnsureKeys is ensureKeys queued on a batch.
func queueEnsureKeys(b *pgx.Batch, names []string, def admission.Config) {
	b.Queue(ensureKeysSQL, ensureKeysArgs(names, def)...)
}

const ensureKeysSQL = `INSERT INTO limit_keys (name, rate, burst, concurrency, adaptive, min_rate, learned_rate, windows, per_start)
		SELECT n, $2, $3, $4, $5, $6, $7, $8::jsonb, $9 FROM unnest($1::text[]) AS n ORDER BY n
		ON CONFLICT (name) DO NOTHING`

func ensureKeysArgs(names []string, def admission.Config) []any {
	st := admission.NewState(def)
	return []any{slices.Sorted(slices.Values(names)), st.Rate, st.Burst, st.Concurrency, st.Adaptive, st.MinRate,
		st.LearnedRate, store.WindowsJSON(st.Windows), st.PerStart}
}

// upsertLimit is store.Writes.UpsertLimit: the key created if missing and
// locked, reconfigured by store.ReconfigureKey, and its blocked groups
// unblocked after the commit.
func (s *Store) upsertLimit(ctx context.Context, c admission.Config, now time.Time, declared string) (admission.State, bool, error) {
	var (
		out     admission.State
		applied bool
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := ensureKeys(ctx, tx, []string{c.Name}, c); err != nil {
			return err
		}
		// FOR UPDATE, not NO KEY UPDATE: it must also wait for the lease
		// and finish transactions that read the key as unpaced (they hold
		// it FOR KEY SHARE, see lockKeys), so that the count of its
		// running jobs sees what they did.
		st, err := scanKey(tx.QueryRow(ctx, `SELECT `+store.LimitKeyCols+` FROM limit_keys WHERE name = $1 FOR UPDATE`, c.Name))
		if err != nil {
			return err
		}
		applied, err = store.ReconfigureKey(st, c, now, declared, store.KeyTx{
			Declared: func() (string, error) {
				var last *string
				if err := tx.QueryRow(ctx, `SELECT declared FROM limit_keys WHERE name = $1`, c.Name).Scan(&last); err != nil || last == nil {
					return "", err
				}
				return *last, nil
			},
			Running: func() (n int, err error) {
				return n, tx.QueryRow(ctx, runningOfKeySQL, c.Name).Scan(&n)
			},
			Save: func(st *admission.State, declared string) error {
				var decl *string
				if declared != "" {
					decl = &declared
				}
				_, err := tx.Exec(ctx, `UPDATE limit_keys SET rate = $2, burst = $3, concurrency = $4, adaptive = $5,
					min_rate = $6, learned_rate = $7, tat = $8, windows = $9::jsonb, shapes = $10, last_decrease = $11,
					per_start = $12, in_flight = $13, declared = coalesce($14::text, declared), updated_at = now() WHERE name = $1`,
					st.Name, st.Rate, st.Burst, st.Concurrency, st.Adaptive, st.MinRate, st.LearnedRate, ns(st.TAT),
					store.WindowsJSON(st.Windows), st.MarshalShapes(nil), ns(st.LastRefusal), st.PerStart, st.InFlight, decl)
				return err
			},
		})
		out = *st
		return err
	})
	if err != nil {
		return admission.State{}, false, fmt.Errorf("upsert limit %s: %w", c.Name, err)
	}
	if !applied {
		return out, false, nil
	}
	// Groups blocked on the old configuration (a slow rate, a small cap)
	// are looked at again at once. It is a hint, so it runs after the
	// commit, outside the key's lock.
	_, err = s.pool.Exec(ctx, unblockGroupsSQL, c.Name)
	if err != nil {
		return out, true, fmt.Errorf("upsert limit %s: unblock its groups: %w", c.Name, err)
	}
	return out, true, nil
}

// runningOfKeySQL counts the running jobs naming the key $1: the in-flight
// count of an unpaced key, which its row does not keep.
// unblockGroupsSQL unblocks the groups of the key $1. Its condition
// blocked_until > 0 is job_groups_keys's predicate (migration 0017), so
// the index finds them.
const unblockGroupsSQL = `UPDATE job_groups SET blocked_until = 0 WHERE keys @> ARRAY[$1::text] AND blocked_until > 0`

const runningOfKeySQL = `SELECT count(*) FROM jobs WHERE state = 'running' AND limit_keys @> ARRAY[$1::text]`

// listKeysSQL lists every key as liveKeyCols would read it, counting the
// running jobs of all keys in one pass rather than once per key.
var listKeysSQL = `SELECT ` + strings.Replace(store.LimitKeyCols, `in_flight`, `CASE WHEN `+unpacedSQL+` THEN coalesce(r.n, 0) ELSE in_flight END`, 1) + `
	FROM limit_keys LEFT JOIN (SELECT k, count(*)::int AS n FROM jobs, unnest(jobs.limit_keys) AS k WHERE state = 'running' GROUP BY k) AS r ON r.k = limit_keys.name ORDER BY name`

// liveKeyCols is keyCols with an unpaced key's in-flight count derived from
// the running jobs.
var liveKeyCols = strings.Replace(store.LimitKeyCols, `in_flight`, `CASE WHEN `+unpacedSQL+` THEN (SELECT count(*)::int FROM jobs
	WHERE state = 'running' AND limit_keys @> ARRAY[limit_keys.name]) ELSE in_flight END`, 1)

// GetLimit returns one key's configuration and live state, or ErrNotFound.
func (s *Store) GetLimit(ctx context.Context, name string) (admission.State, error) {
	st, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+liveKeyCols+` FROM limit_keys WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return admission.State{}, store.ErrNotFound
	}
	if err != nil {
		return admission.State{}, err
	}
	return *st, nil
}

// LimitConfigs returns the configurations of the named keys that exist,
// in one statement that reads only their rows (the stored in_flight an
// unpaced key does not keep is scanned and dropped, never derived).
func (s *Store) LimitConfigs(ctx context.Context, names []string) (map[string]admission.Config, error) {
	keys, err := collectKeys(s.pool.Query(ctx, `SELECT `+store.LimitKeyCols+` FROM limit_keys WHERE name = ANY($1)`, names))
	if err != nil {
		return nil, err
	}
	out := make(map[string]admission.Config, len(keys))
	for name, k := range keys {
		out[name] = k.Config
	}
	return out, nil
}

// ListLimits returns every key, ordered by name.
func (s *Store) ListLimits(ctx context.Context) ([]admission.State, error) {
	rows, err := s.pool.Query(ctx, listKeysSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (admission.State, error) {
		st, err := scanKey(r)
		if err != nil {
			return admission.State{}, err
		}
		return *st, nil
	})
}
