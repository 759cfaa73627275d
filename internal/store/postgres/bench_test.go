package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// BenchmarkInsert measures inserting batches of 100 jobs over 20 groups,
// and counts the round trips per insert.
func BenchmarkInsert(b *testing.B) {
	ctx := context.Background()
	rt := &roundTrips{}
	s := migratedStore(b, Config{Region: "us", MaxConns: 4, tracer: rt})
	tr0 := rt.trips.Load()
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
	b.ReportMetric(float64(rt.trips.Load()-tr0)/float64(b.N), "roundtrips/insert")
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

// roundTrips counts what a store sends: one per statement sent alone and
// one per batch (pgx sends a batch's statements together and reads their
// results in one go). Statements counts every statement either way, and
// begins the BEGINs among them: the transactions.
//
// With timed set, it also keeps each round trip's duration (from sending
// to its results read), named by its statements (see tripName), for the
// latency breakdown of BenchmarkEngineDrain.
type roundTrips struct {
	trips, statements, begins atomic.Int64

	timed bool
	mu    sync.Mutex
	times map[string][]time.Duration
}

// tripKey carries a round trip's start and the names of its statements
// from its start to its end.
type tripKey struct{}

type tripState struct {
	start time.Time
	names []string
}

func (r *roundTrips) statement(sql string) {
	r.statements.Add(1)
	if sql == "BEGIN" {
		r.begins.Add(1)
	}
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.trips.Add(1)
	r.statement(d.SQL)
	if r.timed {
		return context.WithValue(ctx, tripKey{}, &tripState{start: time.Now(), names: []string{stmtName(d.SQL)}})
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	r.end(ctx)
}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.trips.Add(1)
	if r.timed {
		return context.WithValue(ctx, tripKey{}, &tripState{start: time.Now()})
	}
	return ctx
}

func (r *roundTrips) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.statement(d.SQL)
	if st, ok := ctx.Value(tripKey{}).(*tripState); ok {
		st.names = append(st.names, stmtName(d.SQL))
	}
}

func (r *roundTrips) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	r.end(ctx)
}

func (r *roundTrips) end(ctx context.Context) {
	st, ok := ctx.Value(tripKey{}).(*tripState)
	if !ok {
		return
	}
	d := time.Since(st.start)
	name := strings.Join(st.names, "+")
	r.mu.Lock()
	if r.times == nil {
		r.times = map[string][]time.Duration{}
	}
	r.times[name] = append(r.times[name], d)
	r.mu.Unlock()
}

// stmtName names a statement by its first words, enough to tell the
// lease's and the finish's statements apart.
func stmtName(sql string) string {
	f := strings.Fields(sql)
	if len(f) > 4 {
		f = f[:4]
	}
	n := strings.Join(f, " ")
	switch {
	case strings.Contains(sql, "FROM job_groups") && strings.Contains(sql, "served_seq LIMIT"):
		n = "readyGroups"
	case strings.Contains(sql, "UPDATE jobs SET state = u.state"):
		n = "endAttempts" // it locks the keys too (endAttemptsSQL)
	case strings.Contains(sql, "set_config"):
		n = "set_config"
	case strings.Contains(sql, "CROSS JOIN LATERAL"):
		n = "manyHeads"
	case strings.Contains(sql, "FROM limit_keys"):
		n = "lockKeys"
	case strings.HasPrefix(sql, "SELECT (SELECT eligible_at"):
		n = "oldestReady"
	case strings.Contains(sql, "SET state = 'running'"):
		n = "markLeased"
	case strings.Contains(sql, "retry_scheduled' AND eligible_at <="):
		n = "promote"
	case strings.Contains(sql, "UPDATE job_groups g SET served_seq"):
		n = "touchGroups"
	}
	return n
}

