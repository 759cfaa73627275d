//go:build !sqlite_cgo

package sqlite

import (
	"errors"
	"net/url"

	sqlite3 "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// Driver names the SQLite driver this binary was built with. The default is
// modernc.org/sqlite: SQLite transpiled to Go, so the binary needs no C
// toolchain, builds with CGO_ENABLED=0 and cross-compiles like any Go
// program. Building with the tag sqlite_cgo links github.com/mattn/go-sqlite3
// instead (see driver_cgo.go and docs/architecture.md, "The SQLite driver").
const Driver = "modernc.org/sqlite"

// driverName is the database/sql name the driver registers.
const driverName = "sqlite"

// dsn is the writer's (readOnly false) or the readers' data source: WAL, the
// configured synchronous level, foreign keys, a busy timeout, and BEGIN
// IMMEDIATE for the writer so that a transaction takes the write lock when
// it starts, not at its first write.
func dsn(path, sync string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// probeDSN opens the file read-only, with none of the writer's pragmas.
func probeDSN(path string) string {
	q := url.Values{}
	q.Add("mode", "ro")
	q.Add("_pragma", "busy_timeout(2000)")
	q.Add("_pragma", "query_only(1)")
	return "file:" + path + "?" + q.Encode()
}

// resultCode returns SQLite's primary result code carried by err, if any.
func resultCode(err error) (int, bool) {
	var se *sqlite3.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	return se.Code() & 0xff, true
}
