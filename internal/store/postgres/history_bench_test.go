package postgres

import (
	"context"
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
// as engine.Decide writes it) and reports counts the machine's load does
// not move: history-B, the history column's length after the day;
// history-B/pass, its mean over the passes (each pass's UPDATE writes a
// new row version holding the whole column); roundtrips/pass and
// statements/pass, counted by the pgx tracer.
func BenchmarkPendingPasses(b *testing.B) {
	for b.Loop() {
		pendingPasses(b)
	}
}

func pendingPasses(b *testing.B) {
	ctx := context.Background()
	rt := &roundTrips{}
	s := migratedStore(b, Config{Schema: newSchema(b), Region: "us", MaxConns: 4, tracer: rt})
	j := storetest.NewJob("acme", job.LaneBatch, "k")
	if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
		b.Fatal(err)
	}
	var written, trips, stmts int64
	size := func() int64 {
		var n int64
		if err := s.pool.QueryRow(ctx, `SELECT octet_length(history) FROM jobs WHERE id = $1`, j.ID).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	for i := range pollPasses {
		now := storetest.T0.Add(time.Duration(i) * time.Minute)
		t0, s0 := rt.trips.Load(), rt.statements.Load()
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
		trips += rt.trips.Load() - t0
		stmts += rt.statements.Load() - s0
		written += size()
	}
	b.ReportMetric(float64(size()), "history-B")
	b.ReportMetric(float64(written)/pollPasses, "history-B/pass")
	b.ReportMetric(float64(trips)/pollPasses, "roundtrips/pass")
	b.ReportMetric(float64(stmts)/pollPasses, "statements/pass")
}
