package postgres

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// BenchmarkEngineDrain is `ratelane bench throughput` on PostgreSQL with
// the real engine, counted rather than timed: -workjobs no-op jobs over 16
// unpaced keys inserted in batches of 1,000 (store.CheckCosts, then
// Insert, as the client does), drained by an engine of 64 workers with the
// client's PostgreSQL settings (InFlight 2), then a steady phase of a
// tenth as many jobs inserted in batches of 10 while the engine runs. It
// reports per job, for the drain: lease calls, empty lease calls, round
// trips, statements, transactions, rows read, the server's commits and
// WAL syncs and writes (see tableReads.wal), the WAL bytes written, and
// the CPU time of this process and, when RATELANE_BENCH_PG_PID names the
// server's postmaster on this machine, of the server (tableReads.cpu:
// CPU time, which a loaded machine moves far less than wall time); for
// the steady phase:
// the key reads of store.CheckCosts (one statement and round trip each),
// the round trips, statements and transactions per job (each kind of
// round trip logged with its count and wall time, as for the drain),
// and the rows the whole phase read (pg_stat_user_tables of the schema: tuples returned by
// sequential scans plus heap tuples fetched by index scans; jobs_leases'
// index entries apart). Autovacuum is off for the schema's jobs table so
// that the dead entries a drain leaves are there for every run alike.
// It also logs each drain lease call's duration and the slots it asked
// for, and each kind of round trip's duration (wall time: where the time
// goes, not evidence of speed). With ASYNC set in the environment the
// store commits leases with Config.AsyncLease. Run it with -benchtime 1x.
func BenchmarkEngineDrain(b *testing.B) {
	ctx := context.Background()
	schema := newSchema(b)
	rt := &roundTrips{timed: true}
	const app = "rl_engine_drain"
	s := migratedStore(b, Config{URL: testURL(b) + "&application_name=" + app, Schema: schema, Region: "us", tracer: rt, AsyncLease: os.Getenv("ASYNC") != ""})
	if _, err := s.pool.Exec(ctx, `ALTER TABLE jobs SET (autovacuum_enabled = false)`); err != nil {
		b.Fatal(err)
	}
	stats := newTableReads(b, schema, app)
	for b.Loop() {
		n := *workJobs
		cs := &countingStore{Store: s}
		var done atomic.Int64
		insertChecked(b, s, n, 1000)
		before := stats.read(b, s)
		wal0 := stats.wal(b)
		cpu0, lsn0 := stats.cpu(b), stats.lsn(b)
		trips0, stmts0, begins0 := rt.trips.Load(), rt.statements.Load(), rt.begins.Load()
		rt.mu.Lock()
		rt.times = nil
		rt.mu.Unlock()
		start := time.Now()
		e := startEngine(b, cs, &done)
		waitDone(b, &done, int64(n))
		drain := time.Since(start)
		if err := e.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		cpu1, lsn1 := stats.cpu(b), stats.lsn(b)
		b.ReportMetric(float64(stats.walBytes(b, lsn0, lsn1))/float64(n), "drain-walbytes/job")
		if cpu0.server >= 0 && cpu1.server >= 0 {
			b.ReportMetric(float64(cpu1.server-cpu0.server)/float64(n), "drain-servercpu-us/job")
		}
		b.ReportMetric(float64(cpu1.client-cpu0.client)/float64(n), "drain-clientcpu-us/job")
		// The drain's window on the real-time clock, for a profiler's
		// samples (perf record -k realtime; perf report --time).
		b.Logf("drain window %.6f,%.6f", float64(start.UnixMicro())/1e6, float64(start.Add(drain).UnixMicro())/1e6)
		reportLatency(b, cs, rt, drain)
		leases, empty := cs.leases.Load(), cs.empty.Load()
		b.ReportMetric(float64(rt.trips.Load()-trips0)/float64(n), "drain-roundtrips/job")
		b.ReportMetric(float64(rt.statements.Load()-stmts0)/float64(n), "drain-statements/job")
		b.ReportMetric(float64(rt.begins.Load()-begins0)/float64(n), "drain-transactions/job")
		b.ReportMetric(float64(leases)/float64(n), "drain-leases/job")
		b.ReportMetric(float64(empty)/float64(n), "drain-emptyleases/job")
		b.Logf("drain: %d jobs, %d lease calls, %d empty", n, leases, empty)
		after := stats.read(b, s)
		b.ReportMetric(reportReads(b, "drain", before, after, n), "drain-rowsread/job")
		wal1 := stats.wal(b)
		b.ReportMetric(float64(wal1[0]-wal0[0])/float64(n), "drain-commits/job")
		b.ReportMetric(float64(wal1[1]-wal0[1])/float64(n), "drain-walsyncs/job")
		b.ReportMetric(float64(wal1[2]-wal0[2])/float64(n), "drain-walwrites/job")

		// The steady phase: small inserts while a new engine runs.
		steady := n / 10
		before = after
		reads0 := cs.keyReads.Load()
		e = startEngine(b, cs, &done)
		strips0, sstmts0, sbegins0 := rt.trips.Load(), rt.statements.Load(), rt.begins.Load()
		rt.mu.Lock()
		rt.times = nil
		rt.mu.Unlock()
		for i := 0; i < steady; i += 10 {
			jobs := make([]*job.Job, 10)
			for k := range jobs {
				jobs[k] = storetest.NewJob("t", job.LaneInteractive, "k"+strconv.Itoa((i+k)%16))
			}
			if err := store.CheckCosts(ctx, cs, jobs, storetest.Unpaced); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
				b.Fatal(err)
			}
			e.Notify()
		}
		waitDone(b, &done, int64(n+steady))
		if err := e.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rt.trips.Load()-strips0)/float64(steady), "steady-roundtrips/job")
		b.ReportMetric(float64(rt.statements.Load()-sstmts0)/float64(steady), "steady-statements/job")
		b.ReportMetric(float64(rt.begins.Load()-sbegins0)/float64(steady), "steady-transactions/job")
		logTrips(b, "steady", rt)
		after = stats.read(b, s)
		// Each key read is one statement and one round trip.
		b.ReportMetric(float64(cs.keyReads.Load()-reads0)/float64(steady), "steady-checkreads/job")
		b.ReportMetric(reportReads(b, "steady", before, after, steady), "steady-rowsread/job")
	}
}

