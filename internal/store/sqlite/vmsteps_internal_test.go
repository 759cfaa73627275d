//go:build !sqlite_cgo

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// vmSteps reads SQLITE_STMTSTATUS_VM_STEP and _RUN of st's statement
// (stmtStatus); ok is false if a driver upgrade moved the handle.
func vmSteps(st *sql.Stmt) (steps, runs int32, ok bool) {
	return stmtStatus(st, sqlite3.SQLITE_STMTSTATUS_VM_STEP)
}

// BenchmarkThroughputVMSteps runs BenchmarkThroughputCycle's shape and
// reports SQLite's own count of bytecode instructions executed per job
// (vm-steps/job), in all and, with -v, per statement the writer prepared:
// a figure the machine's load does not move, per statement, where
// callgrind's per-function toggles are confused by Go's stack switches
// (docs/benchmarks.md, "Session 10 (s10h4)").
func BenchmarkThroughputVMSteps(b *testing.B) { vmStepsCycle(b, job.StateValidated) }

// BenchmarkThroughputVMStepsPublished is BenchmarkThroughputVMSteps with
// the successes finished to published (ThroughputCycleTo).
func BenchmarkThroughputVMStepsPublished(b *testing.B) { vmStepsCycle(b, job.StatePublished) }

// vmStepsCycle runs ThroughputCycleTo(to) and reports its VM steps.
func vmStepsCycle(b *testing.B, to job.State) {
	s := OpenTest(b, Config{})
	ctx := context.Background()
	now := storetest.T0
	jobs := 0
	for b.Loop() {
		now = ThroughputCycleTo(b, s, now, to)
		jobs += CycleJobs
	}
	var lines []string
	var total int64
	unreadable := false
	// On the writer goroutine, which owns writerStmts.
	if err := s.write(ctx, func(*writeTx) error {
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
