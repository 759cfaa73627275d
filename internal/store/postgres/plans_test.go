package postgres

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// The lease and finish statements find their rows the same way whatever
// the table statistics say. A backlog drained right after its insert has
// none yet (autovacuum has not analyzed the table), and there the planner
// used to read every waiting (or running) row through a partial index on
// state for each call, and aggregate over every waiting entry for the
// oldest ready one: work per lease proportional to the backlog. (A scan
// of the whole table remains possible, and is what both updates may get here:
// the planner weighs it against 64 key lookups by the table's real size,
// so it is only chosen for a table this small.)
func TestLeasePlansWithoutStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	// No ANALYZE may land while the plans are read.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE jobs SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	const n = 2048
	batch := make([]*job.Job, n)
	for i := range batch {
		batch[i] = storetest.NewJob("t", job.LaneInteractive, "k"+strconv.Itoa(i%16))
	}
	for i := 0; i < n; i += 1000 {
		if _, err := s.Insert(ctx, batch[i:min(n, i+1000)], storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(time.Second)
	running, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 64, LeaseFor: time.Minute})
	if err != nil || len(running) != 64 {
		t.Fatalf("lease: %d jobs, %v", len(running), err)
	}
	plan := func(sql string, args ...any) string {
		t.Helper()
		return explainIn(t, s.pool, sql, args...)
	}
	const m = 64
	waiting := make([]string, 0, m)
	for _, j := range batch {
		if len(waiting) == m {
			break
		}
		if !slicesContainsID(running, j.ID) {
			waiting = append(waiting, j.ID)
		}
	}
	ids, tokens := make([]string, m), make([]string, m)
	for i, j := range running {
		ids[i], tokens[i] = j.ID, j.LeaseToken
	}
	str := func(v string) []string {
		out := make([]string, m)
		for i := range out {
			out[i] = v
		}
		return out
	}
	nulls, zeros, nows := make([]*int64, m), make([]int32, m), make([]int64, m)
	cases := []struct {
		name, plan string
		want       []string
		not        []string
	}{
		{"mark leased", plan(markLeasedSQL, waiting, str("t"), ns(now), ns(now)),
			nil, []string{"jobs_lane_ready", "jobs_group_head"}},
		{"end attempts", plan(endAttemptsSQL, ids, tokens, str("published"), str(""), nulls, zeros, zeros, zeros,
			make([][]byte, m), nulls, nows, str("{}"), nulls, zeros),
			nil, []string{"jobs_leases"}},
		{"oldest ready", plan(oldestReadySQL, string(job.LaneInteractive), ns(now)),
			[]string{"Limit", "jobs_lane_ready"}, []string{"Aggregate"}},
	}
	for _, c := range cases {
		for _, w := range c.want {
			if !strings.Contains(c.plan, w) {
				t.Errorf("%s: plan does not use %q:\n%s", c.name, w, c.plan)
			}
		}
		for _, w := range c.not {
			if strings.Contains(c.plan, w) {
				t.Errorf("%s: plan uses %q:\n%s", c.name, w, c.plan)
			}
		}
	}
}

func slicesContainsID(jobs []*job.Job, id string) bool {
	for _, j := range jobs {
		if j.ID == id {
			return true
		}
	}
	return false
}

// UpsertLimit's unblocking of a key's groups can use job_groups_keys,
// which covers only blocked groups (migration 0017): its condition implies
// the index's predicate. Sequential scans are switched off for the check,
// since a table this small is cheaper to scan whatever the indexes.
func TestUnblockGroupsUsesPartialKeysIndex(t *testing.T) {
	t.Parallel()
	tx := planTx(t, newStore(t), `SET LOCAL enable_seqscan = off`)
	if plan := explainIn(t, tx, unblockGroupsSQL, "k"); !strings.Contains(plan, "job_groups_keys") {
		t.Errorf("unblock groups does not use job_groups_keys:\n%s", plan)
	}
}

