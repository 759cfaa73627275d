package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File modes of what the store creates. A store holds payloads and results
// of every tenant of its region; nobody but the ratelane user reads it.
const (
	// DirMode is the mode of a data directory Open creates.
	DirMode fs.FileMode = 0o700
	// FileMode is the mode of a database file Open creates. SQLite gives
	// the -wal and -shm files the mode of the database file, so they are
	// 0600 too. The process umask can only remove bits, never add them.
	FileMode fs.FileMode = 0o600
)

// CorruptError reports a database file that cannot be served: it is not an
// SQLite database, it was truncated, or its pages fail SQLite's
// quick_check. Open returns it before anything is read or written, so a
// damaged store is never served as an empty or partial queue.
type CorruptError struct {
	// Path is the database file.
	Path string
	// Detail is what SQLite (or the size check) reported.
	Detail string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("sqlite: store file %s is damaged (%s); ratelane will not serve it. "+
		"Stop every process using it, move %s and its -wal and -shm files aside (keep them for analysis), "+
		"and restore the region's store from your latest backup (docs/operations.md, \"A corrupted store\")",
		e.Path, e.Detail, e.Path)
}

// prepareFile makes sure the data directory exists (DirMode when created)
// and creates a missing database file empty with FileMode, so SQLite opens
// an existing file and never creates one with its own 0644 default. It
// reports whether the file is new. An existing file of zero bytes with no
// write-ahead log is refused: it is a store truncated to nothing, and SQLite
// would silently serve it as a new, empty queue.
func prepareFile(path string) (created bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), DirMode); err != nil {
		return false, fmt.Errorf("sqlite: create data directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, FileMode)
	if err == nil {
		return true, f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("sqlite: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("sqlite: %s is not a regular file", path)
	}
	if fi.Size() == 0 {
		if wal, err := os.Stat(path + "-wal"); err != nil || wal.Size() == 0 {
			return false, &CorruptError{Path: path, Detail: "the file is empty: truncated to zero bytes, or left by a start that crashed " +
				"before its first write (then deleting it starts a new, empty store)"}
		}
	}
	return false, nil
}

// corruptCode reports whether err is SQLite saying the file is damaged or
// not a database (SQLITE_CORRUPT, SQLITE_NOTADB, with extended codes).
func corruptCode(err error) bool {
	code, ok := resultCode(err)
	return ok && (code == 11 || code == 26) // SQLITE_CORRUPT, SQLITE_NOTADB
}

// asCorrupt turns SQLite's corruption errors into a CorruptError naming
// the file; other errors are wrapped as they are.
func asCorrupt(path, step string, err error) error {
	if corruptCode(err) {
		return &CorruptError{Path: path, Detail: step + ": " + err.Error()}
	}
	return fmt.Errorf("sqlite: %s %s: %w", step, path, err)
}

// maxCheckLines bounds how much of quick_check's report goes into the error.
const maxCheckLines = 3

// quickCheck runs PRAGMA quick_check on db and returns a CorruptError when
// it reports anything but "ok". quick_check verifies every page of every
// table and index b-tree (page structure, cell bounds, freelist, overflow
// chains, record formats, NOT NULL and CHECK constraints) but not that each
// index matches its table; integrity_check also does that, and costs several
// times as much on a large store (docs/operations.md gives the measurement).
// The first check of a damaged file is what matters at start-up, and
// quick_check finds damaged pages, which is what bit-flips and torn or
// truncated writes leave.
func quickCheck(ctx context.Context, db *sql.DB, path string) error {
	rows, err := db.QueryContext(ctx, `PRAGMA quick_check(`+fmt.Sprint(maxCheckLines)+`)`)
	if err != nil {
		return asCorrupt(path, "quick_check", err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return asCorrupt(path, "quick_check", err)
		}
		lines = append(lines, s)
	}
	if err := rows.Err(); err != nil {
		return asCorrupt(path, "quick_check", err)
	}
	if len(lines) == 1 && lines[0] == "ok" {
		return nil
	}
	return &CorruptError{Path: path, Detail: "quick_check: " + strings.Join(lines, "; ")}
}

// IntegrityCheck runs the full PRAGMA integrity_check (quick_check plus
// index-to-table consistency) on the store, for an operator's deeper check
// of a suspect file; Open runs only quick_check. It returns a CorruptError
// naming the file when SQLite reports a problem.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	rows, err := s.rdb.QueryContext(ctx, `PRAGMA integrity_check(`+fmt.Sprint(maxCheckLines)+`)`)
	if err != nil {
		return asCorrupt(s.cfg.Path, "integrity_check", err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return asCorrupt(s.cfg.Path, "integrity_check", err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		return asCorrupt(s.cfg.Path, "integrity_check", err)
	}
	if len(lines) == 1 && lines[0] == "ok" {
		return nil
	}
	return &CorruptError{Path: s.cfg.Path, Detail: "integrity_check: " + strings.Join(lines, "; ")}
}

// Durability is what the store's connection reports after opening, read
// back with PRAGMA rather than assumed from the DSN: some filesystems
// (network mounts, some FUSE ones) refuse WAL, and SQLite then silently
// stays in another journal mode.
type Durability struct {
	// JournalMode is PRAGMA journal_mode, e.g. "wal".
	JournalMode string
	// Synchronous is PRAGMA synchronous as a name: "OFF", "NORMAL", "FULL"
	// or "EXTRA".
	Synchronous string
}

var syncNames = map[int]string{0: "OFF", 1: SyncNormal, 2: SyncFull, 3: "EXTRA"}

// readDurability reads back journal_mode and synchronous on db's connection
// and refuses anything but WAL and the configured level.
func readDurability(ctx context.Context, db *sql.DB, path, want string) (Durability, error) {
	var d Durability
	var sync int
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&d.JournalMode); err != nil {
		return d, asCorrupt(path, "read journal_mode", err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		return d, asCorrupt(path, "read synchronous", err)
	}
	d.Synchronous = syncNames[sync]
	if d.JournalMode != "wal" {
		return d, fmt.Errorf("sqlite: %s is in journal_mode %q, not wal: the filesystem may not support WAL "+
			"(shared memory for the -shm file); put the data directory on a local filesystem", path, d.JournalMode)
	}
	if d.Synchronous != want {
		return d, fmt.Errorf("sqlite: %s reports synchronous=%s, but %s was configured", path, d.Synchronous, want)
	}
	return d, nil
}

// Durability returns the journal mode and synchronous level the store's
// writer connection reported at Open.
func (s *Store) Durability() Durability { return s.durability }

// readyTimeout bounds one Ready probe.
const readyTimeout = 2 * time.Second

// Ready reads the database through a connection opened for this call only
// (read-only, so a deleted file is reported, never recreated): it reads the
// file header and schema from disk, not from a pooled connection's page
// cache, and then a page of the jobs table. A file overwritten or removed
// under a running store fails it. It is cheap (1.5 ms measured on a
// loaded 2-core machine, BenchmarkReady) but not a full check; callers
// cache its answer.
func (s *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if _, err := os.Stat(s.cfg.Path); err != nil {
		return fmt.Errorf("sqlite: store file: %w", err)
	}
	conn, err := s.probe.Conn(ctx)
	if err != nil {
		return asCorrupt(s.cfg.Path, "open", err)
	}
	defer conn.Close()
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM jobs LIMIT 1)`).Scan(&n); err != nil {
		return asCorrupt(s.cfg.Path, "read", err)
	}
	return nil
}

// openProbe returns the pool Ready uses: no idle connection is kept, so
// every probe opens the file anew.
func openProbe(path string) (*sql.DB, error) {
	db, err := sql.Open(driverName, probeDSN(path))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(0)
	return db, nil
}
