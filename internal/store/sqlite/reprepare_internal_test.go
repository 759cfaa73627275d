//go:build !sqlite_cgo

package sqlite

import (
	"context"
	"database/sql"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// This test runs on the default driver only (build tag !sqlite_cgo):
// reprepares reads modernc.org/sqlite's statement handle, SQLite's
// counters having no database/sql API.

// TestLeaseScansNotReprepared runs lease and finish cycles the way bench
// throughput does (a lease size that changes every time, several groups,
// group 1 among them, groups that run empty) and checks that no statement
// of the writer is parsed and planned again once prepared: SQLite 3.54
// expires a statement whose plan depends on a bound LIMIT, or on a bare
// "col = ?" going between 0/1 and other values, and those re-prepares were
// ~7% of the writer's CPU. The count is SQLite's own
// (SQLITE_STMTSTATUS_REPREPARE), read through the driver's statement
// handle; the test skips if a driver upgrade moved that handle.
func TestLeaseScansNotReprepared(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	now := storetest.T0
	for round := range 40 {
		var batch []*job.Job
		for k := range 3 + round%5 {
			batch = append(batch, storetest.NewJob("t", job.LaneBatch, "key-"+strconv.Itoa(k%3)))
		}
		if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
		jobs, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 1 + round%7, LeaseFor: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, storetest.Validated(jobs, now)); err != nil {
			t.Fatal(err)
		}
	}
	// Drain: every group runs empty.
	for range 100 {
		now = now.Add(time.Millisecond)
		jobs, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 64, LeaseFor: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			break
		}
	}
	// Read on the writer goroutine, which owns writerStmts and the
	// connection.
	type count struct {
		q       string
		n, runs int32
	}
	var counts []count
	unreadable := false
	if err := s.write(ctx, func(*writeTx) error {
		for q, st := range s.writerStmts {
			if !strings.Contains(q, "job_groups") && !strings.Contains(q, "FROM jobs") && !strings.HasPrefix(q, "UPDATE jobs") {
				continue
			}
			n, runs, ok := reprepares(st)
			unreadable = unreadable || !ok
			counts = append(counts, count{q, n, runs})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if unreadable {
		t.Skip("modernc.org/sqlite internals changed: cannot read the statement handle")
	}
	checked := 0
	for _, c := range counts {
		checked++
		// The first run after preparing may re-plan once (SQLite planned
		// with NULL parameters).
		if c.n > 1 {
			t.Errorf("re-prepared %d times in %d runs: %s", c.n, c.runs, c.q)
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d writer statements, want the lease and finish ones", checked)
	}
}

// reprepares reads SQLITE_STMTSTATUS_REPREPARE and _RUN of st's
// statement on the writer connection (stmtStatus).
func reprepares(st *sql.Stmt) (n, runs int32, ok bool) {
	return stmtStatus(st, sqlite3.SQLITE_STMTSTATUS_REPREPARE)
}

// stmtStatus reads sqlite3_stmt_status(op) and SQLITE_STMTSTATUS_RUN of
// st's statement on the writer connection, through database/sql's and the
// driver's unexported fields (there is no API for it); ok is false if a
// driver upgrade moved them. Call it on the writer goroutine.
func stmtStatus(st *sql.Stmt, op int32) (n, runs int32, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	field := func(v reflect.Value, name string) reflect.Value {
		f := v.FieldByName(name)
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	}
	// The writer's statements are prepared on its *sql.Conn (cgds); a
	// pool's on each of its connections (css).
	ds := field(reflect.ValueOf(st).Elem(), "cgds")
	if ds.IsNil() {
		css := field(reflect.ValueOf(st).Elem(), "css")
		if css.Len() == 0 {
			return 0, 0, false
		}
		ds = field(css.Index(0), "ds")
	}
	si := field(ds.Elem(), "si").Elem().Elem()
	pstmt := uintptr(field(si, "pstmt").Uint())
	tls := (*libc.TLS)(unsafe.Pointer(field(field(si, "c").Elem(), "tls").Pointer()))
	if pstmt == 0 || tls == nil {
		return 0, 0, false
	}
	return sqlite3.Xsqlite3_stmt_status(tls, pstmt, op, 0),
		sqlite3.Xsqlite3_stmt_status(tls, pstmt, sqlite3.SQLITE_STMTSTATUS_RUN, 0), true
}
