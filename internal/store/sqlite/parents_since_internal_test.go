package sqlite

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

// TestReadyParentsSincePlan: with FinishedSince the statement starts from
// the jobs finished since then (a range of jobs_finished) and reads each
// of their parents by its key (kind and id in jobs_accepted_kind): it
// walks no accepted parent and scans no part, so its cost follows the
// parts finished, not the parents waiting.
func TestReadyParentsSincePlan(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	q := store.ReadyParentsQuery(jobCols, store.ReadyParentsParams{Kind: "review", Limit: 500, FinishedSince: time.Unix(1, 0)})
	got := queryPlan(t, s, q.SQL(), q.Args()...)
	for _, want := range []string{"SEARCH pf USING INDEX jobs_finished (finished_at>?)", "SEARCH jobs USING INDEX jobs_accepted_kind (kind=? AND id=?)"} {
		if !strings.Contains(got, want) {
			t.Errorf("ReadyParents(FinishedSince) plan %q, want %q in it", got, want)
		}
	}
	if strings.Contains(got, "SCAN jobs") || strings.Contains(got, "SCAN pf") {
		t.Errorf("ReadyParents(FinishedSince) plan %q: walks the waiting parents", got)
	}
}
