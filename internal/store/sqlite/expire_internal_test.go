//go:build !sqlite_cgo

package sqlite

import (
	"context"
	"testing"

	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestExpireDeadlinesStepsIndependentOfJobs: the reap's deadline write
// (an interactive-lane write through the single writer, every ReapEvery)
// costs the same few SQLite bytecode steps whether jobs holds 10 rows or
// 2,010, none of them with a deadline: it searches jobs_deadline. With
// `state IN (...)` against that index's OR of equalities it scanned every
// row: 6,048 steps with 2,010 jobs against 48 with 10 (docs/benchmarks.md, "Session 19 (s19h5)").
func TestExpireDeadlinesStepsIndependentOfJobs(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	ctx := context.Background()
	// steps runs ExpireDeadlines once and returns the bytecode steps its
	// statement took (read on the writer goroutine, which owns writerStmts).
	steps := func() int32 {
		t.Helper()
		read := func() (n int32) {
			t.Helper()
			if err := s.write(ctx, func(*writeTx) error {
				st, found := s.writerStmts[expireDeadlinesSQL]
				if !found {
					t.Fatal("the deadline write is not among the writer's prepared statements")
				}
				var ok bool
				if n, _, ok = vmSteps(st); !ok {
					t.Skip("modernc.org/sqlite internals changed: cannot read the statement handle")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := read()
		if n, err := s.ExpireDeadlines(ctx, storetest.T0); err != nil || n != 0 {
			t.Fatalf("ExpireDeadlines: %d ended, %v; want 0", n, err)
		}
		return read() - before
	}
	insertBatchJobs(t, s, 10)
	if _, err := s.ExpireDeadlines(ctx, storetest.T0); err != nil { // prepared on the writer after this batch
		t.Fatal(err)
	}
	small := steps()
	insertBatchJobs(t, s, 2000)
	large := steps()
	t.Logf("vm steps per ExpireDeadlines: %d with 10 jobs, %d with 2,010", small, large)
	if large > small+16 {
		t.Errorf("ExpireDeadlines took %d bytecode steps with 2,010 jobs against %d with 10: it reads jobs without a deadline", large, small)
	}
}
