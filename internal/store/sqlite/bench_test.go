package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkLeaseLatency measures one lease call (10 jobs) with a backlog of
// 1,000 and of 1,000,000 waiting jobs spread over 10,000 keys (issue 2: the
// large backlog must stay within 2x of the small one), and reports the
// process RSS after the backlog was inserted. The large case takes minutes
// to set up; run it with -bench 'LeaseLatency/jobs=1000000' -benchtime 200x.
func BenchmarkLeaseLatency(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(b.TempDir(), "us.db"), Region: "us"})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for i := 0; i < n; i += 5000 {
				batch := make([]*job.Job, 0, 5000)
				for k := i; k < min(n, i+5000); k++ {
					batch = append(batch, storetest.NewJob("t"+strconv.Itoa(k%10), job.LaneBatch, "key-"+strconv.Itoa(k%10_000)))
				}
				if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
					b.Fatal(err)
				}
			}
			rss := rssMB()
			now := storetest.T0
			b.ResetTimer()
			for range b.N {
				now = now.Add(time.Millisecond)
				jobs, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 10, LeaseFor: time.Hour})
				if err != nil || len(jobs) == 0 {
					b.Fatalf("lease: %d jobs, %v", len(jobs), err)
				}
				// Return them to waiting, untimed, so the backlog stays the same.
				b.StopTimer()
				ts := make([]store.Transition, len(jobs))
				for i, j := range jobs {
					ts[i] = store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateWaiting, EligibleAt: now,
						Record: job.AttemptRecord{At: now, Outcome: job.ClassLeaseExpired}, Keys: store.KeyEffect{Now: now}}
				}
				if _, err := s.Finish(ctx, ts); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(rss, "rss_MB") // after the loop: ResetTimer clears metrics
		})
	}
}

func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
