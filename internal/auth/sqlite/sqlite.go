// Package sqlite stores ratelane's API keys in a small SQLite database of
// their own (by default <data>/control.db), separate from the regions' job
// stores: keys are control-plane data that belong to no region.
//
// The database runs in WAL mode with synchronous=FULL, so a created or
// revoked key survives power loss once Create or Revoke returns. Key writes
// are rare, so a busy timeout is all the write coordination needed.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/ratelane/ratelane/internal/auth"
)

// FileName is the conventional name of the control database in the data
// directory.
const FileName = "control.db"

// schema is the control database, version 1. Times are Unix nanoseconds
// for exact round trips; revoked_at is NULL while a key is active.
const schema = `
CREATE TABLE IF NOT EXISTS api_keys (
	id         TEXT PRIMARY KEY CHECK (length(id) = 8),
	hash       BLOB NOT NULL CHECK (length(hash) = 32),
	name       TEXT NOT NULL,
	tenant     TEXT NOT NULL CHECK (tenant <> ''),
	role       TEXT NOT NULL CHECK (role IN ('producer', 'worker', 'admin')),
	regions    TEXT NOT NULL DEFAULT '[]',
	created_at INTEGER NOT NULL,
	revoked_at INTEGER
) STRICT;
PRAGMA user_version = 1;
`

// Store is the SQLite backend of auth.Keys. It is safe for concurrent use.
type Store struct {
	db *sql.DB
}

var _ auth.Backend = (*Store)(nil)

// Open opens (creating if needed) the control database at path and its
// directory, and creates the schema.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("auth/sqlite: path is required")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("auth/sqlite: create data directory: %w", err)
	}
	// Created here with 0600 (SQLite's own default is 0644, less the
	// umask); SQLite gives the -wal and -shm files the same mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("auth/sqlite: create %s: %w", path, err)
	}
	f.Close()
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("auth/sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("auth/sqlite: create schema in %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// InsertKey stores a new key; auth.ErrKeyExists when its id is taken.
func (s *Store) InsertKey(ctx context.Context, r auth.Record) error {
	regions, err := json.Marshal(r.Regions)
	if err != nil {
		return err
	}
	if r.Regions == nil {
		regions = []byte("[]")
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (id, hash, name, tenant, role, regions, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		r.ID, r.Hash, r.Name, r.Tenant, string(r.Role), string(regions), r.CreatedAt.UnixNano())
	return oneRow(res, err, "insert key", auth.ErrKeyExists)
}

// oneRow is the answer of a write of one row: its error as the write
// named what, or none when it wrote no row.
func oneRow(res sql.Result, err error, what string, none error) error {
	if err != nil {
		return fmt.Errorf("auth/sqlite: %s: %w", what, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return none
	}
	return nil
}

const columns = `id, hash, name, tenant, role, regions, created_at, revoked_at`

// GetKey returns one key; auth.ErrNotFound when there is none.
func (s *Store) GetKey(ctx context.Context, id string) (auth.Record, error) {
	r, err := scan(s.db.QueryRowContext(ctx, `SELECT `+columns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return auth.Record{}, auth.ErrNotFound
	}
	return r, err
}

// ListKeys returns every key ordered by creation time, then id.
func (s *Store) ListKeys(ctx context.Context) ([]auth.KeyInfo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("auth/sqlite: list keys: %w", err)
	}
	defer rows.Close()
	return auth.CollectKeys(rows, func() (auth.Record, error) { return scan(rows) })
}

// RevokeKey sets revoked_at unless already set; auth.ErrNotFound when there
// is no such key.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, at.UnixNano(), id)
	return oneRow(res, err, "revoke key", auth.ErrNotFound)
}

type scanner interface{ Scan(dest ...any) error }

func scan(row scanner) (auth.Record, error) {
	var (
		r       auth.Record
		role    string
		regions string
		created int64
		revoked sql.NullInt64
	)
	if err := row.Scan(&r.ID, &r.Hash, &r.Name, &r.Tenant, &role, &regions, &created, &revoked); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return r, err
		}
		return r, fmt.Errorf("auth/sqlite: read key: %w", err)
	}
	if err := json.NewDecoder(strings.NewReader(regions)).Decode(&r.Regions); err != nil {
		return r, fmt.Errorf("auth/sqlite: key %s: regions: %w", r.ID, err)
	}
	var rev *int64
	if revoked.Valid {
		rev = &revoked.Int64
	}
	r.FromRow(role, created, rev)
	return r, nil
}
