package postgres

import (
	"time"

	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/store"
)

// lockKeys loads and locks the named keys in name order. With skipLocked, a
// key locked by another transaction is left out instead of waited for (the
// lease path); without it the call waits (the finish and cancel paths, which
// never hold a key a lease transaction waits for, since none ever waits).
// Missing keys are left out.
func lockKeys(ctx context.Context, q querier, names []string, skipLocked bool) (map[string]*admission.State, error) {
	names = slices.Sorted(slices.Values(names))
	return collectKeys(q.Query(ctx, lockKeysSQL(skipLocked), names))
}

// lockKeysSQL selects and locks the keys named by $1 in name order.
func lockKeysSQL(skipLocked bool) string {
	lock := `FOR NO KEY UPDATE`
	if skipLocked {
		lock += ` SKIP LOCKED`
	}
	return `SELECT ` + keyCols + ` FROM limit_keys WHERE name = ANY($1) ORDER BY name ` + lock
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
	st := admission.NewState(def)
	_, err := q.Exec(ctx, `INSERT INTO limit_keys (name, rate, burst, concurrency, adaptive, min_rate, learned_rate, windows, per_start)
		SELECT n, $2, $3, $4, $5, $6, $7, $8::jsonb, $9 FROM unnest($1::text[]) AS n ORDER BY n
		ON CONFLICT (name) DO NOTHING`,
		slices.Sorted(slices.Values(names)), st.Rate, st.Burst, st.Concurrency, st.Adaptive, st.MinRate, st.LearnedRate,
		windowsJSON(st.Windows), st.PerStart)
	return err
}

// UpsertLimit creates or reconfigures a limit key at now. A live key keeps
// its pause, bucket position, window logs and in-flight count (see
// admission.State.Reconfigure). It returns the key's state after the change.
func (s *Store) UpsertLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, error) {
	if err := c.Validate(); err != nil {
		return admission.State{}, fmt.Errorf("limit key %q: %w", c.Name, err)
	}
	var out admission.State
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := ensureKeys(ctx, tx, []string{c.Name}, c); err != nil {
			return err
		}
		states, err := lockKeys(ctx, tx, []string{c.Name}, false)
		if err != nil {
			return err
		}
		st := states[c.Name]
		st.Reconfigure(c, now)
		out = *st
		_, err = tx.Exec(ctx, `UPDATE limit_keys SET rate = $2, burst = $3, concurrency = $4, adaptive = $5,
			min_rate = $6, learned_rate = $7, tat = $8, windows = $9::jsonb, shapes = $10, last_decrease = $11,
			per_start = $12, updated_at = now() WHERE name = $1`,
			st.Name, st.Rate, st.Burst, st.Concurrency, st.Adaptive, st.MinRate, st.LearnedRate, ns(st.TAT),
			windowsJSON(st.Windows), st.MarshalShapes(nil), ns(st.LastRefusal), st.PerStart)
		return err
	})
	if err != nil {
		return admission.State{}, fmt.Errorf("upsert limit %s: %w", c.Name, err)
	}
	// Groups blocked on the old configuration (a slow rate, a small cap)
	// are looked at again at once. It is a hint, so it runs after the
	// commit, outside the key's lock.
	_, err = s.pool.Exec(ctx, `UPDATE job_groups SET blocked_until = 0 WHERE keys @> ARRAY[$1::text] AND blocked_until > 0`, c.Name)
	if err != nil {
		return out, fmt.Errorf("upsert limit %s: unblock its groups: %w", c.Name, err)
	}
	return out, nil
}

// GetLimit returns one key's configuration and live state, or ErrNotFound.
func (s *Store) GetLimit(ctx context.Context, name string) (admission.State, error) {
	st, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM limit_keys WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return admission.State{}, store.ErrNotFound
	}
	if err != nil {
		return admission.State{}, err
	}
	return *st, nil
}

// ListLimits returns every key, ordered by name.
func (s *Store) ListLimits(ctx context.Context) ([]admission.State, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyCols+` FROM limit_keys ORDER BY name`)
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
