package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// KeyedLists are the List calls filtered by a limit key that the engine,
// the webhooks and the HTTP API make: a webhook subscriber's deliveries
// (one kind and key in any state, paged by After), the pause source of a
// job's waiting_for (a key's retry_scheduled jobs) and GET
// /v1/jobs?limit_key=. The drivers' plan tests check that they read the
// key's groups' jobs through an index: on SQLite jobs_group_id (migration
// 0025; since 0033 the table job_group_ids and the newest run of jobs
// not in it yet, read by id above jobs_list_mark), on PostgreSQL a state's partial group index, and in any state
// jobs_final_group (migration 0030) beside the live states' indexes.
var KeyedLists = []store.ListParams{
	{Kind: "webhook", LimitKey: "subscriber:s1", Limit: 100},
	{Kind: "webhook", LimitKey: "subscriber:s1", After: "01J", Limit: 100},
	{LimitKey: "openai", State: job.StateRetryScheduled, Limit: 10},
	{LimitKey: "openai", Limit: 100},
}

// testListByKeyGroups lists a key whose jobs are spread over groups of
// every shape (tenants, lanes, kinds, key sets): newest first across the
// groups, page by page, and with each other filter applied as well.
func testListByKeyGroups(t *testing.T, open Opener) {
	s := open(t)
	lanes := []job.Lane{job.LaneBatch, job.LaneInteractive}
	var onKey []*job.Job // in creation order
	for i := range 8 {
		keys := []string{"k"}
		if i%4 >= 2 {
			keys = []string{"x", "k"}
		}
		j := NewJob([]string{"t0", "t1"}[i%2], lanes[i/4], keys...)
		j.Kind = []string{"a", "b", "c"}[i%3]
		insert(t, s, j)
		onKey = append(onKey, j)
		insert(t, s, NewJob("t0", job.LaneBatch, "x")) // not on the key
	}
	newest := func(keep func(*job.Job) bool) []string { return newestIDs(onKey, keep) }
	if paged, want := listPages(t, s, store.ListParams{LimitKey: "k", Limit: 3}), newest(func(*job.Job) bool { return true }); !slices.Equal(paged, want) {
		t.Fatalf("key k by pages of 3 = %v, want %v", paged, want)
	}
	for _, c := range []struct {
		p    store.ListParams
		keep func(*job.Job) bool
	}{
		{store.ListParams{Kind: "a"}, func(j *job.Job) bool { return j.Kind == "a" }},
		{store.ListParams{Tenant: "t1"}, func(j *job.Job) bool { return j.Tenant == "t1" }},
		{store.ListParams{Lane: job.LaneInteractive, Kind: "b"}, func(j *job.Job) bool { return j.Lane == job.LaneInteractive && j.Kind == "b" }},
		{store.ListParams{State: job.StateWaiting}, func(*job.Job) bool { return true }},
		{store.ListParams{State: job.StateRetryScheduled}, func(*job.Job) bool { return false }},
	} {
		c.p.LimitKey = "k"
		if got, want := listIDs(t, s, c.p), newest(c.keep); !slices.Equal(got, want) {
			t.Errorf("List(%+v) = %v, want %v", c.p, got, want)
		}
	}
}

// listPages returns the ids of every page of List(p) on s, following
// After from page to page until a short page.
func listPages(t *testing.T, s store.Store, p store.ListParams) []string {
	t.Helper()
	var all []string
	for {
		page := listIDs(t, s, p)
		all = append(all, page...)
		if len(page) < store.PageSize(p.Limit) {
			return all
		}
		p.After = page[len(page)-1]
	}
}

// testListByKeyStates lists a key whose jobs are in every state, final
// (published, terminal), running and between stages (accepted,
// validated) as well as waiting and retry_scheduled, beside another key's
// final job: the whole key newest first, page by page, and its jobs in one
// final state. PostgreSQL reads a key's final and live jobs through
// different indexes (store.ListKeyQuery), SQLite through one.
func testListByKeyStates(t *testing.T, open Opener) {
	s := open(t)
	accepted := NewJob("t0", job.LaneBatch, "k")
	accepted.State = job.StateAccepted
	onKey := []*job.Job{accepted} // in creation order
	for range 5 {
		onKey = append(onKey, NewJob("t0", job.LaneBatch, "k"))
	}
	other := NewJob("t0", job.LaneBatch, "x")
	insert(t, s, append(onKey, other)...)
	states := endInEveryState(t, s, other.ID) // the key's job ended in each state
	waiting := NewJob("t0", job.LaneBatch, "k")
	insert(t, s, waiting)
	checkEveryState(t, s, store.ListParams{LimitKey: "k"}, waiting, onKey, states)
}

