//go:build !sqlite_cgo

package sqlite

import (
	"database/sql"
	"errors"
	"net/url"
	"strconv"

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

// pragma sets a pragma in a data source name the way this driver reads it:
// _pragma=name(value), run on every new connection.
func pragma(q url.Values, name, value string) { q.Add("_pragma", name+"("+value+")") }

// connParams adds this driver's own connection options: none.
func connParams(url.Values) {}

// openPool opens a database/sql pool over dsn; mmapSize, when positive, is
// PRAGMA mmap_size on each of its connections, set in the DSN as the
// driver's other pragmas are.
func openPool(dsn string, mmapSize int64) (*sql.DB, error) {
	if mmapSize > 0 {
		dsn += "&" + url.Values{"_pragma": {"mmap_size(" + strconv.FormatInt(mmapSize, 10) + ")"}}.Encode()
	}
	return sql.Open(driverName, dsn)
}

// resultCode returns SQLite's primary result code carried by err, if any.
func resultCode(err error) (int, bool) {
	var se *sqlite3.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	return se.Code() & 0xff, true
}
