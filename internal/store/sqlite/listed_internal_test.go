package sqlite

import (
	"context"
	"slices"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestListByKeyDeferredEntries: a key's listing finds its jobs whether or
// not they are in job_group_ids yet (migration 0033): the ones copied by a
// listUnlisted, a large insert's (written directly), the newer ones above
// the mark (single inserts), and a job whose id is below the mark (made before the last
// listing, committed after it: copied at once, or no listing would read
// it). Paged by After through both parts. Prune's deletes take the pairs
// with them.
func TestListByKeyDeferredEntries(t *testing.T) {
	t.Parallel()
	ctx, s := context.Background(), openTestStore(t)
	var want []string // key a's job ids
	insert := func(jobs ...*job.Job) {
		t.Helper()
		if _, err := s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if j.LimitKeys[0] == "a" {
				want = append(want, j.ID)
			}
		}
	}
	late := storetest.NewJob("t0", job.LaneBatch, "a") // an id older than the mark will be
	insert(storetest.NewJob("t0", job.LaneBatch, "a"))
	var big []*job.Job // ids above the single job's
	for i := range 2 * listDirectFrom {
		big = append(big, storetest.NewJob("t1", job.LaneBatch, []string{"a", "b"}[i%2]))
	}
	insert(big...) // lists the single job before it, then its own directly
	// A key listing since the last copy: the singles are copied at
	// listEvery, not listEveryQuiet (TestListingCadenceFollowsKeyListings).
	if _, err := s.List(ctx, store.ListParams{LimitKey: "a", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range listEvery + 40 {
		insert(storetest.NewJob("t0", job.LaneBatch, []string{"a", "b"}[i%2]))
	}
	insert(late)
	counts := func(q string) (n int) {
		t.Helper()
		if err := s.rdb.QueryRow(q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := counts(`SELECT count(*) FROM jobs WHERE id NOT IN (SELECT jid FROM job_group_ids)`); n != 40 {
		t.Errorf("%d jobs not in job_group_ids, want the 40 single inserts since the listing", n)
	}
	if n := counts(`SELECT count(*) FROM jobs WHERE id NOT IN (SELECT jid FROM job_group_ids) AND id <= (SELECT id FROM jobs_list_mark)`); n != 0 {
		t.Errorf("%d jobs at or below the mark not in job_group_ids (the late id among them)", n)
	}
	if n := counts(`SELECT count(*) FROM job_group_ids WHERE jid > (SELECT id FROM jobs_list_mark)`); n != 0 {
		t.Errorf("%d pairs above the mark: a listing would read their jobs twice", n)
	}
	slices.Sort(want)
	slices.Reverse(want)
	for _, p := range []store.ListParams{{LimitKey: "a", Limit: 7}, {LimitKey: "a", State: job.StateWaiting, Limit: 9}} {
		var got []string
		for {
			page, err := s.List(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page {
				got = append(got, j.ID)
			}
			if len(page) < p.Limit {
				break
			}
			p.After = page[len(page)-1].ID
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%+v) paged: %d jobs, want key a's %d newest first", p, len(got), len(want))
		}
	}
	if err := s.write(ctx, func(tx *writeTx) error {
		_, err := s.exec(tx, `DELETE FROM jobs WHERE tenant = 't0'`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := counts(`SELECT count(*) FROM job_group_ids WHERE jid NOT IN (SELECT id FROM jobs)`); n != 0 {
		t.Errorf("%d pairs left by deleted jobs", n)
	}
}

// TestListingCadenceFollowsKeyListings: while no key listing reads the run
// above jobs_list_mark, small inserts are copied into job_group_ids every
// listEveryQuiet jobs, not every listEvery; a listing then reads the whole
// run and still finds every job, and the first insert after it copies the
// run. Fails with one cadence for both (the copy at listEvery jobs though
// nobody listed, or none after a listing).
func TestListingCadenceFollowsKeyListings(t *testing.T) {
	t.Parallel()
	ctx, s := context.Background(), openTestStore(t)
	var want []string // key a's job ids, newest first
	insert := func(n int) {
		t.Helper()
		for i := range n {
			j := storetest.NewJob("t0", job.LaneBatch, []string{"a", "b"}[i%2])
			if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
				t.Fatal(err)
			}
			if j.LimitKeys[0] == "a" {
				want = append([]string{j.ID}, want...)
			}
		}
	}
	above := func() (n int) {
		t.Helper()
		if err := s.rdb.QueryRow(`SELECT count(*) FROM jobs WHERE id > (SELECT id FROM jobs_list_mark)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert(listEveryQuiet - 1)
	if n := above(); n != listEveryQuiet-1 {
		t.Fatalf("%d jobs above the mark after %d single inserts and no key listing, want all of them", n, listEveryQuiet-1)
	}
	page, err := s.List(ctx, store.ListParams{LimitKey: "a", Limit: store.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range page {
		got = append(got, j.ID)
	}
	if wantPage := want[:min(len(want), store.MaxListLimit)]; !slices.Equal(got, wantPage) {
		t.Errorf("key a listed over a run of %d above the mark: %d jobs, want its %d newest", listEveryQuiet-1, len(got), len(wantPage))
	}
	insert(1)
	if n := above(); n != 0 {
		t.Errorf("%d jobs above the mark after a key listing and an insert, want the run copied", n)
	}
	insert(listEvery + 1)
	if n := above(); n != listEvery+1 {
		t.Errorf("%d jobs above the mark after %d single inserts and no key listing since the copy, want all of them", n, listEvery+1)
	}
}