// testListByKeyInterleaved lists a key whose groups (two tenants, two key
// sets) hold final and live jobs interleaved by id, more final jobs than
// a page, beside another key's final jobs: every state and each state
// alone, page by page, a tenant's part of it, and a page after an id in
// the middle. PostgreSQL reads the key group by group, each state's part
// through its own index, and merges their pages (store.ListKeyQuery); a
// driver that did the same on SQLite (tried in session 23: one part per
// state's index) would too: a part cut at the page's end, or After
// applied to one part and not another, shows here.
func testListByKeyInterleaved(t *testing.T, open Opener) {
	s := open(t)
	roles := []job.State{job.StatePublished, job.StateWaiting, job.StateTerminal, job.StateRunning, job.StatePublished,
		job.StateRetryScheduled, job.StatePublished, job.StatePublished, job.StateWaiting, job.StateTerminal,
		job.StatePublished, job.StateRunning, job.StatePublished, job.StateTerminal, job.StateWaiting}
	var onKey, first, later []*job.Job // in creation order; inserted before and after the lease
	role := map[string]job.State{}
	for i, r := range roles {
		j := NewJob([]string{"t0", "t1"}[i%2], job.LaneBatch, [][]string{{"k"}, {"x", "k"}}[i%3/2]...)
		other := NewJob("t0", job.LaneBatch, "x") // another key's, finished
		onKey, role[j.ID], role[other.ID] = append(onKey, j), r, job.StatePublished
		if r == job.StateWaiting {
			later = append(later, j, other)
		} else {
			first = append(first, j, other)
		}
	}
	insert(t, s, first...)
	leased := lease(t, s, T0, len(first))
	if len(leased) != len(first) {
		t.Fatalf("leased %d of %d", len(leased), len(first))
	}
	endAs(t, s, leased, func(j *job.Job) job.State { return role[j.ID] })
	insert(t, s, later...)
	newest := func(keep func(*job.Job) bool) []string { return newestIDs(onKey, keep) }
	all := newest(func(*job.Job) bool { return true })
	for _, c := range []struct {
		p    store.ListParams
		keep func(*job.Job) bool
	}{
		{store.ListParams{Limit: 3}, func(*job.Job) bool { return true }},
		{store.ListParams{Limit: 2, Tenant: "t0"}, func(j *job.Job) bool { return j.Tenant == "t0" }},
		{store.ListParams{Limit: 2, State: job.StatePublished}, func(j *job.Job) bool { return role[j.ID] == job.StatePublished }},
		{store.ListParams{Limit: 2, State: job.StateTerminal}, func(j *job.Job) bool { return role[j.ID] == job.StateTerminal }},
		{store.ListParams{Limit: 2, State: job.StateWaiting}, func(j *job.Job) bool { return role[j.ID] == job.StateWaiting }},
		{store.ListParams{Limit: 1, State: job.StateRunning}, func(j *job.Job) bool { return role[j.ID] == job.StateRunning }},
		{store.ListParams{State: job.StateRetryScheduled}, func(j *job.Job) bool { return role[j.ID] == job.StateRetryScheduled }},
	} {
		c.p.LimitKey = "k"
		if got, want := listPages(t, s, c.p), newest(c.keep); !slices.Equal(got, want) {
			t.Errorf("List(%+v) by pages = %v, want %v", c.p, got, want)
		}
	}
	mid := slices.Index(all, onKey[8].ID) // waiting, between final and running jobs
	if got, want := listIDs(t, s, store.ListParams{LimitKey: "k", After: onKey[8].ID, Limit: 4}), all[mid+1:mid+5]; !slices.Equal(got, want) {
		t.Errorf("key k after %s, 4 = %v, want %v", onKey[8].ID, got, want)
	}
}