// startEngine starts an engine of 64 no-op workers with the client's
// PostgreSQL settings on st; each finished handler counts in done.
func startEngine(b *testing.B, st store.Store, done *atomic.Int64) *engine.Engine {
	e, err := engine.New(engine.Config{
		Store: st, Region: "us", Workers: 64, InFlight: 2,
		Kinds: map[string]engine.Kind{"noop": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			done.Add(1)
			return job.Outcome{Class: job.ClassSuccess}
		})}},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	return e
}

// reportReads logs the relations read between before and after and
// returns the rows read per job (tables only: an index's entries are
// logged, not added).
func reportReads(b *testing.B, phase string, before, after map[string]int64, jobs int) float64 {
	var rows int64
	for rel, v := range after {
		d := v - before[rel]
		if d <= 0 {
			continue
		}
		b.Logf("%s: %s read %d (%.1f per job)", phase, rel, d, float64(d)/float64(jobs))
		if !strings.HasPrefix(rel, "index ") {
			rows += d
		}
	}
	return float64(rows) / float64(jobs)
}

// countingStore counts the lease calls an engine makes and the empty
// ones, and the key reads (GetLimit, LimitConfigs) made through it.
type countingStore struct {
	*Store
	leases, empty, keyReads atomic.Int64

	mu        sync.Mutex
	leaseTime []time.Duration // each Lease call's duration
	leaseJobs []int           // and the jobs it returned
	leaseMax  []int           // of the p.Max it asked for
}

// GetLimit is Store.GetLimit, counted.
func (c *countingStore) GetLimit(ctx context.Context, name string) (admission.State, error) {
	c.keyReads.Add(1)
	return c.Store.GetLimit(ctx, name)
}

