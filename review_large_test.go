package ratelane_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/review"
)

// largeDiff returns a diff of files new files with lines added lines each.
func largeDiff(files, lines int) string {
	var b strings.Builder
	for f := range files {
		fmt.Fprintf(&b, "diff --git a/pkg/f%d.go b/pkg/f%d.go\nnew file mode 100644\n--- /dev/null\n+++ b/pkg/f%d.go\n@@ -0,0 +1,%d @@\n", f, f, f, lines)
		for l := range lines {
			fmt.Fprintf(&b, "+\tx%d := compute(%d, %d) // some ordinary line of code\n", l, f, l)
		}
	}
	return b.String()
}

// compatUpstream starts an upstream simulator with cfg, closed when tb
// ends, and returns it with an OpenAI-compatible review provider (key
// openai-compatible:m) on its openai route.
func compatUpstream(tb testing.TB, cfg upstream.Config) (*upstream.Server, review.Provider) {
	tb.Helper()
	up, err := upstream.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { up.Close() })
	p, err := review.NewProvider(review.Profile{Name: "compat", Kind: "openai-compatible", Region: "us",
		Model: "m", BaseURL: up.LLMBaseURL("openai") + "/v1", APIKey: "k"})
	if err != nil {
		tb.Fatal(err)
	}
	return up, p
}

// TestReviewLargeDiffWithinLimits splits a 5,000-line diff into parts,
// reviews them in parallel against a provider that answers 429 above 5
// requests/s (burst 6), paced by a 4/s key (burst 2), aggregates and
// publishes the review once (an rdjsonl file). Paced, the provider never
// answers 429, however the machine schedules the handlers: the key admits
// at most 2 + 4·t starts in any window of t seconds, and a request that
// reaches the provider in that window was either started in it or started
// earlier and still holds one of the 4 worker slots at its beginning, so
// at most 2 + 4 + 4·t requests arrive in it, within the provider's bucket
// of 6 + 5·t. (The former tolerance of two 429s, with 16 workers, a 30/s
// key and a 40/s provider of burst 5, failed at load 30: stalled handlers
// sent their requests late, in a bunch.) The rates are low so that even a
// loaded machine outruns the provider unpaced: with the key unbounded the
// test fails (3 429s at load 24).
func TestReviewLargeDiffWithinLimits(t *testing.T) {
	const providerRate, keyRate, keyBurst, reviewWorkers = 5, 4, 2, 4
	const reviewBurst = keyBurst + reviewWorkers
	ctx := context.Background()
	up, p := compatUpstream(t, upstream.Config{Routes: map[string]upstream.RouteConfig{"openai": {Rate: providerRate, Burst: reviewBurst}}})
	out := t.TempDir()
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Workers: reviewWorkers,
		Limits: []ratelane.Limit{{Name: "openai-compatible:m", Rate: keyRate, Burst: keyBurst}}}
	reviews := withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{p}, MaxPartTokens: 2000,
		RDJSONLDir: out, SweepEvery: 100 * time.Millisecond})
	startClient(t, cfg)
	start := time.Now()
	sub, err := reviews.Submit(ctx, review.Request{Region: "us", Diff: []byte(largeDiff(20, 250)), Depth: "full",
		Publish: review.Publish{Kind: "rdjsonl", Target: "review.rdjsonl"}})
	if err != nil {
		t.Fatal(err)
	}
	s := waitReview(t, reviews, "us", sub.ID, ratelane.StatePublished, testkit.Timeout)
	elapsed := time.Since(start)
	if s.Parts.Total < 20 || s.Parts.Succeeded != s.Parts.Total || s.Result.Partial {
		t.Fatalf("parts = %+v, want 20+ parts, all succeeded", s.Parts)
	}
	st := up.Stats().Routes["openai"]
	if st.RateLimited != 0 || st.Accepted != int64(s.Parts.Total) {
		t.Errorf("provider saw %d accepted and %d rate-limited requests for %d parts", st.Accepted, st.RateLimited, s.Parts.Total)
	}
	if _, err := os.Stat(filepath.Join(out, "default", "review.rdjsonl")); err != nil {
		t.Errorf("rdjsonl publication: %v", err)
	}
	t.Logf("%d parts in %v (key %d/s burst %d); provider rate %.1f/s", s.Parts.Total, elapsed, keyRate, keyBurst, st.AchievedRate)
}
