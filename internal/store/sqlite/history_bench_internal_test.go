package sqlite

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// pollPasses is a day of a provider batch's polls at one a minute.
const pollPasses = 1440

// BenchmarkPendingPasses drives one batch driver job through pollPasses
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
	if err := s.write(ctx, func(tx *writeTx) error {
		_, err := s.exec(tx, `PRAGMA wal_autocheckpoint = 0`)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var pageSize int64
	if err := s.rdb.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		b.Fatal(err)
	}
	walPages := func() float64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			b.Fatal(err)
		}
		return float64(fi.Size()-32) / float64(pageSize+24)
	}
	j := storetest.NewJob("acme", job.LaneBatch, "k")
	if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
		b.Fatal(err)
	}
	start := walPages()
	var written int64
	for i := range pollPasses {
		now := storetest.T0.Add(time.Duration(i) * time.Minute)
		got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 1, LeaseFor: time.Minute})
		if err != nil || len(got) != 1 {
			b.Fatalf("lease %d: %d jobs, %v", i, len(got), err)
		}
		l := got[0]
		errs, err := s.Finish(ctx, []store.Transition{{ID: l.ID, LeaseToken: l.LeaseToken, To: job.StateRetryScheduled,
			EligibleAt: now.Add(time.Minute), Attempts: l.Attempts, Keys: store.KeyEffect{Now: now},
			Record: job.AttemptRecord{At: now, Attempt: l.Attempt, Outcome: job.ClassPending, Delay: time.Minute, Why: "pending"}}})
		if err != nil || errs[0] != nil {
			b.Fatalf("finish %d: %v %v", i, err, errs)
		}
		var n int64
		if err := s.rdb.QueryRow(`SELECT length(history) FROM jobs WHERE id = ?`, j.ID).Scan(&n); err != nil {
			b.Fatal(err)
		}
		written += n
	}
	var last int64
	if err := s.rdb.QueryRow(`SELECT length(history) FROM jobs WHERE id = ?`, j.ID).Scan(&last); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(last), "history-B")
	b.ReportMetric(float64(written)/pollPasses, "history-B/pass")
	b.ReportMetric((walPages()-start)/pollPasses, "wal-pages/pass")
}
