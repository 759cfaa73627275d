// Package postgres is ratelane's scale-out store: one PostgreSQL schema (or
// database) per region, shared by many ratelane nodes.
//
// Admission is decided inside the lease transaction, on rows locked with
// FOR ... SKIP LOCKED: each node takes different groups, a limit key locked
// by another node is left out for this call rather than waited for, and a
// key's token bucket and concurrency cap are read and written under its row
// lock. An unpaced key (no bucket, window, cap or adaptivity) is only read
// by lease and finish, under a FOR KEY SHARE lock that only a
// reconfiguration conflicts with, so leases and finishes on such keys do
// not exclude each other. So a lease transaction never waits on a lock,
// and all nodes together never exceed a key's rate or concurrency cap. Finish, Cancel and the other
// writers do wait, always locking job rows first, then groups, then keys in
// name order, so they cannot deadlock with each other over groups or keys;
// two finishes of overlapping jobs lock the rows in their UPDATE's plan
// order and may, rarely, deadlock over rows, which PostgreSQL breaks and
// the store retries (see endAttemptsSQL).
//
// Times are stored as Unix nanoseconds (bigint) for exact round trips; see
// migrations/0001_init.up.sql. The store never reads the wall clock for a
// decision: every time comes from the caller.
//
// A Store is safe for concurrent use. Open connects; Migrate creates or
// upgrades the schema; Close releases the pool.
package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelane/ratelane/internal/store"
)

// Config configures Open.
type Config struct {
	// URL is the PostgreSQL connection string, e.g.
	// "postgres://ratelane@db:5432/ratelane?sslmode=verify-full". Required.
	URL string
	// Schema holds every table of this region's store. Zero means
	// "ratelane_" + Region. Migrate creates it when missing.
	Schema string
	// Region is the region the store holds. Required. The first Migrate
	// records it in the schema; opening the schema for another region fails.
	Region string
	// MaxConns caps the pool's connections. Zero means the URL's
	// pool_max_conns when it has one, else DefaultMaxConns.
	MaxConns int32
	// AsyncLease commits lease transactions with synchronous_commit off
	// (for that transaction only; finishes, inserts and every other write
	// still wait for their WAL flush). A lease is the one write that is
	// safe to lose: a lost lease is a lease that expired at once. If the
	// database server crashes within a WAL-writer cycle (at most three
	// wal_writer_delay, 600 ms by default) of a lease and before any later
	// durable commit, which flushes it too, the job is back to waiting
	// with its previous attempt count, runs again (at least once, as after
	// any lost lease: its worker's outcome is refused), and the tokens the
	// lease took from its keys are returned, so its keys may admit that
	// many starts again. Nothing else changes: other sessions see the
	// lease at once, so multi-node leasing is unaffected. Default false.
	AsyncLease bool

	// tracer, set by tests, sees every statement and batch sent (the
	// round-trip counts in bench_test.go).
	tracer pgx.QueryTracer
}

// DefaultMaxConns is the pool size when neither Config.MaxConns nor the
// URL sets one. pgxpool's own default (the larger of 4 and the number of
// CPUs) let 64 concurrent HTTP enqueues queue for 4 connections, each held
// for an insert's round trips and commit: single-job enqueue ran at the
// pool's pace, not the server's (docs/benchmarks.md, issue 13).
const DefaultMaxConns = 16

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Schema == "" && c.Region != "" {
		c.Schema = "ratelane_" + c.Region
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("postgres: URL is required")
	case c.Region == "":
		return errors.New("postgres: Region is required")
	case len(c.Schema) > 63:
		return fmt.Errorf("postgres: Schema must be 1 to 63 bytes (a PostgreSQL identifier), got %d", len(c.Schema))
	case c.MaxConns < 0:
		return fmt.Errorf("postgres: MaxConns must be 0 (default) or more, got %d", c.MaxConns)
	}
	return nil
}

