package review_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/review"
)

// storeTransactions reads ratelane_store_transactions_total from reg.
func storeTransactions(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != "ratelane_store_transactions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
			found = true
		}
	}
	if !found {
		t.Fatal("ratelane_store_transactions_total not registered")
	}
	return n
}

// TestSubmitWritesBeforeThePartExists: an interactive review's part can
// only be leased once its insert commits, so every store transaction the
// submission makes before it is time the part spends in its queued stage,
// behind the single SQLite writer's queue. A one-file review stores its
// content (the diff and the part's text), the review and its part in one
// transaction: one, where one PutObject per object made three
// (docs/benchmarks.md, "Session 13 (s13h5)") and one PutObjects before the
// insert two ("Session 19 (s19h5)"). The engine is not started, so nothing
// else writes.
func TestSubmitWritesBeforeThePartExists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prov := provider(t, review.Profile{Name: "eu-openai", Kind: "openai-compatible", Region: "eu", Model: "m",
		BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-test", RequestsPerMinute: 600})
	p := review.New(review.Config{Regions: map[string]review.RegionConfig{"eu": {Providers: []review.Provider{prov}}}})
	reg := prometheus.NewRegistry()
	c, err := ratelane.NewClient(ctx, ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "eu", Synchronous: "NORMAL"}},
		Plugins: []ratelane.Plugin{p}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	diff := []byte("diff --git a/app/f.go b/app/f.go\nnew file mode 100644\n--- /dev/null\n+++ b/app/f.go\n" +
		"@@ -0,0 +1,2 @@\n+package app\n+func F() {}\n")
	before := storeTransactions(t, reg)
	s, err := p.Submit(ctx, review.Request{Region: "eu", Provider: "eu-openai", Repo: "acme/app", Change: "1", Diff: diff,
		Depth: "full", Publish: review.Publish{Kind: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	got := storeTransactions(t, reg) - before
	parts, err := c.List(ctx, "eu", ratelane.ListParams{Kind: review.KindPart, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1 || parts[0].ParentID != s.ID {
		t.Fatalf("parts = %d, want the review's one part", len(parts))
	}
	if got != 1 {
		t.Errorf("a one-file review's submission made %v store transactions, want 1 (its content, the review and its part together)", got)
	}
}
