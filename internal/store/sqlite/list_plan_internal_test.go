package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestListKindStateUsesIndex: the engine's sweeps (one kind in the
// accepted or the validated state, paged by After) search the partial
// index of that state, as EXPLAIN QUERY PLAN reports it, instead of
// scanning every job by its primary key, which they did before migration
// 0021 whatever the table held.
func TestListKindStateUsesIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
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
		rows, err := s.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q.SQL(), q.Args()...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if got := strings.Join(plan, "; "); !strings.Contains(got, "SEARCH jobs USING INDEX "+tc.index+" (kind=?") || strings.Contains(got, "TEMP B-TREE") {
			t.Errorf("List(kind %s, state %s, after %q) plan %q, want a search of %s in id order", tc.p.Kind, tc.p.State, tc.p.After, got, tc.index)
		}
	}
}
