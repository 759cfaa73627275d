package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// policyCases pin the policies of internal/store/policy.go that each
// driver applies in its own SQL (session 19's audit of issue 11 found
// them stated there but not checked by the suite, or applied differently
// to documents than to jobs).
var policyCases = map[string]func(*testing.T, Opener){
	"PruneBatchCap":     testPruneBatchCap,
	"ObjectListPageCap": testObjectListPageCap,
	"CloseTwice":        testCloseTwice,
}

// One Prune call deletes at most store.PruneBatch finished jobs, on every
// driver, so that a backlog of expired history goes in short
// transactions; the caller's next call takes the rest.
func testPruneBatchCap(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	jobs := newJobs(store.PruneBatch+1, "acme", job.LaneBatch, "k")
	for start := 0; start < len(jobs); start += 1000 {
		insert(t, s, jobs[start:min(len(jobs), start+1000)]...)
	}
	for left := len(jobs); left > 0; {
		got := lease(t, s, T0, left)
		if len(got) == 0 {
			t.Fatalf("%d jobs left unleased", left)
		}
		ts := make([]store.Transition, len(got))
		for i, j := range got {
			ts[i] = success(j, T0)
		}
		mustOK(t, finish(t, s, ts...))
		left -= len(got)
	}
	for i, want := range []int{store.PruneBatch, 1, 0} {
		n, err := s.Prune(ctx, T0.Add(1))
		if err != nil || n != want {
			t.Fatalf("Prune call %d = %d, %v; want %d (at most store.PruneBatch = %d a call)", i+1, n, err, want, store.PruneBatch)
		}
	}
}

// ListObjects pages as List does (store.PageSize): a zero limit is
// store.DefaultListLimit and a limit above store.MaxListLimit is clamped
// to it. Before, both drivers answered a limit above the cap with 100
// documents, the fallback the issue found in SQLite's List.
func testObjectListPageCap(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	objs := make([]store.Object, store.MaxListLimit+1)
	for i := range objs {
		objs[i] = store.Object{Kind: "subscriber", ID: fmt.Sprintf("s%05d", i), Body: []byte(`{}`), UpdatedAt: T0}
	}
	if err := s.PutObjects(ctx, objs); err != nil {
		t.Fatal(err)
	}
	for limit, want := range map[int]int{0: store.DefaultListLimit, 5000: store.MaxListLimit, store.MaxListLimit + 1: store.MaxListLimit, 7: 7} {
		got, err := s.ListObjects(ctx, "subscriber", "", limit)
		if err != nil || len(got) != want {
			t.Errorf("ListObjects(limit %d) = %d documents, %v; want %d", limit, len(got), err, want)
		}
	}
}

// Close is idempotent on every driver (Client.Stop closes the stores and
// may be called twice; the opener's cleanup closes once more).
func testCloseTwice(t *testing.T, open Opener) {
	s := open(t)
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close call %d: %v", i+1, err)
		}
	}
}