// LimitConfigs is Store.LimitConfigs, counted.
func (c *countingStore) LimitConfigs(ctx context.Context, names []string) (map[string]admission.Config, error) {
	c.keyReads.Add(1)
	return c.Store.LimitConfigs(ctx, names)
}

// Lease is Store.Lease, counted.
func (c *countingStore) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	start := time.Now()
	got, err := c.Store.Lease(ctx, p)
	d := time.Since(start)
	c.mu.Lock()
	c.leaseTime = append(c.leaseTime, d)
	c.leaseJobs = append(c.leaseJobs, len(got))
	c.leaseMax = append(c.leaseMax, p.Max)
	c.mu.Unlock()
	c.leases.Add(1)
	if len(got) == 0 {
		c.empty.Add(1)
	}
	return got, err
}

// reportLatency logs the wall time of the drain's lease calls and of
// each kind of round trip, and reports the share of the drain spent
// inside a lease call and its median. Wall time moves with the machine's
// load: these say where a lease's time goes, not how fast it is.
func reportLatency(b *testing.B, cs *countingStore, rt *roundTrips, drain time.Duration) {
	cs.mu.Lock()
	lt, lj, lm := slices.Clone(cs.leaseTime), slices.Clone(cs.leaseJobs), slices.Clone(cs.leaseMax)
	cs.leaseTime, cs.leaseJobs, cs.leaseMax = nil, nil, nil
	cs.mu.Unlock()
	var total time.Duration
	for _, d := range lt {
		total += d
	}
	jobs, asked := 0, 0
	for i, n := range lj {
		jobs += n
		asked += lm[i]
	}
	b.Logf("drain: lease calls asked for %.1f jobs each", float64(asked)/float64(max(1, len(lt))))
	b.Logf("drain: %v; lease calls %d (%.1f jobs each), inside one %v (%.0f %%); lease %s",
		drain.Round(time.Millisecond), len(lt), float64(jobs)/float64(max(1, len(lt))), total.Round(time.Millisecond),
		100*total.Seconds()/drain.Seconds(), quantiles(lt))
	if len(lt) > 0 {
		b.ReportMetric(total.Seconds()/drain.Seconds(), "drain-inlease-share")
	}
	logTrips(b, "drain", rt)
}

// logTrips logs each kind of round trip rt timed since its times were
// last cleared: how many, their total and their quantiles.
func logTrips(b *testing.B, phase string, rt *roundTrips) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	names := slices.Sorted(maps.Keys(rt.times))
	for _, name := range names {
		ds := rt.times[name]
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		b.Logf("%s: trip %s: %d, total %v, %s", phase, name, len(ds), sum.Round(time.Millisecond), quantiles(ds))
	}
}

// quantiles formats the mean, p50, p90 and p99 of ds in milliseconds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q := func(p float64) float64 { return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1000 }
	return fmt.Sprintf("mean %.2f p50 %.2f p90 %.2f p99 %.2f ms", float64(sum.Microseconds())/1000/float64(len(s)), q(0.5), q(0.9), q(0.99))
}

// insertChecked inserts n no-op jobs over 16 unpaced keys in batches of
// size, each checked by store.CheckCosts first as the client does.
func insertChecked(b *testing.B, s *Store, n, size int) {
	ctx := context.Background()
	for i := 0; i < n; i += size {
		jobs := make([]*job.Job, min(size, n-i))
		for k := range jobs {
			jobs[k] = storetest.NewJob("t", job.LaneInteractive, "k"+strconv.Itoa((i+k)%16))
		}
		if err := store.CheckCosts(ctx, s, jobs, admission.Config{}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
			b.Fatal(err)
		}
	}
}

// waitDone waits until done reaches n, for at most five minutes.
func waitDone(b *testing.B, done *atomic.Int64, n int64) {
	b.Helper()
	testkit.Eventually(b, 5*time.Minute, fmt.Sprintf("%d jobs done", n), func() error {
		if d := done.Load(); d < n {
			return fmt.Errorf("%d of %d done", d, n)
		}
		return nil
	})
}

