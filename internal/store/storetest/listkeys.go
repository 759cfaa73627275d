package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// KeyedLists are the List calls filtered by a limit key that the engine,
// the webhooks and the HTTP API make: a webhook subscriber's deliveries
// (one kind and key in any state, paged by After), the pause source of a
// job's waiting_for (a key's retry_scheduled jobs) and GET
// /v1/jobs?limit_key=. The drivers' plan tests check that they read the
// key's groups' jobs through an index: every one on SQLite
// (jobs_group_id, migration 0025), those with a state on PostgreSQL (the
// state's partial group index).
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
	ctx := context.Background()
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
	newest := func(keep func(*job.Job) bool) []string {
		var out []string
		for _, j := range slices.Backward(onKey) {
			if keep(j) {
				out = append(out, j.ID)
			}
		}
		return out
	}
	var paged []string
	for after := ""; ; {
		page, err := s.List(ctx, store.ListParams{LimitKey: "k", After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			paged = append(paged, j.ID)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	if want := newest(func(*job.Job) bool { return true }); !slices.Equal(paged, want) {
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
		got, err := s.List(ctx, c.p)
		if err != nil {
			t.Fatal(err)
		}
		gotIDs := make([]string, len(got))
		for i, j := range got {
			gotIDs[i] = j.ID
		}
		if want := newest(c.keep); !slices.Equal(gotIDs, want) {
			t.Errorf("List(%+v) = %v, want %v", c.p, gotIDs, want)
		}
	}
}
