package sqlite

import (
	"context"
	"testing"

	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkPendingPasses drives one batch driver job through storetest.PollPasses
// pending passes (lease, then a pending finish back to retry_scheduled,
// as engine.Decide writes it) and reports what a day of polling leaves and
// writes, counts the machine's load does not move: history-B, the
// history column's length after the day; history-B/pass, its mean length
// over the passes (each pass's UPDATE rewrites the whole column, so this
// is the history bytes written per poll); wal-pages/pass, the WAL pages
// per pass with checkpoints off (the lease's and the finish's commits).
// Before store.FoldsRecord the history grew by a record a pass
// (docs/benchmarks.md, "Session 36 (s36h3)").
func BenchmarkPendingPasses(b *testing.B) {
	for b.Loop() {
		pendingPasses(b)
	}
}

func pendingPasses(b *testing.B) {
	ctx := context.Background()
	path := b.TempDir() + "/us.db"
	s := OpenTest(b, Config{Path: path})
	walPages := walPageCount(b, s, path)
	start := walPages()
	size := func(id string) int64 {
		var n int64
		if err := s.rdb.QueryRowContext(ctx, `SELECT length(history) FROM jobs WHERE id = ?`, id).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	var written int64
	id := storetest.PendingPasses(b, s, storetest.PollPasses, func(id string) { written += size(id) })
	b.ReportMetric(float64(size(id)), "history-B")
	b.ReportMetric(float64(written)/storetest.PollPasses, "history-B/pass")
	b.ReportMetric((walPages()-start)/storetest.PollPasses, "wal-pages/pass")
}
