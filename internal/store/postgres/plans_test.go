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
	batch := keyedJobs(2048)
	insertAll(t, s, batch)
	now := t0.Add(time.Second)
	running := leaseN(t, s, now, 64)
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
			make([][]byte, m), nulls, nows, str("{}"), nulls, zeros, make([]bool, m), false),
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
	tx := drainedPlanTx(t, 4)
	for _, p := range storetest.KeyedLists {
		want := []string{string(p.State)} // the state's partial index, with or without the group
		if p.State == job.StateRetryScheduled {
			want = []string{"scheduled"} // jobs_scheduled, jobs_group_scheduled
		}
		if p.State == "" {
			want = []string{"jobs_final_group", "jobs_group_head", "jobs_leases"}
		}
		checkListPlan(t, tx, p, want)
	}
}

// TestListByTenantUsesUnleasedIndex: the List calls filtered by a tenant
// never walk jobs_pkey, in the generic plan: in any state they read the
// jobs that are not running from jobs_tenant_unleased and the running
// ones from jobs_leases (store.ListTenantQuery), and in a state other
// than running jobs_tenant_unleased, whose predicate the state implies
// (migration 0034, which dropped jobs_tenant, an index over every state).
func TestListByTenantUsesUnleasedIndex(t *testing.T) {
	t.Parallel()
	tx := drainedPlanTx(t, 64) // a tenant's share of the jobs is small
	for _, p := range []store.ListParams{
		{Tenant: "tenant-1", Limit: 100},
		{Tenant: "tenant-1", After: "01J", Limit: 100},
		{Tenant: "tenant-1", Lane: job.LaneInteractive, Kind: "noop", Limit: 20},
		{Tenant: "tenant-1", State: job.StateTerminal, Limit: 100},
		{Tenant: "tenant-1", State: job.StatePublished, After: "01J", Limit: 100},
	} {
		want := []string{"jobs_tenant_unleased"}
		if p.State == "" {
			want = append(want, "jobs_leases")
		}
		checkListPlan(t, tx, p, want)
	}
}

// checkListPlan fails t unless List(p)'s generic plan reads each index
// named (by a part of its name) in want and never walks jobs_pkey.
func checkListPlan(t *testing.T, tx querier, p store.ListParams, want []string) {
	t.Helper()
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

// drainedPlanTx returns a transaction for reading plans, with sequential
// scans off (a table this small is cheaper to scan whatever the indexes)
// and generic plans, on a store as it runs: most jobs final, of other
// keys, of the given number of tenants, and analyzed, so that the plans
// follow from the statistics.
func drainedPlanTx(t *testing.T, tenants int) querier {
	t.Helper()
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
	insertN(t, s, 1024, tenants, "subscriber:s2")
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
	insertN(t, s, 64, tenants, "subscriber:s1")
	insertN(t, s, 64, tenants, "openai")
	for _, table := range planTables {
		if _, err := s.pool.Exec(ctx, `ANALYZE `+table); err != nil {
			t.Fatal(err)
		}
	}
	return planTx(t, s, `SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan`)
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
// args (strings, ints and their arrays); q must have plan_cache_mode =
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
		case int64:
			params[i] = strconv.FormatInt(v, 10)
		case []string, []int64, []bool:
			params[i] = arrayLiteral(v)
		default:
			t.Fatalf("explainGeneric: argument %d is a %T", i, a)
		}
	}
	return explainIn(t, q, `EXECUTE explained(`+strings.Join(params, ", ")+`)`)
}

