package sqlite_test

import (
	"context"
	"fmt"
	"os"
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
			s := sqlite.OpenTest(b, sqlite.Config{})
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

// BenchmarkLeaseFinishCycle is the writer's work per job in bench
// throughput, without the engine: each op inserts 64 unpaced jobs over two
// groups (group 1 among them), leases them in leases of changing size and
// finishes them as successes. Divide by 64 for per-job figures; run under
// valgrind --tool=callgrind for instruction counts that do not depend on the
// machine's load.
func BenchmarkLeaseFinishCycle(b *testing.B) {
	ctx := context.Background()
	s := sqlite.OpenTest(b, sqlite.Config{})
	now := storetest.T0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		batch := make([]*job.Job, 64)
		for k := range batch {
			batch[k] = storetest.NewJob("t", job.LaneBatch, "key-"+strconv.Itoa(k%2))
		}
		if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
			b.Fatal(err)
		}
		for left, size := 64, 5+i%11; left > 0; {
			now = now.Add(time.Millisecond)
			jobs, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: min(size, left), LeaseFor: time.Hour})
			if err != nil || len(jobs) == 0 {
				b.Fatalf("lease: %d jobs, %v", len(jobs), err)
			}
			left -= len(jobs)
			if _, err := s.Finish(ctx, storetest.Validated(jobs, now)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkInsertBatch is the store's share of POST /v1/jobs/batch (bench
// http-batch): each op inserts 1,000 waiting jobs of one tenant over 16
// unpaced keys, each with its own idempotency key, in one Insert. Divide by
// 1,000 for per-job figures; run under valgrind --tool=callgrind with
// -test.benchtime Nx for instruction counts that do not depend on the
// machine's load.
func BenchmarkInsertBatch(b *testing.B) {
	ctx := context.Background()
	s := sqlite.OpenTest(b, sqlite.Config{})
	const size = 1000
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		batch := make([]*job.Job, size)
		for k := range batch {
			batch[k] = storetest.NewJob("t", job.LaneBatch, "bench:"+strconv.Itoa(k%16))
			batch[k].IdempotencyKey = "bench-" + strconv.Itoa(i*size+k)
		}
		b.StartTimer()
		res, err := s.Insert(ctx, batch, storetest.Unpaced)
		if err != nil || len(res) != size || res[size-1].Existing {
			b.Fatalf("insert: %d results, %v", len(res), err)
		}
	}
}

// BenchmarkThroughputCycle is the writer's work per job in bench throughput
// at its own shape: 16 unpaced keys (one group each), 64 workers. Each op
// inserts 1,024 jobs in one Insert, then leases them 48 at a time and
// finishes each lease's jobs as successes in one Finish, as the engine's
// fetch and finish loops do. Divide by 1,024 for per-job figures; run under
// valgrind --tool=callgrind (with --toggle-collect on store.Lease,
// store.Finish or the insert for one path) for instruction counts that do
// not depend on the machine's load.
func BenchmarkThroughputCycle(b *testing.B) {
	s := sqlite.OpenTest(b, sqlite.Config{})
	now := storetest.T0
	b.ReportAllocs()
	for b.Loop() {
		now = sqlite.ThroughputCycle(b, s, now)
	}
}

// BenchmarkThroughputCyclePublished is BenchmarkThroughputCycle with the
// successes finished to published, as the engine finishes a kind without
// a validation step (bench throughput's no-op jobs).
func BenchmarkThroughputCyclePublished(b *testing.B) {
	s := sqlite.OpenTest(b, sqlite.Config{})
	now := storetest.T0
	b.ReportAllocs()
	for b.Loop() {
		now = sqlite.ThroughputCycleTo(b, s, now, job.StatePublished)
	}
}

// BenchmarkThroughputStages runs BenchmarkThroughputCycle's cycle up to
// its insert (insert) or its leases (lease, the jobs left running): under
// callgrind, (2x − 1x) / 1,024 of each, and of the whole cycle, give the
// instructions per job of the insert, the lease (lease − insert) and the
// finish (cycle − lease).
func BenchmarkThroughputStages(b *testing.B) {
	for _, st := range []struct {
		name  string
		stage sqlite.CycleStage
	}{{"insert", sqlite.StageInsert}, {"lease", sqlite.StageLease}} {
		b.Run(st.name, func(b *testing.B) {
			s := sqlite.OpenTest(b, sqlite.Config{})
			now := storetest.T0
			b.ReportAllocs()
			for b.Loop() {
				now = sqlite.ThroughputCycleStage(b, s, now, st.stage)
			}
		})
	}
}