// TestListByKeyUsesGroupIndex: the List calls filtered by a limit key
// (storetest.KeyedLists) never walk jobs_pkey, in the generic plan that
// pgx's cached statement gets (explainGeneric): with a live state they
// read that state's partial index (with or without the group: the
// planner's choice by the statistics; the pause source of a job's
// waiting_for); in any state, the final jobs through jobs_final_group and
// the live ones through their states' partial indexes
// (store.ListKeyQuery, migration 0030). Before 0030 the calls in any
// state walked jobs_pkey. Sequential scans are off for the check: a table
// this small is cheaper to scan whatever the indexes.
func TestListByKeyUsesGroupIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	// The plans follow from the statistics, so the test takes them itself
	// and lets nothing else take them: an autovacuum landing mid-test (the
	// longer a loaded machine takes, the likelier) would otherwise analyze
	// job_groups at whatever the drain had reached, or vacuum jobs after
	// the ANALYZE below, and the plans would depend on when it came.
	for _, table := range planTables {
		if _, err := s.pool.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`); err != nil {
			t.Fatal(err)
		}
	}
	// The table as it runs: most rows final, of other keys, and
	// analyzed, so that the plans follow from the statistics.
	insertN(t, s, 1024, 4, "subscriber:s2")
	for now := storetest.T0; ; now = now.Add(time.Second) {
		got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 256, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		if err := finishAll(ctx, s, got, now); err != nil {
			t.Fatal(err)
		}
	}
	insertN(t, s, 64, 4, "subscriber:s1")
	insertN(t, s, 64, 4, "openai")
	for _, table := range planTables {
		if _, err := s.pool.Exec(ctx, `ANALYZE `+table); err != nil {
			t.Fatal(err)
		}
	}
	tx := planTx(t, s, `SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan`)
	for _, p := range storetest.KeyedLists {
		want := []string{string(p.State)} // the state's partial index, with or without the group
		if p.State == job.StateRetryScheduled {
			want = []string{"scheduled"} // jobs_scheduled, jobs_group_scheduled
		}
		if p.State == "" {
			want = []string{"jobs_final_group", "jobs_group_head", "jobs_leases"}
		}
		q := listQuery(p)
		plan := explainGeneric(t, tx, q.Numbered(), q.Args()...)
		for _, w := range want {
			if !strings.Contains(plan, w) {
				t.Errorf("List(%+v) does not read through %s:\n%s", p, w, plan)
			}
		}
		if strings.Contains(plan, "jobs_pkey") {
			t.Errorf("List(%+v) walks jobs_pkey:\n%s", p, plan)
		}
	}
}

// planTables are the tables the keyed List calls read (store.ListKeyQuery):
// a plan test over them analyzes each itself.
var planTables = []string{"jobs", "job_groups"}

// planTx begins a transaction on s for reading plans, with settings (SET
// LOCAL statements) applied, rolled back when the test ends.
func planTx(t *testing.T, s *Store, settings string) querier {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, settings); err != nil {
		t.Fatal(err)
	}
	return tx
}

// explainIn returns the plan of sql with args, planned on q.
func explainIn(t *testing.T, q querier, sql string, args ...any) string {
	t.Helper()
	rows, err := q.Query(context.Background(), `EXPLAIN `+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// explainGeneric returns the generic plan of sql with args on q, the plan
// a cached prepared statement runs (EXPLAIN with parameters plans for
// their values instead): sql is prepared, and explained as executed with
// args (strings and ints); q must have plan_cache_mode =
// force_generic_plan.
func explainGeneric(t *testing.T, q querier, sql string, args ...any) string {
	t.Helper()
	if _, err := q.Exec(context.Background(), `PREPARE explained AS `+sql); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := q.Exec(context.Background(), `DEALLOCATE explained`); err != nil {
			t.Error(err)
		}
	}()
	// EXECUTE takes no parameters of its own: the values are literals.
	params := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			params[i] = `'` + strings.ReplaceAll(v, `'`, `''`) + `'`
		case int:
			params[i] = strconv.Itoa(v)
		default:
			t.Fatalf("explainGeneric: argument %d is a %T", i, a)
		}
	}
	return explainIn(t, q, `EXECUTE explained(`+strings.Join(params, ", ")+`)`)
}

// The ready-groups reads go through job_groups_round in round order by a
// plain index scan (groupScanOnly), not a bitmap scan of every entry of
// the lane: the latter read every dead entry a lease's group touches left
// behind, again on every lease, and could not mark them dead. They run
// on their generic plan, and the settings are restored after them
// (groupScanAny).
func TestReadyGroupsPlainIndexScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	insertN(t, s, 64, 16, "k")
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, groupScanOnly); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "force_generic_plan" {
		t.Errorf("between the brackets: plan_cache_mode %s, want force_generic_plan (a plan per execution cost more than the read)", mode)
	}
	if plan := explainIn(t, tx, readyGroupsSQL, readyGroupsArgs(job.LaneInteractive, store.GroupFilter{}, t0, 48)...); !strings.Contains(plan, "Index Scan using job_groups_round") || strings.Contains(plan, "Bitmap") {
		t.Errorf("ready groups are not read by a plain scan of job_groups_round:\n%s", plan)
	}
	if _, err := tx.Exec(ctx, groupScanAny); err != nil {
		t.Fatal(err)
	}
	var bitmap, seq string
	if err := tx.QueryRow(ctx, `SELECT current_setting('enable_bitmapscan'), current_setting('enable_seqscan'), current_setting('plan_cache_mode')`).Scan(&bitmap, &seq, &mode); err != nil {
		t.Fatal(err)
	}
	if bitmap != "on" || seq != "on" || mode != "auto" {
		t.Errorf("after the reads: enable_bitmapscan %s, enable_seqscan %s, plan_cache_mode %s; want on, on, auto restored", bitmap, seq, mode)
	}
}
