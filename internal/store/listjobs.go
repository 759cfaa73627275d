package store

import (
	"strings"

	"github.com/ratelane/ratelane/internal/job"
)

// ListQuery is List's statement for both SQL drivers: the columns cols of
// the jobs matching p, newest first, one page (PageSize). groupHasKey is
// the driver's condition that a row of job_groups names a limit key, with
// one placeholder for it (SQLite reads a JSON array, PostgreSQL a text[]);
// the rest is one text, so the filters, their order and the paging cannot
// drift apart between the drivers.
//
// A limit key is looked up in the jobs' groups, not in each job's
// limit_keys: a job's keys are its group's, and job_groups has a row per
// lane, tenant, kind and key set, not per job. The groups' jobs are then
// found through an index on group_id: jobs_group_id on SQLite (migration
// 0025) in any state (since 0033 a table, job_group_ids, and
// ListSideQuery), and on both drivers the partial indexes of the
// waiting (jobs_group_head) and retry_scheduled (jobs_group_scheduled)
// states. Tested on the jobs themselves, the filter could only be applied
// to rows read by walking the primary key, to the end of the table when
// the key had fewer jobs than the page. PostgreSQL lists a key in any
// state, or in a final one, with ListKeyQuery instead.
//
// A valid state is written into the statement as a literal, not a
// placeholder: the partial indexes on a state (jobs_accepted_kind,
// jobs_validated_kind: the engine's sweeps for accepted parents and
// unpublished validated jobs, migration 0021) serve a query only when the
// planner can see that the query's state is the index's. SQLite plans
// with the bound values, but PostgreSQL's generic plan of a cached
// prepared statement (pgx caches them) cannot see a parameter's value
// and walks the primary key instead. A parent filter also requires a
// non-empty parent_id, for the same reason (the partial index jobs_parent).
func ListQuery(cols string, p ListParams, groupHasKey string) *Query {
	return listQuery(cols, p, groupHasKey, "")
}

// listQuery is ListQuery with cond, when not empty, a further condition
// on the jobs.
func listQuery(cols string, p ListParams, groupHasKey, cond string) *Query {
	q := NewQuery(`SELECT ` + cols + ` FROM jobs`)
	if cond != "" {
		q.Where(cond)
	}
	q = jobFilters(q, p)
	if p.LimitKey != "" {
		// The group's lane, tenant and kind are the job's: filtered here
		// too, the list holds only the groups whose jobs can match.
		g := keyGroups(p, groupHasKey)
		q.Where(`group_id IN (`+g.SQL()+`)`, g.Args()...)
	}
	return q.WhereSet(`id < ?`, p.After).Then(`ORDER BY id DESC LIMIT ?`, PageSize(p.Limit))
}

// ListSideQuery is ListQuery for a limit key on a driver whose entries
// by group are a table of their own, side, with the columns gid (a job's
// group_id) and jid (its id), that holds the jobs not matched by tail:
// SQLite's job_group_ids (migration 0033), which the writer fills a few
// hundred jobs at a time, tail the run of newer jobs not in it yet. The
// page is the newest of two parts, each ListQuery's page: the key's
// groups' entries in side joined to their jobs by id, and the jobs
// matching tail. cols must not be qualified, and side's columns must not
// be any of jobs'.
func ListSideQuery(cols string, p ListParams, groupHasKey, side, tail string) *Query {
	limit := PageSize(p.Limit)
	g := keyGroups(p, groupHasKey)
	a := jobFilters(NewQuery(`SELECT `+cols+` FROM `+side+` CROSS JOIN jobs ON jobs.id = jid`), p).
		Where(`gid IN (`+g.SQL()+`)`, g.Args()...).WhereSet(`jid < ?`, p.After).Then(`ORDER BY jid DESC LIMIT ?`, limit)
	b := listQuery(cols, p, groupHasKey, tail)
	return NewQuery(`SELECT * FROM (SELECT * FROM (`+a.SQL()+`) UNION ALL SELECT * FROM (`+b.SQL()+`)) page`, append(a.Args(), b.Args()...)...).
		Then(`ORDER BY page.id DESC LIMIT ?`, limit)
}

// keyGroups is the statement of the ids of p's limit key's groups, with
// the group's lane, tenant and kind filtered too (ListQuery).
func keyGroups(p ListParams, groupHasKey string) *Query {
	return NewQuery(`SELECT id FROM job_groups`).Where(groupHasKey, p.LimitKey).
		WhereSet(`lane = ?`, string(p.Lane)).WhereSet(`tenant = ?`, p.Tenant).WhereSet(`kind = ?`, p.Kind)
}

// jobFilters adds p's conditions on a job's own columns (tenant, state,
// kind, lane, parent) to q, as ListQuery describes them, and returns q.
func jobFilters(q *Query, p ListParams) *Query {
	q.WhereSet(`tenant = ?`, p.Tenant)
	switch {
	case p.State.Valid():
		q.Where(`state = '` + string(p.State) + `'`)
	case p.State != "":
		q.Where(`state = ?`, string(p.State))
	}
	q.WhereSet(`kind = ?`, p.Kind).WhereSet(`lane = ?`, string(p.Lane))
	if p.Parent != "" {
		q.Where(`parent_id = ? AND parent_id <> ''`, p.Parent)
	}
	return q
}