// TestLeaseGenericPlans: a lease runs every statement on its generic
// plan (leaseSettings: no statement is planned per execution, which cost
// more than many of them take to run), and in eight statements: BEGIN,
// the settings, the promotion with the oldest ready job, both lanes'
// ready groups, the keys, the heads, the groups' touch with the jobs'
// lease, COMMIT. Under the settings, the generic plans read by plain
// index scans: the ready groups through job_groups_round in round order,
// not by a bitmap scan of every entry of the lane (which read every dead
// entry a lease's touch left behind, again on every lease, and could not
// mark them dead).
func TestLeaseGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rt := tracedStore(t)
	// A backlog of the size at which the plans matter, without statistics
	// (as a drain right after its insert runs: no ANALYZE yet).
	if _, err := s.pool.Exec(ctx, `ALTER TABLE jobs SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	insertN(t, s, 4096, 16, "k")
	now := t0.Add(time.Second)
	p := store.LeaseParams{Now: now, Max: 16, LeaseFor: time.Minute, BatchMin: 8, InteractiveBudget: 30 * time.Second}
	for i := range 3 {
		s0 := rt.statements.Load()
		got, err := s.Lease(ctx, p)
		if err != nil || len(got) != p.Max {
			t.Fatalf("lease %d: %d jobs, %v", i, len(got), err)
		}
		if n := rt.statements.Load() - s0; n != 8 {
			t.Errorf("lease %d: %d statements, want 8", i, n)
		}
	}
	leaseStatements := map[string]string{
		"promote and oldest ready": promoteOldestSQL,
		"ready groups":             readyBothSQL,
		"lock keys":                lockKeysSQL(true),
		"many heads":               manyHeadsSQL,
		"touch and mark leased":    markLeasedTouchSQL,
	}
	for name, sql := range leaseStatements {
		var generic, custom int64
		// The store's one connection: the one the leases prepared on.
		err := s.pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&generic, &custom)
		if err != nil {
			t.Errorf("%s: not prepared on the lease's connection: %v", name, err)
			continue
		}
		if generic == 0 || custom != 0 {
			t.Errorf("%s: %d generic and %d custom plans; want only generic", name, generic, custom)
		}
	}

	tx := planTx(t, s, (&pipeTx{settings: leaseSettings}).setup())
	f := store.GroupFilter{}
	both := append(readyGroupsArgs(job.LaneBatch, f, now, 32), readyGroupsArgs(job.LaneInteractive, f, now, 48)...)
	ids := []int64{1, 2}
	plans := []struct {
		name, plan string
		want       []string
	}{
		{"ready groups", explainGeneric(t, tx, readyBothSQL, both...), []string{"Index Scan using job_groups_round"}},
		{"promote and oldest ready", explainGeneric(t, tx, promoteOldestSQL, string(job.LaneInteractive), ns(now), ns(now), promoteBatch),
			[]string{"jobs_lane_ready", "jobs_scheduled"}},
		{"many heads", explainGeneric(t, tx, manyHeadsSQL, ids, ns(now), 4), []string{"jobs_group_head"}},
		{"touch and mark leased", explainGeneric(t, tx, markLeasedTouchSQL, []string{"a"}, []string{"t"}, ns(now), ns(now),
			ids, []int64{0, 0}, []bool{false, true}), []string{"jobs_pkey", "job_groups_pkey"}},
	}
	for _, c := range plans {
		for _, w := range c.want {
			if !strings.Contains(c.plan, w) {
				t.Errorf("%s: generic plan does not use %s:\n%s", c.name, w, c.plan)
			}
		}
		for _, w := range []string{"Bitmap", "Seq Scan"} {
			if strings.Contains(c.plan, w) {
				t.Errorf("%s: generic plan has a %s:\n%s", c.name, w, c.plan)
			}
		}
	}
}

// arrayLiteral is a's array literal for EXECUTE: '{...}' with each
// element double-quoted, which PostgreSQL reads into any element type.
func arrayLiteral(a any) string {
	var elems []string
	switch v := a.(type) {
	case []string:
		elems = v
	case []int64:
		for _, n := range v {
			elems = append(elems, strconv.FormatInt(n, 10))
		}
	case []bool:
		for _, b := range v {
			elems = append(elems, strconv.FormatBool(b))
		}
	}
	for i, e := range elems {
		elems[i] = `"` + strings.ReplaceAll(strings.ReplaceAll(e, `\`, `\\`), `"`, `\"`) + `"`
	}
	return `'` + strings.ReplaceAll(`{`+strings.Join(elems, ",")+`}`, `'`, `''`) + `'`
}
