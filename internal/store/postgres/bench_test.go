package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkInsert measures inserting batches of 100 jobs over 20 groups.
func BenchmarkInsert(b *testing.B) {
	ctx := context.Background()
	s := newStore(b)
	b.ResetTimer()
	for b.Loop() {
		jobs := make([]*job.Job, 100)
		for i := range jobs {
			jobs[i] = storetest.NewJob(string(rune('a'+i%20)), job.LaneInteractive, "k")
		}
		if _, err := s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkLeaseFinish measures one lease of up to 10 jobs plus the finish
// of those jobs, on 20 groups sharing one unpaced key.
func BenchmarkLeaseFinish(b *testing.B) {
	ctx := context.Background()
	s := newStore(b)
	var n int
	for b.Loop() {
		b.StopTimer()
		if n == 0 {
			jobs := make([]*job.Job, 1000)
			for i := range jobs {
				jobs[i] = storetest.NewJob(string(rune('a'+i%20)), job.LaneInteractive, "k")
			}
			if _, err := s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
				b.Fatal(err)
			}
			n = len(jobs)
		}
		b.StartTimer()
		now := t0.Add(time.Second)
		got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 10, LeaseFor: time.Minute})
		if err != nil || len(got) == 0 {
			b.Fatalf("lease: %d jobs, %v", len(got), err)
		}
		if err := finishAll(ctx, s, got, now); err != nil {
			b.Fatal(err)
		}
		n -= len(got)
	}
}
