package sqlite

import (
	"regexp"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestLeaseScansNeedNoSort checks what lets Heads and ReadyGroups stop
// reading after limit rows instead of binding a LIMIT (see limitScan): each
// is answered from its index in ORDER BY order, with no temporary B-tree
// sorting every matching row first.
func TestLeaseScansNeedNoSort(t *testing.T) {
	s := openTestStore(t)
	for _, c := range []struct {
		q    string
		args int
	}{
		{headsSQL, 2},
		{readyGroupsSQL(store.GroupFilter{}), 3},
		{readyGroupsSQL(store.GroupFilter{Kinds: []string{"a", "b"}}), 5},
		{readyGroupsSQL(store.GroupFilter{Tenant: "t"}), 4},
		{readyGroupsSQL(store.GroupFilter{Kinds: []string{"a"}, Tenant: "t"}), 5},
	} {
		got := queryPlan(t, s, c.q, make([]any, c.args)...)
		if strings.Contains(got, "TEMP B-TREE") || !strings.Contains(got, "USING INDEX") {
			t.Errorf("%s\nplan %q: want an index scan in ORDER BY order", c.q, got)
		}
	}
}

// TestListKindStateUsesIndex: the engine's sweeps (one kind in the
// accepted or the validated state, paged by After) search the partial
// index of that state, as EXPLAIN QUERY PLAN reports it, instead of
// scanning every job by its primary key, which they did before migration
// 0021 whatever the table held.
func TestListKindStateUsesIndex(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	for _, tc := range []struct {
		p     store.ListParams
		index string
	}{
		{store.ListParams{Kind: "review", State: job.StateAccepted, Limit: 500}, "jobs_accepted_kind"},
		{store.ListParams{Kind: "review", State: job.StateAccepted, After: "01J", Limit: 500}, "jobs_accepted_kind"},
		{store.ListParams{Kind: "llm", State: job.StateValidated, Limit: 500}, "jobs_validated_kind"},
		{store.ListParams{Kind: "llm", State: job.StateValidated, After: "01J", Limit: 500}, "jobs_validated_kind"},
	} {
		q := listQuery(tc.p)
		if got := queryPlan(t, s, q.SQL(), q.Args()...); !strings.Contains(got, "SEARCH jobs USING INDEX "+tc.index+" (kind=?") || strings.Contains(got, "TEMP B-TREE") {
			t.Errorf("List(kind %s, state %s, after %q) plan %q, want a search of %s in id order", tc.p.Kind, tc.p.State, tc.p.After, got, tc.index)
		}
	}
}

// TestListByKeyUsesIndex: the List calls filtered by a limit key
// (storetest.KeyedLists) find the key's groups in job_groups and search
// their jobs through a group index, as EXPLAIN QUERY PLAN reports it.
// Before migration 0025 each scanned jobs by its primary key, testing
// every row's limit_keys, to the end of the table when the key had fewer
// jobs than the page.
func TestListByKeyUsesIndex(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	for _, p := range storetest.KeyedLists {
		q := listQuery(p)
		got := queryPlan(t, s, q.SQL(), q.Args()...)
		byGroup := strings.Contains(got, "SEARCH jobs USING INDEX jobs_group_") || strings.Contains(got, "SEARCH job_group_ids USING PRIMARY KEY (gid=?")
		if !byGroup || regexp.MustCompile(`SCAN (jobs|job_group_ids)($|[ ;])`).MatchString(got) {
			t.Errorf("List(%+v) plan %q, want a search of the key's groups' jobs through a group index", p, got)
		}
		// The primary key of jobs is read only for the jobs of
		// job_group_ids, one by one, and for those not in it yet, above
		// jobs_list_mark (migration 0033): never walked unbounded.
		for _, m := range regexp.MustCompile(`sqlite_autoindex_jobs_1 \([^)]*\)`).FindAllString(got, -1) {
			if !strings.Contains(m, "(id=?)") && !strings.Contains(m, "(id>?") {
				t.Errorf("List(%+v) plan %q reads the primary key as %s", p, got, m)
			}
		}
	}
}

// TestOldestReadyUsesIndexes: the oldest ready job of each lane, read on
// every lease (the interactive lane) and by Stats and the predictor (both),
// is found through indexes, as EXPLAIN QUERY PLAN reports it, and never by
// scanning jobs: the interactive lane through its partial index, the batch
// lane, which has none since migration 0032, through its ready groups and
// jobs_group_head.
func TestOldestReadyUsesIndexes(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	for _, c := range []struct {
		lane job.Lane
		want []string
	}{
		{job.LaneInteractive, []string{"USING COVERING INDEX jobs_interactive_ready", "USING INDEX jobs_scheduled"}},
		{job.LaneBatch, []string{"USING COVERING INDEX jobs_group_head (group_id=?)", "USING COVERING INDEX jobs_group_head (group_id=? AND priority<?)",
			"USING COVERING INDEX jobs_group_head (group_id=? AND priority=?)", "job_groups USING INDEX job_groups_round (lane=?)", "USING INDEX jobs_scheduled"}},
	} {
		for name, q := range map[string]string{"lease": oldestWaitingSQL(c.lane), "stats": oldestReadySQL(c.lane)} {
			got := queryPlan(t, s, q, c.lane, 0)
			t.Logf("%s %s: %s", c.lane, name, got)
			if strings.Contains(got, "SCAN jobs") || strings.Contains(got, "SCAN job_groups") || strings.Contains(got, "TEMP B-TREE") {
				t.Errorf("%s lane, %s read: plan %q scans or sorts", c.lane, name, got)
			}
			for _, w := range c.want {
				if name == "lease" && strings.Contains(w, "jobs_scheduled") {
					continue
				}
				if !strings.Contains(got, w) {
					t.Errorf("%s lane, %s read: plan %q, want %q", c.lane, name, got, w)
				}
			}
		}
	}
}

// TestExpireDeadlinesUsesIndex: the reap's deadline write searches the
// partial index jobs_deadline, as EXPLAIN QUERY PLAN reports it. With
// `state IN (...)` against the index's OR of equalities (migration 0019)
// SQLite could not prove the index applied and scanned every job.
func TestExpireDeadlinesUsesIndex(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	if got := queryPlan(t, s, expireDeadlinesSQL, 0, 0, 0); !strings.Contains(got, "SEARCH jobs USING INDEX jobs_deadline") || strings.Contains(got, "SCAN jobs") {
		t.Errorf("ExpireDeadlines plan %q, want a search of jobs_deadline", got)
	}
}

// queryPlan returns what EXPLAIN QUERY PLAN says of q with args, its
// details joined by "; ".
func queryPlan(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	rows, err := s.rdb.Query("EXPLAIN QUERY PLAN "+q, args...) // the same plan on any connection
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

func openTestStore(t *testing.T) *Store {
	t.Helper()
	s := OpenTest(t, Config{})
	return s
}

// TestPlanItemsUsesKey: the chunk's items are found by the primary key
// (batch_id, custom_id), one search per custom id, not by scanning the
// batch's items.
func TestPlanItemsUsesKey(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	got := queryPlan(t, s, planItemsSQL, "k", 0, "b", `["a"]`)
	if !strings.Contains(got, "SEARCH batch_items USING PRIMARY KEY (batch_id=? AND custom_id=?)") {
		t.Errorf("plan %q, want a search of batch_items by its key", got)
	}
}

// TestBatchItemsOfJobsUsesJobIndex: a woken group's read of its reviews'
// items (BatchItemParams.JobIDs) searches batch_items_job for each review,
// as EXPLAIN QUERY PLAN reports it on a store without statistics, not the
// primary key, which reads every item of the batch in custom_id order
// (what SQLite chose before batch_id was kept off the index); a review's
// own read and a whole batch's keep their plans.
func TestBatchItemsOfJobsUsesJobIndex(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	plans := map[string][]store.BatchItemParams{
		"SEARCH batch_items USING INDEX batch_items_job (job_id=?)": {
			{BatchID: "b", JobIDs: []string{"j1", "j2", "j3"}},
			{BatchID: "b", JobIDs: []string{"j1", "j2"}, After: "r-1"},
		},
		"SEARCH batch_items USING INDEX batch_items_job (job_id=? AND batch_id=? AND custom_id>?)": {{BatchID: "b", JobID: "j1"}},
		"SEARCH batch_items USING PRIMARY KEY (batch_id=? AND custom_id>?)":                        {{BatchID: "b"}},
	}
	for want, ps := range plans {
		for _, p := range ps {
			q := store.BatchItemsQuery(p)
			if got := queryPlan(t, s, q.SQL(), q.Args()...); !strings.Contains(got, want) {
				t.Errorf("BatchItems(job %q, jobs %v) plan %q, want %q", p.JobID, p.JobIDs, got, want)
			}
		}
	}
}
