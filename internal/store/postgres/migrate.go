package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one numbered schema change.
type migration struct {
	version  int
	name     string
	up, down string
}

// migrateLockClass is the first key of the advisory lock Migrate takes; the
// second is a hash of the schema name, so regions migrate independently.
const migrateLockClass = 0x726c // "rl"

func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, f := range files {
		base := strings.TrimSuffix(strings.TrimPrefix(f, "migrations/"), ".up.sql")
		num, name, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number", f)
		}
		up, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		down, err := migrationFS.ReadFile("migrations/" + base + ".down.sql")
		if err != nil {
			return nil, fmt.Errorf("migration %s has no down file: %w", base, err)
		}
		out = append(out, migration{version: v, name: name, up: string(up), down: string(down)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

// Migrate creates the schema if missing and applies the embedded migrations
// not applied yet, in one transaction. It is idempotent and safe to run from
// many nodes at once: an advisory lock held for the transaction makes the
// others wait, and they then find nothing to do. It records the store's
// region on first use and fails if the schema holds another region.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	err = s.migrateTx(ctx, func(tx pgx.Tx, applied map[int]bool) error {
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.up); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return err
			}
		}
		return s.checkRegion(ctx, tx, true)
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate schema %s: %w", s.cfg.Schema, err)
	}
	return nil
}

// MigrateDown reverts every applied migration, newest first, leaving only
// the (empty) schema_migrations table. It exists for tests and CI that
// migrate up and down; it deletes all of the region's data.
func (s *Store) MigrateDown(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	slices.Reverse(ms)
	err = s.migrateTx(ctx, func(tx pgx.Tx, applied map[int]bool) error {
		for _, m := range ms {
			if !applied[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.down); err != nil {
				return fmt.Errorf("migration %04d_%s down: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, m.version); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate schema %s down: %w", s.cfg.Schema, err)
	}
	return nil
}

// migrateTx runs fn under the schema's migration lock with the set of
// applied versions.
func (s *Store) migrateTx(ctx context.Context, fn func(tx pgx.Tx, applied map[int]bool) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrateLockClass, s.cfg.Schema); err != nil {
			return err
		}
		// The connection's search_path named the schema before it existed;
		// set it again so that unqualified names below resolve to it.
		setup := `CREATE SCHEMA IF NOT EXISTS ` + s.schema + `;
			SET LOCAL search_path TO ` + s.schema + `;
			CREATE TABLE IF NOT EXISTS schema_migrations (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`
		if _, err := tx.Exec(ctx, setup); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return err
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		applied := map[int]bool{}
		for _, v := range versions {
			applied[v] = true
		}
		return fn(tx, applied)
	})
}

// checkRegion makes sure the schema holds this store's region. With record
// set (inside Migrate) it records the region on first use; otherwise a
// schema not migrated yet passes.
func (s *Store) checkRegion(ctx context.Context, q querier, record bool) error {
	if record {
		if _, err := q.Exec(ctx, `INSERT INTO store_meta (key, value) VALUES ('region', $1) ON CONFLICT (key) DO NOTHING`,
			s.cfg.Region); err != nil {
			return err
		}
	}
	var region string
	err := q.QueryRow(ctx, `SELECT value FROM store_meta WHERE key = 'region'`).Scan(&region)
	switch {
	case pgCode(err) == "42P01" || errors.Is(err, pgx.ErrNoRows):
		return nil // not migrated yet
	case err != nil:
		return fmt.Errorf("postgres: read store region: %w", err)
	case region != s.cfg.Region:
		return fmt.Errorf("postgres: schema %s holds region %q, not %q: a store serves exactly one region",
			s.cfg.Schema, region, s.cfg.Region)
	}
	return nil
}