// tableReads reads a schema's per-relation read counters. A backend
// reports its counters when it is idle for a while or exits, so read
// closes the store's connections first and waits for their backends to
// be gone.
type tableReads struct {
	conn        *pgx.Conn
	schema, app string
}

func newTableReads(b *testing.B, schema, app string) *tableReads {
	conn, err := pgx.Connect(context.Background(), testURL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	return &tableReads{conn: conn, schema: schema, app: app}
}

// wal returns the database's commits (pg_stat_database.xact_commit) and
// the server's WAL syncs and writes (pg_stat_wal, PostgreSQL 14+): read
// after read, every connection of the store has reported. pg_stat_wal is
// the whole server's: the figures are this benchmark's only on a server
// of its own.
func (r *tableReads) wal(b *testing.B) [3]int64 {
	var out [3]int64
	err := r.conn.QueryRow(context.Background(), `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), wal_sync, wal_write FROM pg_stat_wal`).Scan(&out[0], &out[1], &out[2])
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// cpuTimes are CPU microseconds used so far by this process (client) and
// by the PostgreSQL server (server: the postmaster named by
// RATELANE_BENCH_PG_PID, the children it reaped and those alive; -1
// when unset or unreadable, e.g. a server on another machine). CPU time,
// not wall time: it moves far less with the machine's load.
type cpuTimes struct{ client, server int64 }

func (r *tableReads) cpu(b *testing.B) cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	us := func(t syscall.Timeval) int64 { return t.Sec*1e6 + int64(t.Usec) }
	return cpuTimes{client: us(ru.Utime) + us(ru.Stime), server: serverCPU(os.Getenv("RATELANE_BENCH_PG_PID"))}
}

// serverCPU sums the CPU time of the process pid (its own and its reaped
// children's) and of its live children, from /proc, in microseconds; -1
// when it cannot.
func serverCPU(pid string) int64 {
	if pid == "" {
		return -1
	}
	ticks := func(pid string, fields ...int) (int64, bool) {
		raw, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return 0, false
		}
		// The fields after the command name, which may hold spaces.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		var t int64
		for _, i := range fields {
			v, err := strconv.ParseInt(f[i-3], 10, 64)
			if err != nil {
				return 0, false
			}
			t += v
		}
		return t, true
	}
	total, ok := ticks(pid, 14, 15, 16, 17) // utime, stime, cutime, cstime
	if !ok {
		return -1
	}
	tasks, _ := os.ReadDir("/proc/" + pid + "/task")
	for _, task := range tasks {
		kids, _ := os.ReadFile("/proc/" + pid + "/task/" + task.Name() + "/children")
		for _, kid := range strings.Fields(string(kids)) {
			if t, ok := ticks(kid, 14, 15); ok { // one that exited meanwhile is in cutime later
				total += t
			}
		}
	}
	return total * 1e6 / 100 // USER_HZ
}

// lsn is the server's WAL insert position.
func (r *tableReads) lsn(b *testing.B) string {
	var lsn string
	if err := r.conn.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// walBytes is the WAL written between two positions: the whole server's,
// so this benchmark's only on a server of its own.
func (r *tableReads) walBytes(b *testing.B, from, to string) int64 {
	var n int64
	if err := r.conn.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint`, from, to).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// read returns, per table of the schema, the tuples its sequential scans
// returned plus the heap tuples its index scans fetched, and per index
// the entries read, after every connection of s has reported.
func (r *tableReads) read(b *testing.B, s *Store) map[string]int64 {
	ctx := context.Background()
	testkit.Eventually(b, testkit.Timeout, "the store's backends to exit", func() error {
		s.pool.Reset() // idle connections close now, busy ones when released
		var live int
		if err := r.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, r.app).Scan(&live); err != nil {
			b.Fatal(err)
		}
		if live > 0 {
			return fmt.Errorf("%d backends still open", live)
		}
		return nil
	})
	return statCounts(b, r.conn, `SELECT relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE schemaname = $1
		UNION ALL SELECT 'index ' || indexrelname, idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = $1 AND indexrelname = 'jobs_leases'`, r.schema)
}