// Store is the PostgreSQL driver. It is safe for concurrent use by many
// goroutines, and many Stores (in one process or many) may share a schema.
type Store struct {
	// SQLReads are the schedule, batch and document reads this driver
	// shares with SQLite's (GetSchedule, ListBatches, GetObject, ...), run
	// by read.
	store.SQLReads
	// Derived are the contract's methods both SQL drivers build alike
	// around a write of this driver's (PutObject, UpsertLimit, Advance,
	// ...): store.Writes.
	store.Derived
	cfg    Config
	pool   *pgxpool.Pool
	schema string // cfg.Schema, quoted as an identifier
	// inserts coalesces concurrent small Insert calls (coalesce.go).
	inserts *inserter
	// finishes decides which finishes commit with their statement (finish.go).
	finishes finishCommits
}

var _ store.Store = (*Store)(nil)

// Open connects to cfg.URL with every connection's search_path set to
// cfg.Schema, and checks that the schema, if already migrated, holds
// cfg.Region. It does not migrate; call Migrate.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse URL: %w", err)
	}
	switch {
	case cfg.MaxConns > 0:
		pc.MaxConns = cfg.MaxConns
	case !strings.Contains(cfg.URL, "pool_max_conns"):
		pc.MaxConns = max(pc.MaxConns, DefaultMaxConns)
	}
	schema := pgx.Identifier{cfg.Schema}.Sanitize()
	// Sent in the startup message, so it costs no round trip per
	// connection; only this schema is searched (pg_catalog always is).
	pc.ConnConfig.RuntimeParams["search_path"] = schema
	if cfg.tracer != nil {
		pc.ConnConfig.Tracer = cfg.tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{cfg: cfg, pool: pool, schema: schema}
	s.inserts = &inserter{s: s}
	s.SQLReads = store.NewSQLReads(s.read, statsOldestQuery)
	s.Derived = store.NewDerived(store.Writes{PutObjects: s.putObjects, PutObjectIf: s.putObjectIf, DeleteObject: s.deleteObject,
		UpsertLimit: s.upsertLimit, SettleBatchItems: s.settleBatchItems, Advance: s.advance})
	if err := s.checkRegion(ctx, pool, false); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Region returns the region this store holds.
func (s *Store) Region() string { return s.cfg.Region }

// Schema returns the schema that holds this store's tables.
func (s *Store) Schema() string { return s.cfg.Schema }

// Close closes the pool, waiting for the inserts in flight and for
// connections in use to be returned. No call may start after Close.
func (s *Store) Close() error {
	s.inserts.close()
	s.pool.Close()
	return nil
}

// querier is what pgxpool.Pool, pgx.Conn and pgx.Tx have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// maxTxAttempts bounds retries of a transaction that failed on a deadlock or
// a serialization failure. The lock order makes deadlocks unexpected; the
// retry keeps a rare one (e.g. with an operator's ad-hoc SQL) from surfacing
// as an error.
const maxTxAttempts = 3

// inTx runs fn in a read-committed transaction, retrying it from scratch on
// a deadlock or serialization failure. fn must assign, not append to, any
// result it captures.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		if err == nil || attempt == maxTxAttempts || !retryable(err) {
			return err
		}
	}
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// newToken returns a fresh lease token: 128 random bits, base32.
func newToken() string { return rand.Text() }

// guarded turns a guarded write that matched no row into ErrNotFound (no
// such job) or ErrConflict (the job is not in the expected state).
func guarded(ctx context.Context, q querier, tag pgconn.CommandTag, err error, id string) error {
	if err != nil || tag.RowsAffected() > 0 {
		return err
	}
	return missingOrConflict(ctx, q, id)
}

func missingOrConflict(ctx context.Context, q querier, id string) error {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)`, id).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return store.ErrNotFound
	}
	return store.ErrConflict
}

// wrap adds context to err, except to the sentinels callers branch on,
// which are returned as they are.
func wrap(err error, format string, args ...any) error {
	if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// nowOr returns t, or fallback when t is zero.
func nowOr(t, fallback time.Time) time.Time {
	if t.IsZero() {
		return fallback
	}
	return t
}
