//go:build unix

package sqlite

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkReadsAfterCommit is the read pool's work between the writer's
// commits, with ReadMmapSize off and on: each op commits one insert (so
// every reader finds the WAL changed and empties its page cache), then
// makes the fetch loop's MayLease and eight Gets of jobs among 4,096, as
// reviews and the API do. Synchronous is NORMAL so that no fsync is in the
// op. Besides ns/op it reports cpu-ns/op, the process's user+system CPU
// per op (getrusage), which the machine's load moves far less than the
// wall clock.
func BenchmarkReadsAfterCommit(b *testing.B) {
	for _, mm := range []int64{0, 256 << 20} {
		b.Run("mmap="+strconv.FormatInt(mm>>20, 10)+"MiB", func(b *testing.B) {
			benchReadsAfterCommit(b, mm)
		})
	}
}

func benchReadsAfterCommit(b *testing.B, mmap int64) {
	ctx := context.Background()
	s := OpenTest(b, Config{Synchronous: SyncNormal, ReadMmapSize: mmap})
	const jobs, gets = 4096, 8
	ids := make([]string, 0, jobs)
	for range jobs / 512 {
		batch := make([]*job.Job, 512)
		for i := range batch {
			batch[i] = storetest.NewJob("t", job.LaneBatch, "k"+strconv.Itoa(i%16))
			batch[i].Payload = make([]byte, 600)
			ids = append(ids, batch[i].ID)
		}
		if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
			b.Fatal(err)
		}
	}
	lp := store.LeaseParams{Now: storetest.T0.Add(time.Hour), Max: 48, LeaseFor: time.Hour, Kinds: []string{"noop"}}
	var k int
	cpu0 := cpuNanos()
	b.ResetTimer()
	for b.Loop() {
		one := []*job.Job{storetest.NewJob("t", job.LaneBatch, "k0")}
		if _, err := s.Insert(ctx, one, storetest.Unpaced); err != nil {
			b.Fatal(err)
		}
		if _, err := s.MayLease(ctx, lp); err != nil {
			b.Fatal(err)
		}
		for range gets {
			k = (k + 977) % jobs
			if _, err := s.Get(ctx, ids[k]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuNanos is the process's user+system CPU so far.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