// BenchmarkLeaseFinish64 is the engine's cycle in the throughput workload:
// a lease of up to 64 jobs over 16 groups (one unpaced key each), then one
// finish of those jobs. It reports the round trips and statements per job
// (counted by a pgx tracer, so independent of the machine's load) besides
// the time.
func BenchmarkLeaseFinish64(b *testing.B) {
	ctx := context.Background()
	rt := &roundTrips{}
	schema := newSchema(b)
	s := migratedStore(b, Config{Schema: schema, Region: "us", MaxConns: 4, tracer: rt})
	var n, jobs int
	var trips, stmts int64
	for b.Loop() {
		b.StopTimer()
		if n < 64 {
			batch := keyedJobs(2048)
			if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
				b.Fatal(err)
			}
			n += len(batch)
		}
		tr0, s0 := rt.trips.Load(), rt.statements.Load()
		b.StartTimer()
		now := t0.Add(time.Second)
		got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 64, LeaseFor: time.Minute, BatchMin: 8, InteractiveBudget: 30 * time.Second})
		if err != nil || len(got) == 0 {
			b.Fatalf("lease: %d jobs, %v", len(got), err)
		}
		if err := finishAll(ctx, s, got, now); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		trips += rt.trips.Load() - tr0
		stmts += rt.statements.Load() - s0
		n -= len(got)
		jobs += len(got)
		b.StartTimer()
	}
	b.ReportMetric(float64(trips)/float64(jobs), "roundtrips/job")
	b.ReportMetric(float64(stmts)/float64(jobs), "statements/job")
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/cycle")
	b.ReportMetric(float64(jobs)/float64(b.N), "jobs/cycle")
	// Rows written, from the server's table statistics: a backend flushes
	// them when it exits, so the pool is closed first. Inserts update no
	// limit key and no job row; they do upsert job_groups rows, which the
	// group figure includes.
	b.StopTimer()
	s.Close()
	upd := tableUpdates(b, schema, jobs)
	b.ReportMetric(float64(upd["limit_keys"])/float64(b.N), "keyrows/cycle")
	b.ReportMetric(float64(upd["jobs"])/float64(jobs), "jobrows/job")
	b.ReportMetric(float64(upd["job_groups"])/float64(b.N), "grouprows/cycle")
}

// tableUpdates returns n_tup_upd per table of schema once the statistics
// show at least 2*jobs job updates (a lease and a finish each), or after
// two seconds: the statistics arrive asynchronously, and a short count is
// reported as it is rather than failing the benchmark.
func tableUpdates(b *testing.B, schema string, jobs int) map[string]int64 {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var out map[string]int64
	_ = testkit.Until(2*time.Second, func() error {
		out = statCounts(b, conn, `SELECT relname, n_tup_upd FROM pg_stat_user_tables WHERE schemaname = $1`, schema)
		if out["jobs"] < int64(2*jobs) {
			return fmt.Errorf("%d job updates of %d", out["jobs"], 2*jobs)
		}
		return nil
	})
	return out
}

// statCounts reads sql's rows of a name and a count, by name, on a fresh
// snapshot of the server's statistics: a session may keep the one it read
// (stats_fetch_consistency) until it is cleared.
func statCounts(tb testing.TB, conn *pgx.Conn, sql string, args ...any) map[string]int64 {
	tb.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		tb.Fatal(err)
	}
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			tb.Fatal(err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// BenchmarkInsertGroupKey is the server's CPU per inserted job (batches of
// 100 over 20 groups, one connection each) with and without the foreign
// key on jobs.group_id that migration 0033 dropped: two schemas, the
// first with the key put back, filled in alternation (1,000 jobs each,
// each first every other round), so that both see the machine's load
// alike. The CPU is the backends' own
// (/proc/<pid>/schedstat), not wall time. Run it with -benchtime 1x;
// -workjobs sets the jobs per schema.
func BenchmarkInsertGroupKey(b *testing.B) {
	ctx := context.Background()
	open := func(withKey bool) (*Store, *backendCPU) {
		s := migratedStore(b, Config{Region: "us", MaxConns: 1})
		if withKey {
			if _, err := s.pool.Exec(ctx, `ALTER TABLE jobs ADD CONSTRAINT jobs_group_id_fkey FOREIGN KEY (group_id) REFERENCES job_groups (id)`); err != nil {
				b.Fatal(err)
			}
		}
		return s, &backendCPU{s: s, used: map[uint32]time.Duration{}}
	}
	type variant struct {
		name string
		s    *Store
		cpu  *backendCPU
		used time.Duration
	}
	vs := []*variant{{name: "key"}, {name: "nokey"}}
	for i, v := range vs {
		v.s, v.cpu = open(i == 0)
	}
	for b.Loop() {
		for done := 0; done < *workJobs; done += 1000 {
			slices.Reverse(vs) // each goes first every other round
			for _, v := range vs {
				c0, _ := v.cpu.read(b)
				for range 10 {
					jobs := make([]*job.Job, 100)
					for i := range jobs {
						jobs[i] = storetest.NewJob(string(rune('a'+i%20)), job.LaneInteractive, "k")
					}
					if _, err := v.s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
						b.Fatal(err)
					}
				}
				c1, _ := v.cpu.read(b)
				v.used += c1 - c0
			}
		}
	}
	n := float64(b.N * ((*workJobs + 999) / 1000) * 1000)
	for _, v := range vs {
		b.ReportMetric(float64(v.used.Microseconds())/n, v.name+"-serverCPUus/job")
	}
}
