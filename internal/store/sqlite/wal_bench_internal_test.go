package sqlite

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkWALPerJob reports the WAL a job writes on SQLite, counted in
// pages (frames), with checkpoints off so that the -wal file only grows:
// wal-pages/insert for inserting the jobs (16 keys, an idempotency key
// each, as `bench http-enqueue` sends them), and wal-pages/job for their
// whole life, the same jobs then leased and each lease's jobs published
// in one Finish. "single" inserts one job per commit, as the
// single-request HTTP enqueue does, and finishes 32 at a time; "backlog"
// inserts 500 per commit, as `bench throughput` fills its backlog, and
// finishes 8 at a time. The page count, not the wall clock, is what an
// index changes: one over every job (jobs_group_id) writes its leaf pages
// in the insert's commit, a partial one over the final jobs in the
// finish's, one leaf per group the commit touches (docs/benchmarks.md,
// "Session 23 (s23h1)": moving jobs_group_id's entry to the finish won
// the single insert 15 % of its pages and cost the drain 40 %). "intake"
// commits 16 inserts of one job each in one writer transaction, as the
// writer's group commit does under 64 HTTP clients, and finishes 32 at a
// time: there an index led by group_id takes a leaf per group a commit
// touches, the indexes led by an increasing id one in all. wal-pages/prune
// is what Prune then writes to delete the finished jobs, per job.
func BenchmarkWALPerJob(b *testing.B) {
	for _, c := range []struct {
		name                  string
		insert, calls, finish int
	}{{"single", 1, 1, 32}, {"backlog", 500, 1, 8}, {"intake", 1, 16, 32}} {
		b.Run(c.name, func(b *testing.B) { walPerJob(b, c.insert, c.calls, c.finish) })
	}
}

// walPerJob inserts b.N jobs, insertBatch a call and calls insert calls a
// commit, then drains them finishBatch a Finish.
func walPerJob(b *testing.B, insertBatch, calls, finishBatch int) {
	ctx := context.Background()
	path := b.TempDir() + "/us.db"
	s := OpenTest(b, Config{Path: path})
	walPages := walPageCount(b, s, path)
	start := walPages()
	b.ResetTimer()
	for i := 0; i < b.N; i += insertBatch * calls {
		var batches [][]*job.Job
		for c := i; c < min(i+insertBatch*calls, b.N); c += insertBatch {
			var jobs []*job.Job
			for k := c; k < min(c+insertBatch, b.N); k++ {
				j := storetest.NewJob("t0", job.LaneBatch, fmt.Sprintf("bench:%d", k%16))
				j.IdempotencyKey = fmt.Sprint("bench-", k)
				jobs = append(jobs, j)
			}
			batches = append(batches, jobs)
		}
		if err := s.write(ctx, func(tx *writeTx) error {
			for _, jobs := range batches {
				if _, err := s.insertJobs(tx, jobs, storetest.Unpaced); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	inserted := walPages()
	now := storetest.T0
	for done := 0; done < b.N; {
		leased, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: finishBatch, LeaseFor: time.Minute})
		if err != nil || len(leased) == 0 {
			b.Fatalf("lease after %d of %d: %v", done, b.N, err)
		}
		ts := make([]store.Transition, len(leased))
		for i, j := range leased {
			ts[i] = store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StatePublished, Attempts: j.Attempts,
				Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassSuccess},
				Keys:   store.KeyEffect{Now: now, Success: true}}
		}
		if _, err := s.Finish(ctx, ts); err != nil {
			b.Fatal(err)
		}
		done += len(leased)
	}
	b.StopTimer()
	drained := walPages()
	for {
		n, err := s.Prune(ctx, now.Add(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	b.ReportMetric((inserted-start)/float64(b.N), "wal-pages/insert")
	b.ReportMetric((drained-start)/float64(b.N), "wal-pages/job")
	b.ReportMetric((walPages()-drained)/float64(b.N), "wal-pages/prune")
}

// walPageCount turns checkpoints off on s (the store at path), so that
// its -wal file only grows, and returns a count of the pages (frames) in
// that file.
func walPageCount(b *testing.B, s *Store, path string) func() float64 {
	b.Helper()
	if err := s.write(context.Background(), func(tx *writeTx) error {
		_, err := s.exec(tx, `PRAGMA wal_autocheckpoint = 0`)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var pageSize int64
	if err := s.rdb.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		b.Fatal(err)
	}
	return func() float64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			b.Fatal(err)
		}
		return float64(fi.Size()-32) / float64(pageSize+24) // header, then frames of a header and a page
	}
}
