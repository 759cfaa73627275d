package sqlite

import (
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestListByKeyUsesIndex: List filtered by a limit key (a webhook
// subscriber's deliveries: kind and key in any state; the pause source of
// a job's waiting_for: the key's retry_scheduled jobs; the HTTP API's
// limit_key filter) finds the key's groups in job_groups and their jobs
// through an index, as EXPLAIN QUERY PLAN reports it. Before migration
// 0025 each of them scanned jobs by its primary key, testing every row's
// limit_keys, to the end of the table when the key had fewer jobs than
// the page.
func TestListByKeyUsesIndex(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	for _, p := range []store.ListParams{
		{Kind: "webhook", LimitKey: "subscriber:s1", Limit: 100},
		{Kind: "webhook", LimitKey: "subscriber:s1", After: "01J", Limit: 100},
		{LimitKey: "openai", State: job.StateRetryScheduled, Limit: 10},
		{LimitKey: "openai", Limit: 100},
	} {
		q := listQuery(p)
		got := queryPlan(t, s, q.SQL(), q.Args()...)
		if !strings.Contains(got, "SEARCH jobs USING INDEX jobs_group_") || strings.Contains(got, "SCAN jobs") {
			t.Errorf("List(%+v) plan %q, want the key's groups' jobs searched through a group index, not the table scanned", p, got)
		}
	}
}
