//go:build !sqlite_cgo

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// vmSteps reads SQLITE_STMTSTATUS_VM_STEP and _RUN of st's statement
// through database/sql's and the driver's unexported fields, as
// reprepares does; ok is false if a driver upgrade moved them.
func vmSteps(st *sql.Stmt) (steps, runs int32, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	field := func(v reflect.Value, name string) reflect.Value {
		f := v.FieldByName(name)
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	}
	css := field(reflect.ValueOf(st).Elem(), "css")
	if css.Len() == 0 {
		return 0, 0, false
	}
	si := field(field(css.Index(0), "ds").Elem(), "si").Elem().Elem()
	pstmt := uintptr(field(si, "pstmt").Uint())
	tls := (*libc.TLS)(unsafe.Pointer(field(field(si, "c").Elem(), "tls").Pointer()))
	if pstmt == 0 || tls == nil {
		return 0, 0, false
	}
	return sqlite3.Xsqlite3_stmt_status(tls, pstmt, sqlite3.SQLITE_STMTSTATUS_VM_STEP, 0),
		sqlite3.Xsqlite3_stmt_status(tls, pstmt, sqlite3.SQLITE_STMTSTATUS_RUN, 0), true
}

// BenchmarkThroughputVMSteps runs BenchmarkThroughputCycle's shape and
// reports SQLite's own count of bytecode instructions executed per job
// (vm-steps/job), in all and, with -v, per statement the writer prepared:
// a figure the machine's load does not move, per statement, where
// callgrind's per-function toggles are confused by Go's stack switches
// (docs/benchmarks.md, "Session 10 (s10h4)").
func BenchmarkThroughputVMSteps(b *testing.B) {
	s, err := Open(context.Background(), Config{Path: filepath.Join(b.TempDir(), "us.db"), Region: "us"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const size, lease, keys = 1024, 48, 16
	now := storetest.T0
	jobs := 0
	for b.Loop() {
		batch := make([]*job.Job, size)
		for k := range batch {
			batch[k] = storetest.NewJob("t", job.LaneBatch, "k"+strconv.Itoa(k%keys))
		}
		if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
			b.Fatal(err)
		}
		for left := size; left > 0; {
			now = now.Add(time.Millisecond)
			got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: min(lease, left), LeaseFor: time.Hour, Kinds: []string{"noop"}})
			if err != nil || len(got) == 0 {
				b.Fatalf("lease: %d jobs, %v", len(got), err)
			}
			left -= len(got)
			ts := make([]store.Transition, len(got))
			for i, j := range got {
				ts[i] = store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateValidated,
					Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassSuccess},
					Keys:   store.KeyEffect{Now: now, Success: true}}
			}
			if _, err := s.Finish(ctx, ts); err != nil {
				b.Fatal(err)
			}
		}
		jobs += size
	}
	var lines []string
	var total int64
	unreadable := false
	// On the writer goroutine, which owns writerStmts.
	if err := s.write(ctx, func(*sql.Tx) error {
		for q, st := range s.writerStmts {
			n, runs, ok := vmSteps(st)
			unreadable = unreadable || !ok
			total += int64(n)
			lines = append(lines, fmt.Sprintf("%8.1f vm-steps/job %6d runs  %.80q", float64(n)/float64(jobs), runs, q))
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if unreadable {
		b.Skip("modernc.org/sqlite internals changed: cannot read the statement handle")
	}
	sort.Strings(lines)
	for _, l := range lines {
		b.Log(l)
	}
	b.ReportMetric(float64(total)/float64(jobs), "vm-steps/job")
}
