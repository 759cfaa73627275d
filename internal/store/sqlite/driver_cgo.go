//go:build sqlite_cgo

package sqlite

import (
	"errors"
	"net/url"

	sqlite3 "github.com/mattn/go-sqlite3" // SQLite compiled from C through cgo, registered as "sqlite3"
)

// Driver names the SQLite driver this binary was built with: with the tag
// sqlite_cgo, github.com/mattn/go-sqlite3, SQLite's C source compiled by the
// system's C compiler and called through cgo. It runs the single writer's
// SQL in fewer instructions than the transpiled default (docs/benchmarks.md,
// "Session 7 (s7h4)"), at the price of CGO_ENABLED=1, a C toolchain for
// every target, and a binary linked against the C library.
const Driver = "github.com/mattn/go-sqlite3"

// driverName is the database/sql name the driver registers.
const driverName = "sqlite3"

// dsn is the writer's (readOnly false) or the readers' data source, with the
// same pragmas as the default driver's. _mutex=no opens the connection
// without SQLite's per-connection mutex: database/sql never uses one
// connection from two goroutines at once, so that lock only costs time.
func dsn(path, sync string, readOnly bool) string {
	q := url.Values{}
	q.Add("_busy_timeout", "10000")
	q.Add("_journal_mode", "WAL")
	q.Add("_synchronous", sync)
	q.Add("_foreign_keys", "1")
	q.Add("_mutex", "no")
	if readOnly {
		q.Add("_query_only", "1")
	} else {
		q.Add("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// probeDSN opens the file read-only, with none of the writer's pragmas.
func probeDSN(path string) string {
	q := url.Values{}
	q.Add("mode", "ro")
	q.Add("_busy_timeout", "2000")
	q.Add("_query_only", "1")
	return "file:" + path + "?" + q.Encode()
}

// resultCode returns SQLite's primary result code carried by err, if any.
func resultCode(err error) (int, bool) {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	return int(se.Code), true
}
