package store

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
// 0025) in any state, and on both drivers the partial indexes of the
// waiting (jobs_group_head) and retry_scheduled (jobs_group_scheduled)
// states. Tested on the jobs themselves, the filter could only be applied
// to rows read by walking the primary key, to the end of the table when
// the key had fewer jobs than the page.
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
	q := NewQuery(`SELECT `+cols+` FROM jobs`).WhereSet(`tenant = ?`, p.Tenant)
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
	if p.LimitKey != "" {
		// The group's lane, tenant and kind are the job's: filtered here
		// too, the list holds only the groups whose jobs can match.
		g := NewQuery(`SELECT id FROM job_groups`).Where(groupHasKey, p.LimitKey).
			WhereSet(`lane = ?`, string(p.Lane)).WhereSet(`tenant = ?`, p.Tenant).WhereSet(`kind = ?`, p.Kind)
		q.Where(`group_id IN (`+g.SQL()+`)`, g.Args()...)
	}
	return q.WhereSet(`id < ?`, p.After).Then(`ORDER BY id DESC LIMIT ?`, PageSize(p.Limit))
}
