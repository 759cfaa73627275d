package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkWorkPerJobConcurrent is BenchmarkWorkPerJob's drain the way the
// engine runs it on PostgreSQL (engine.Config.InFlight 2): two lessees
// and two finishers at once on one store, leases of up to 16 jobs (what a
// 64-worker engine's calls average in the throughput workload), each
// lease's jobs finished by whichever finisher is free, in batches of
// whatever has queued. Concurrency is what the sequential benchmark
// cannot show: two transactions share-locking one key row make a
// MultiXact, and a lease that finds every group locked by the other comes
// back empty. It reports the server CPU per job (backendCPU), the schema's
// WAL per job, the transactions per job and the empty leases per job.
// Run it with -benchtime 1x (-workjobs sets the backlog).
func BenchmarkWorkPerJobConcurrent(b *testing.B) {
	s, rt, m, cpu := workStore(b, 8)
	for b.Loop() {
		n := *workJobs
		insertAll(b, s, keyedJobs(n))
		from := m.lsn(b)
		cpu0, _ := cpu.read(b)
		trips0, stmts0, begins0 := rt.trips.Load(), rt.statements.Load(), rt.begins.Load()
		leases, empty := drainConcurrently(b, s, n)
		walReport(b, "concurrent lease + finish", "drain-", m.since(b, from), n)
		b.ReportMetric(float64(rt.trips.Load()-trips0)/float64(n), "drain-roundtrips/job")
		b.ReportMetric(float64(rt.statements.Load()-stmts0)/float64(n), "drain-statements/job")
		b.ReportMetric(float64(rt.begins.Load()-begins0)/float64(n), "drain-transactions/job")
		b.ReportMetric(float64(leases)/float64(n), "drain-leases/job")
		b.ReportMetric(float64(empty)/float64(n), "drain-emptyleases/job")
		if cpu1, ok := cpu.read(b); ok {
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n), "drain-serverCPUus/job")
		}
	}
}

// drainConcurrently leases and finishes n waiting jobs with two lessees
// and two finishers, and returns the lease calls and the empty ones among
// them. It is bounded: a minute, and 100 leases per job.
func drainConcurrently(b *testing.B, s *Store, n int) (leases, empty int64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := storetest.T0.Add(time.Second)
	var done, calls, none atomic.Int64
	leased := make(chan []*job.Job, 64)
	// finished wakes a lessee whose lease came back empty, as the engine's
	// Notify after a finish does (its poll interval bounds the wait).
	finished := make(chan struct{}, 1)
	var lessees, finishers sync.WaitGroup
	for range 2 {
		lessees.Go(func() {
			for ctx.Err() == nil && done.Load() < int64(n) && calls.Load() < int64(100*n) {
				got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 16, LeaseFor: time.Minute, BatchMin: 2, InteractiveBudget: 30 * time.Second})
				if err != nil {
					b.Error(err)
					return
				}
				calls.Add(1)
				if len(got) == 0 {
					none.Add(1)
					select {
					case <-finished:
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				done.Add(int64(len(got)))
				leased <- got
			}
		})
		finishers.Go(func() {
			for got := range leased {
				// Take whatever else has queued, as the engine's finish
				// loop does.
			more:
				for {
					select {
					case g, ok := <-leased:
						if !ok {
							break more
						}
						got = append(got, g...)
					default:
						break more
					}
				}
				if err := finishAll(ctx, s, got, now); err != nil {
					b.Error(err)
				}
				select {
				case finished <- struct{}{}:
				default:
				}
			}
		})
	}
	lessees.Wait()
	close(leased)
	finishers.Wait()
	if ctx.Err() != nil || done.Load() < int64(n) {
		b.Fatalf("drained %d of %d jobs (%v)", done.Load(), n, ctx.Err())
	}
	return calls.Load(), none.Load()
}