// testListByTenantStates lists a tenant whose jobs are in every state,
// final and live, over groups of two keys and two lanes, beside another
// tenant's: newest first, page by page, in each final state and by lane.
// On PostgreSQL the list in any state is the jobs that are not running,
// from jobs_tenant_unleased, and the running ones (store.ListTenantQuery).
func testListByTenantStates(t *testing.T, open Opener) {
	s := open(t)
	accepted := NewJob("t0", job.LaneBatch, "k")
	accepted.State = job.StateAccepted
	mine := []*job.Job{accepted} // in creation order
	for i := range 5 {
		mine = append(mine, NewJob("t0", []job.Lane{job.LaneBatch, job.LaneInteractive}[i%2], []string{"k", "x"}[i/3]))
	}
	other := NewJob("t1", job.LaneBatch, "k")
	insert(t, s, append(mine, other)...)
	states := endInEveryState(t, s, other.ID) // the tenant's job that ended in each state
	waiting := NewJob("t0", job.LaneInteractive, "x")
	insert(t, s, waiting, NewJob("t1", job.LaneInteractive, "x"))
	want := checkEveryState(t, s, store.ListParams{Tenant: "t0"}, waiting, mine, states)
	var batch []string
	for _, id := range want {
		for _, j := range mine {
			if j.ID == id && j.Lane == job.LaneBatch {
				batch = append(batch, id)
			}
		}
	}
	if got := listIDs(t, s, store.ListParams{Tenant: "t0", Lane: job.LaneBatch}); !slices.Equal(got, batch) {
		t.Errorf("tenant t0's batch-lane jobs = %v, want %v", got, batch)
	}
}

// endInEveryState leases six jobs and ends five of them, one in each of
// running (left leased), published, terminal, retry_scheduled and
// validated, and the one whose id is other as published; it returns the
// id of the job it left in each state.
func endInEveryState(t *testing.T, s store.Store, other string) map[job.State]string {
	t.Helper()
	leased := lease(t, s, T0, 6)
	if len(leased) != 6 {
		t.Fatalf("leased %d of 6", len(leased))
	}
	states := map[job.State]string{}
	ends := []job.State{job.StateRunning, job.StatePublished, job.StateTerminal, job.StateRetryScheduled, job.StateValidated}
	endAs(t, s, leased, func(j *job.Job) job.State {
		if j.ID == other {
			return job.StatePublished
		}
		to := ends[0]
		ends, states[to] = ends[1:], j.ID
		return to
	})
	return states
}

// endAs ends the attempt of each leased job in the state end returns for
// it, in one Finish: running leaves it leased; terminal is a permanent
// error, retry_scheduled a transient one due an hour after T0, validated
// and published a success.
func endAs(t *testing.T, s store.Store, leased []*job.Job, end func(*job.Job) job.State) {
	t.Helper()
	var ts []store.Transition
	for _, j := range leased {
		tr := success(j, T0)
		switch tr.To = end(j); tr.To {
		case job.StateRunning:
			continue
		case job.StateTerminal:
			tr.Reason, tr.Record.Outcome = job.ReasonPermanentError, job.ClassPermanent
		case job.StateRetryScheduled:
			tr.EligibleAt, tr.Record.Outcome = T0.Add(time.Hour), job.ClassTransient
		case job.StateValidated:
			tr.Result = []byte(`{}`)
		}
		ts = append(ts, tr)
	}
	mustOK(t, finish(t, s, ts...))
}

// newestIDs returns the ids of the jobs keep holds, newest first, of jobs
// in creation order.
func newestIDs(jobs []*job.Job, keep func(*job.Job) bool) []string {
	var out []string
	for _, j := range slices.Backward(jobs) {
		if keep(j) {
			out = append(out, j.ID)
		}
	}
	return out
}

// checkEveryState checks the list p (a key's or a tenant's, no limit)
// against the jobs it should hold: in pages of 2, newest, then created in
// reverse order; and in each final state, the job endInEveryState left
// there (states). It returns the ids it expected in every state.
func checkEveryState(t *testing.T, s store.Store, p store.ListParams, newest *job.Job, created []*job.Job, states map[job.State]string) []string {
	t.Helper()
	want := []string{newest.ID}
	for _, j := range slices.Backward(created) {
		want = append(want, j.ID)
	}
	p.Limit = 2
	if got := listPages(t, s, p); !slices.Equal(got, want) {
		t.Errorf("List(%+v) in every state, pages of 2 = %v, want %v", p, got, want)
	}
	for _, st := range []job.State{job.StatePublished, job.StateTerminal} {
		p.Limit, p.State = 0, st
		if got := listIDs(t, s, p); !slices.Equal(got, []string{states[st]}) {
			t.Errorf("List(%+v) = %v, want [%s]", p, got, states[st])
		}
	}
	return want
}
