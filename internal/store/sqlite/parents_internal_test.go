package sqlite

import (
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/store"
)

// TestReadyParentsPlan: the parts sweep's read walks the accepted parents
// of its kind in jobs_accepted_kind, in id order, and probes each one's
// children in jobs_parent and its batch items in batch_items_job (each
// item's batch by its id), never scanning the jobs or the items table.
func TestReadyParentsPlan(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	for _, p := range []store.ReadyParentsParams{
		{Kind: "review", Limit: 500},
		{Kind: "review", PartKinds: []string{"review.part"}, After: "01J", Limit: 500},
		{Kind: "review", PartKinds: []string{"a", "b"}, Limit: 500},
	} {
		q := store.ReadyParentsQuery(jobCols, p)
		got := queryPlan(t, s, q.SQL(), q.Args()...)
		for _, want := range []string{"SEARCH jobs USING INDEX jobs_accepted_kind (kind=?", "USING INDEX jobs_parent (parent_id=?)", "USING INDEX batch_items_job (job_id=?)", "SEARCH bh USING INDEX batches_tenant (tenant=? AND id=?)"} {
			if !strings.Contains(got, want) {
				t.Errorf("ReadyParents(%+v) plan %q, want %q in it", p, got, want)
			}
		}
		if strings.Contains(got, "TEMP B-TREE") || strings.Contains(got, "SCAN") {
			t.Errorf("ReadyParents(%+v) plan %q: a scan or a sort", p, got)
		}
	}
}

// TestPartsOfPlan: the sweep's read of a page's parts searches jobs_parent
// once per parent id (the ids' JSON array is the one thing scanned), never
// the jobs table.
func TestPartsOfPlan(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	q := partsOfQuery(`["a","b","c"]`)
	if got := queryPlan(t, s, q.SQL(), q.Args()...); !strings.Contains(got, "SEARCH jobs USING INDEX jobs_parent (parent_id=?)") || strings.Contains(got, "SCAN jobs") {
		t.Errorf("PartsOf plan %q, want a search of jobs_parent", got)
	}
}
