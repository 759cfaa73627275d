//go:build sqlite_cgo

package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net/url"
	"strconv"

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

// pragma sets a pragma in a data source name the way this driver reads it:
// _name=value, run on every new connection.
func pragma(q url.Values, name, value string) { q.Add("_"+name, value) }

// connParams adds this driver's own connection options. _mutex=no opens the
// connection without SQLite's per-connection mutex: database/sql never uses
// one connection from two goroutines at once, so that lock only costs time.
func connParams(q url.Values) { q.Add("_mutex", "no") }

// openPool opens a database/sql pool over dsn; mmapSize, when positive, is
// PRAGMA mmap_size on each of its connections. go-sqlite3 reads no
// mmap_size from a DSN, so the pragma runs in a ConnectHook.
func openPool(dsn string, mmapSize int64) (*sql.DB, error) {
	if mmapSize <= 0 {
		return sql.Open(driverName, dsn)
	}
	pragma := "PRAGMA mmap_size = " + strconv.FormatInt(mmapSize, 10)
	d := &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(pragma, nil)
		return err
	}}
	return sql.OpenDB(dsnConnector{d: d, dsn: dsn}), nil
}

// dsnConnector opens connections of driver d over dsn, for sql.OpenDB.
type dsnConnector struct {
	d   driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// resultCode returns SQLite's primary result code carried by err, if any.
func resultCode(err error) (int, bool) {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	return int(se.Code), true
}