// KeyListNeedsGroups reports whether List(p) lists a limit key in any
// state or in a final one: what PostgreSQL answers with ListKeyQuery, as
// it has no index on group_id over every state.
func KeyListNeedsGroups(p ListParams) bool {
	return p.LimitKey != "" && (p.State == "" || p.State.Final())
}

// ListKeyQuery is List's statement for a limit key in any state or in a
// final one (KeyListNeedsGroups) on a driver whose only index on group_id
// over the final states is partial: PostgreSQL's jobs_final_group
// (migration 0030), (group_id, id) where finished_at is set, which a job
// writes one entry in when it finishes, not one per row version as an
// index over every state would (docs/benchmarks.md, "Session 11 (s11h6)"
// and "Session 12 (s12h6)"). It reads the key's groups one by one
// (LATERAL): each group's newest final jobs, one page at most, in order
// from jobs_final_group, and its waiting and retry_scheduled jobs through
// those states' group indexes (jobs_group_head, jobs_group_scheduled);
// the running, accepted and validated jobs, few and indexed without their
// group (jobs_leases, jobs_accepted_kind, jobs_validated_kind), are read
// once for all the key's groups. The page is the newest of these. Each
// part names its index's predicate as written, so that a cached generic
// plan can use it whatever the key. groupHasKey is as ListQuery's and
// reads the groups' table by its name, job_groups; cols must not be
// qualified.
//
// What a page reads is bounded by the key's jobs that are not final and
// a page per group, where walking jobs_pkey was bounded by the table: a
// key whose queue holds many jobs reads them all (as SQLite does when its
// key has more than one group).
func ListKeyQuery(cols string, p ListParams, groupHasKey string) *Query {
	limit := PageSize(p.Limit)
	jobs := func(cond string) *Query {
		q := NewQuery(`SELECT ` + cols + ` FROM jobs`).Where(cond)
		return jobFilters(q, p).WhereSet(`id < ?`, p.After)
	}
	keyGroups := func(q *Query, table string) *Query {
		return q.Where(groupHasKey, p.LimitKey).WhereSet(table+`.lane = ?`, string(p.Lane)).
			WhereSet(table+`.tenant = ?`, p.Tenant).WhereSet(table+`.kind = ?`, p.Kind)
	}
	perGroup := jobs(`group_id = job_groups.id AND finished_at IS NOT NULL`).Then(`ORDER BY id DESC LIMIT ?`, limit)
	text, args := `(`+perGroup.SQL()+`)`, perGroup.Args()
	if p.State == "" {
		queued := jobs(`group_id = job_groups.id AND ` + anyState(job.StateWaiting, job.StateRetryScheduled))
		text, args = text+` UNION ALL (`+queued.SQL()+`)`, append(args, queued.Args()...)
	}
	q := keyGroups(NewQuery(`SELECT page.* FROM job_groups CROSS JOIN LATERAL (`+text+`) page`, args...), `job_groups`)
	if p.State == "" {
		g := keyGroups(NewQuery(`SELECT id FROM job_groups`), `job_groups`)
		rest := jobs(anyState(job.StateRunning, job.StateAccepted, job.StateValidated)).Where(`group_id IN (`+g.SQL()+`)`, g.Args()...)
		q = NewQuery(`SELECT * FROM (`+q.SQL()+` UNION ALL `+rest.SQL()+`) page`, append(q.Args(), rest.Args()...)...)
	}
	return q.Then(`ORDER BY page.id DESC LIMIT ?`, limit)
}

// TenantListNeedsUnion reports whether List(p) lists a tenant's jobs in
// any state, with no limit key or parent: what PostgreSQL answers with
// ListTenantQuery, as its only index on tenant leaves the running jobs
// out.
func TenantListNeedsUnion(p ListParams) bool {
	return p.Tenant != "" && p.LimitKey == "" && p.Parent == "" && p.State == ""
}

// ListTenantQuery is List's statement for a tenant's jobs in any state
// (TenantListNeedsUnion) on a driver whose index on tenant holds the jobs
// that are not running: PostgreSQL's jobs_tenant_unleased (migration
// 0034), (tenant, id) where state <> 'running'. A lease moves a job out
// of it, so the lease writes no entry in it (a job's lease and finish are
// not HOT updates: each row version took an entry in the index over every
// state it replaces). The page is the newest of the tenant's newest jobs
// that are not running, one page from that index, and of its running
// ones, from jobs_leases (as many as there are workers). A tenant's list
// in one state reads that index too (ListQuery: any state but running
// implies its predicate) or, running, jobs_leases.
func ListTenantQuery(cols string, p ListParams) *Query {
	limit := PageSize(p.Limit)
	part := func(cond string) *Query {
		q := jobFilters(NewQuery(`SELECT `+cols+` FROM jobs`).Where(cond), p)
		return q.WhereSet(`id < ?`, p.After).Then(`ORDER BY id DESC LIMIT ?`, limit)
	}
	rest, running := part(`state <> 'running'`), part(`state = 'running'`)
	return NewQuery(`SELECT * FROM ((`+rest.SQL()+`) UNION ALL (`+running.SQL()+`)) page`, append(rest.Args(), running.Args()...)...).
		Then(`ORDER BY page.id DESC LIMIT ?`, limit)
}

// anyState is the condition that a job is in one of states, one literal
// comparison per state, so that each can match a partial index on it.
func anyState(states ...job.State) string {
	or := make([]string, len(states))
	for i, s := range states {
		or[i] = `state = '` + string(s) + `'`
	}
	return `(` + strings.Join(or, ` OR `) + `)`
}
