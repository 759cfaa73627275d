// Package postgres stores ratelane's API keys in PostgreSQL, in a schema of
// their own (ratelane_control by default), so that every node of a
// multi-node deployment shares one set of keys. Keys are control-plane data
// and belong to no region.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelane/ratelane/internal/auth"
)

// DefaultSchema holds the key table unless Config.Schema says otherwise.
const DefaultSchema = "ratelane_control"

// Config configures Open.
type Config struct {
	// URL is the PostgreSQL connection string. Required.
	URL string
	// Schema holds the key table; zero means DefaultSchema. Open creates it
	// when missing.
	Schema string
	// MaxConns caps the pool; zero means pgxpool's default.
	MaxConns int32
}

// Store is the PostgreSQL backend of auth.Keys. It is safe for concurrent
// use, and any number of nodes may share one schema.
type Store struct {
	pool *pgxpool.Pool
}

var _ auth.Backend = (*Store)(nil)

// schema is the control schema, version 1. Times are Unix nanoseconds for
// exact round trips; revoked_at is NULL while a key is active.
const schema = `
CREATE TABLE IF NOT EXISTS api_keys (
	id         text PRIMARY KEY CHECK (length(id) = 8),
	hash       bytea NOT NULL CHECK (length(hash) = 32),
	name       text NOT NULL,
	tenant     text NOT NULL CHECK (tenant <> ''),
	role       text NOT NULL CHECK (role IN ('producer', 'worker', 'admin')),
	regions    text[] NOT NULL DEFAULT '{}',
	created_at bigint NOT NULL,
	revoked_at bigint
)`

// Open connects to cfg.URL and creates the schema and its table when
// missing. Nodes starting at once serialise on an advisory lock, because
// concurrent CREATE ... IF NOT EXISTS can still collide in PostgreSQL.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.URL == "" {
		return nil, errors.New("auth/postgres: URL is required")
	}
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if len(cfg.Schema) > 63 {
		return nil, fmt.Errorf("auth/postgres: Schema must be 1 to 63 bytes, got %d", len(cfg.Schema))
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("auth/postgres: parse URL: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	ident := pgx.Identifier{cfg.Schema}.Sanitize()
	pc.ConnConfig.RuntimeParams["search_path"] = ident
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("auth/postgres: connect: %w", err)
	}
	s := &Store{pool: pool}
	if err := s.migrate(ctx, ident); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context, ident string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('ratelane auth migrate'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+ident); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, schema)
		return err
	})
	if err != nil {
		return fmt.Errorf("auth/postgres: create schema: %w", err)
	}
	return nil
}

// Close releases the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// InsertKey stores a new key; auth.ErrKeyExists when its id is taken.
func (s *Store) InsertKey(ctx context.Context, r auth.Record) error {
	regions := r.Regions
	if regions == nil {
		regions = []string{}
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO api_keys (id, hash, name, tenant, role, regions, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
		r.ID, r.Hash, r.Name, r.Tenant, string(r.Role), regions, r.CreatedAt.UnixNano())
	if err != nil {
		return fmt.Errorf("auth/postgres: insert key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return auth.ErrKeyExists
	}
	return nil
}

const columns = `id, hash, name, tenant, role, regions, created_at, revoked_at`

// GetKey returns one key; auth.ErrNotFound when there is none.
func (s *Store) GetKey(ctx context.Context, id string) (auth.Record, error) {
	r, err := scan(s.pool.QueryRow(ctx, `SELECT `+columns+` FROM api_keys WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return auth.Record{}, auth.ErrNotFound
	}
	return r, err
}

// ListKeys returns every key ordered by creation time, then id.
func (s *Store) ListKeys(ctx context.Context) ([]auth.KeyInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+columns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("auth/postgres: list keys: %w", err)
	}
	defer rows.Close()
	return auth.CollectKeys(rows, func() (auth.Record, error) { return scan(rows) })
}

// RevokeKey sets revoked_at unless already set; auth.ErrNotFound when there
// is no such key.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2`, at.UnixNano(), id)
	if err != nil {
		return fmt.Errorf("auth/postgres: revoke key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return auth.ErrNotFound
	}
	return nil
}

func scan(row pgx.Row) (auth.Record, error) {
	var (
		r       auth.Record
		role    string
		created int64
		revoked *int64
	)
	if err := row.Scan(&r.ID, &r.Hash, &r.Name, &r.Tenant, &role, &r.Regions, &created, &revoked); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return r, err
		}
		return r, fmt.Errorf("auth/postgres: read key: %w", err)
	}
	r.FromRow(role, created, revoked)
	return r, nil
}
