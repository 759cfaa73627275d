package postgres

import (
	"context"
	"testing"

	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkPendingPasses is the SQLite driver's benchmark of a day of a
// driver job's polls (storetest.PendingPasses, storetest.PollPasses of them) on
// PostgreSQL, with the pgx tracer's counts instead of WAL pages:
// history-B and history-B/pass as there (here each pass's UPDATE writes a
// new row version holding the whole column), roundtrips/pass and
// statements/pass (the insert's one round trip included: 7.001 is 7 a
// pass).
func BenchmarkPendingPasses(b *testing.B) {
	for b.Loop() {
		pendingPasses(b)
	}
}

func pendingPasses(b *testing.B) {
	ctx := context.Background()
	rt := &roundTrips{}
	s := migratedStore(b, Config{Schema: newSchema(b), Region: "us", MaxConns: 4, tracer: rt})
	size := func(id string) int64 {
		var n int64
		if err := s.pool.QueryRow(ctx, `SELECT octet_length(history) FROM jobs WHERE id = $1`, id).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	var written, trips, stmts int64
	t0, s0 := rt.trips.Load(), rt.statements.Load()
	id := storetest.PendingPasses(b, s, storetest.PollPasses, func(id string) {
		// The pass's own round trips and statements, not the size read's.
		trips, stmts = trips+rt.trips.Load()-t0, stmts+rt.statements.Load()-s0
		written += size(id)
		t0, s0 = rt.trips.Load(), rt.statements.Load()
	})
	b.ReportMetric(float64(size(id)), "history-B")
	b.ReportMetric(float64(written)/storetest.PollPasses, "history-B/pass")
	b.ReportMetric(float64(trips)/storetest.PollPasses, "roundtrips/pass")
	b.ReportMetric(float64(stmts)/storetest.PollPasses, "statements/pass")
}
