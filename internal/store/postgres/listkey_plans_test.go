package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestListByKeyUsesGroupIndex: List filtered by a limit key (a webhook
// subscriber's deliveries: kind and key in any state; the pause source of
// a job's waiting_for: the key's retry_scheduled jobs; the HTTP API's
// limit_key filter) reads the key's jobs through a group index, in the
// generic plan pgx's cached statement gets. Before migration 0025 the
// plan walked jobs_pkey backwards testing every row's limit_keys, to the
// end of the table when the key had fewer jobs than the page. Sequential
// scans are switched off for the check, since a table this small is
// cheaper to scan whatever the indexes.
func TestListByKeyUsesGroupIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	insertN(t, s, 64, 4, "subscriber:s1")
	insertN(t, s, 64, 4, "openai")
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for _, p := range []store.ListParams{
		{Kind: "webhook", LimitKey: "subscriber:s1", Limit: 100},
		{Kind: "webhook", LimitKey: "subscriber:s1", After: "01J", Limit: 100},
		{LimitKey: "openai", State: job.StateRetryScheduled, Limit: 10},
		{LimitKey: "openai", Limit: 100},
	} {
		q := listQuery(p)
		plan := explainIn(t, tx, q.Numbered(), q.Args()...)
		if !strings.Contains(plan, "jobs_group_") || strings.Contains(plan, "jobs_pkey") {
			t.Errorf("List(%+v) does not read the key's jobs through a group index:\n%s", p, plan)
		}
	}
}
