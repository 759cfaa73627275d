package postgres

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// The server-side work of a store call, independent of the machine's
// load: the WAL records written for this schema's tables and indexes, read
// back with pg_walinspect (PostgreSQL 15+). Each heap record is a row
// written or locked, each index record an index entry, so the records per
// job are the rows and index entries the call touched. Other sessions'
// WAL in the same range is left out by relation; commit records (which
// name no relation) are not counted.

// walMeter reads the WAL of one schema.
type walMeter struct {
	conn   *pgx.Conn
	schema string
	fn     string // the schema-qualified pg_get_wal_records_info_till_end_of_wal
}

// newWALMeter connects and makes pg_walinspect available: created in the
// test's schema (dropped with it) unless the database already has it. It
// skips b when the server cannot.
func newWALMeter(b testing.TB, schema string) *walMeter {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		b.Skipf("no pg_walinspect: %v", err)
	}
	var ns string
	if err := conn.QueryRow(ctx, `SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_walinspect'`).Scan(&ns); err != nil {
		b.Fatal(err)
	}
	return &walMeter{conn: conn, schema: schema, fn: ns + ".pg_get_wal_records_info_till_end_of_wal"}
}

// lsn returns the current WAL insert position.
func (m *walMeter) lsn(b testing.TB) string {
	var lsn string
	if err := m.conn.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// walLine is the WAL of one relation and record type.
type walLine struct {
	rel, record    string
	records, bytes int64 // bytes without full-page images
	fpi            int64 // full-page image bytes (depend on checkpoint timing)
}

// since returns the schema's WAL written after from, by relation and
// record type, largest first.
func (m *walMeter) since(b testing.TB, from string) []walLine {
	rows, err := m.conn.Query(context.Background(), `SELECT c.relname, w.resource_manager || '/' || w.record_type,
			count(*), sum(w.record_length - w.fpi_length)::bigint, sum(w.fpi_length)::bigint
		FROM `+m.fn+`($1::pg_lsn) AS w
		JOIN pg_class c ON c.relfilenode = substring(w.block_ref FROM 'rel \d+/\d+/(\d+)')::oid
		WHERE c.relnamespace = $2::regnamespace
		GROUP BY 1, 2 ORDER BY 4 DESC`, from, m.schema)
	if err != nil {
		b.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (walLine, error) {
		var l walLine
		err := r.Scan(&l.rel, &l.record, &l.records, &l.bytes, &l.fpi)
		return l, err
	})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// walReport logs lines per job and reports the totals as benchmark
// metrics, their units prefixed by tag (one per phase, so that a later
// phase's figures do not replace an earlier one's).
func walReport(b *testing.B, what, tag string, lines []walLine, jobs int) {
	var recs, bytes, fpi int64
	var sb strings.Builder
	for _, l := range lines {
		recs, bytes, fpi = recs+l.records, bytes+l.bytes, fpi+l.fpi
		fmt.Fprintf(&sb, "\n  %-22s %-26s %7.3f records/job %8.1f bytes/job", l.rel, l.record,
			float64(l.records)/float64(jobs), float64(l.bytes)/float64(jobs))
	}
	b.Logf("%s, WAL per job over %d jobs (without full-page images):%s", what, jobs, sb.String())
	b.ReportMetric(float64(recs)/float64(jobs), tag+"walrecords/job")
	b.ReportMetric(float64(bytes)/float64(jobs), tag+"walbytes/job")
	b.ReportMetric(float64(fpi)/float64(jobs), tag+"fpibytes/job")
}

// backendCPU is the server CPU spent by the backends of a store's pooled
// connections, read from /proc (the server must run on this machine): CPU
// time, unlike wall time, hardly depends on what else the machine runs.
type backendCPU struct {
	s    *Store
	used map[uint32]time.Duration // per backend pid, at the last read
}

// read adds the pool's idle connections' backends to the set and returns
// the sum of their CPU so far; a backend not readable is skipped (ok
// false), so a server on another machine gives no figure.
func (c *backendCPU) read(b testing.TB) (total time.Duration, ok bool) {
	for _, conn := range c.s.pool.AcquireAllIdle(context.Background()) {
		c.used[conn.Conn().PgConn().PID()] = 0
		conn.Release()
	}
	ok = len(c.used) > 0
	for pid := range c.used {
		d, err := procCPU(pid)
		if err != nil {
			b.Logf("backend %d: %v", pid, err)
			ok = false
			continue
		}
		c.used[pid] = d
		total += d
	}
	return total, ok
}

// procCPU is a process's time on a CPU: /proc/<pid>/schedstat's first
// field (nanoseconds), else utime+stime of /proc/<pid>/stat (ticks of 10 ms).
func procCPU(pid uint32) (time.Duration, error) {
	if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid)); err == nil {
		if f := strings.Fields(string(raw)); len(f) > 0 {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(n), nil
			}
		}
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ")".
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// workJobs is BenchmarkWorkPerJob's backlog: how many jobs the bulk insert
// writes and the drain leases and finishes. A larger one shows the work
// that grows with the backlog (go test -bench WorkPerJob -workjobs 20000).
var workJobs = flag.Int("workjobs", 2048, "BenchmarkWorkPerJob: jobs inserted and drained")

// BenchmarkWorkPerJob reports the WAL records and bytes per job of the
// throughput workload's three phases on one schema: a bulk insert of
// 2,048 jobs (-workjobs; batches of 1,000, 16 unpaced keys), their drain by 64-job
// lease + finish cycles, and 256 concurrent single-job inserts. Run it
// with -benchtime 1x; the per-relation lines are logged (-v). For lease +
// finish it also reports the statements and round trips per job (a pgx
// tracer), and for the bulk insert and lease + finish the server CPU per
// job (backendCPU).
func BenchmarkWorkPerJob(b *testing.B) {
	ctx := context.Background()
	s, rt, m, cpu := workStore(b, 4)
	for b.Loop() {
		n := *workJobs
		batch := keyedJobs(n)
		from := m.lsn(b)
		cpu0, _ := cpu.read(b)
		insertAll(b, s, batch)
		walReport(b, "bulk insert", "insert-", m.since(b, from), n)
		if cpu1, ok := cpu.read(b); ok {
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n), "insert-serverCPUus/job")
		}

		from = m.lsn(b)
		cpu0, _ = cpu.read(b)
		trips0, stmts0 := rt.trips.Load(), rt.statements.Load()
		now := storetest.T0.Add(time.Second)
		for done := 0; done < n; {
			got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 64, LeaseFor: time.Minute, BatchMin: 8, InteractiveBudget: 30 * time.Second})
			if err != nil || len(got) == 0 {
				b.Fatalf("lease: %d jobs, %v", len(got), err)
			}
			if err := finishAll(ctx, s, got, now); err != nil {
				b.Fatal(err)
			}
			done += len(got)
		}
		walReport(b, "lease + finish", "drain-", m.since(b, from), n)
		b.ReportMetric(float64(rt.trips.Load()-trips0)/float64(n), "drain-roundtrips/job")
		b.ReportMetric(float64(rt.statements.Load()-stmts0)/float64(n), "drain-statements/job")
		if cpu1, ok := cpu.read(b); ok {
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n), "drain-serverCPUus/job")
		}

		const singles = 256
		from = m.lsn(b)
		var wg sync.WaitGroup
		for i := range singles {
			wg.Go(func() {
				j := storetest.NewJob("t", job.LaneInteractive, "k"+strconv.Itoa(i%16))
				if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		walReport(b, "single inserts", "single-", m.since(b, from), singles)
	}
}

// workStore opens and migrates a store of maxConns connections on a fresh
// schema, with a round-trip counter, a WAL meter and a server CPU meter.
func workStore(b *testing.B, maxConns int32) (*Store, *roundTrips, *walMeter, *backendCPU) {
	schema := newSchema(b)
	rt := &roundTrips{}
	s := migratedStore(b, Config{Schema: schema, Region: "us", MaxConns: maxConns, tracer: rt})
	return s, rt, newWALMeter(b, schema), &backendCPU{s: s, used: map[uint32]time.Duration{}}
}
