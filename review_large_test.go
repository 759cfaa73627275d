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

// TestReviewLargeDiffWithinLimits splits a 5,000-line diff into parts,
// reviews them in parallel against a provider that answers 429 above 40
// requests/s, paced by a 30/s key so that 429s are (almost) never met,
// aggregates and publishes the review once (an rdjsonl file). Not
// parallel: it paces over real time. Even so, a handler stalled for a
// couple of hundred milliseconds under the race detector sends its
// requests in a bunch the provider's burst of 5 cannot hold, so two 429s
// (2.5%) are tolerated; unpaced, 16 workers meet dozens.
func TestReviewLargeDiffWithinLimits(t *testing.T) {
	ctx := context.Background()
	up, err := upstream.New(upstream.Config{Routes: map[string]upstream.RouteConfig{"openai": {Rate: 40, Burst: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	p, err := review.NewProvider(review.Profile{Name: "compat", Kind: "openai-compatible", Region: "us",
		Model: "m", BaseURL: up.LLMBaseURL("openai") + "/v1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Workers: 16,
		Limits: []ratelane.Limit{{Name: "openai-compatible:m", Rate: 30, Burst: 3}}}
	reviews := withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{p}, MaxPartTokens: 1000,
		RDJSONLDir: out, SweepEvery: 100 * time.Millisecond})
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
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
	if st.RateLimited > 2 || st.Accepted != int64(s.Parts.Total) {
		t.Errorf("provider saw %d accepted and %d rate-limited requests for %d parts", st.Accepted, st.RateLimited, s.Parts.Total)
	}
	if _, err := os.Stat(filepath.Join(out, "default", "review.rdjsonl")); err != nil {
		t.Errorf("rdjsonl publication: %v", err)
	}
	t.Logf("%d parts in %v (key 30/s burst 3); provider rate %.1f/s", s.Parts.Total, elapsed, st.AchievedRate)
}
