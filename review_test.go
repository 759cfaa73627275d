package ratelane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/review"
)

// reviewDiff has two added lines; line 4 of app.go is the one findings use.
const reviewDiff = `diff --git a/app.go b/app.go
--- a/app.go
+++ b/app.go
@@ -1,3 +1,5 @@
 package app
 
 func Run() {
+	password := "hunter2"
+	_ = password
 }
`

// requestsPerCall records how many requests the upstream route saw during
// each provider call, to prove that no worker waited out a 429 and tried
// again inside its call (an SDK's own retries, which honour Retry-After):
// each call is one request, whatever the machine's load. Calls are made
// one at a time (mu is held across each), so that each count is its own.
type requestsPerCall struct {
	provider.Provider
	up    *upstream.Server
	route string
	mu    sync.Mutex
	calls []int64
}

func (p *requestsPerCall) Review(ctx context.Context, req provider.Request) (provider.Response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.up.Stats().Routes[p.route].Attempts
	r, err := p.Provider.Review(ctx, req)
	p.calls = append(p.calls, p.up.Stats().Routes[p.route].Attempts-before)
	return r, err
}

// fakeGitHub speaks the two endpoints the GitHub publisher uses.
type fakeGitHub struct {
	mu       sync.Mutex
	comments []map[string]any
	posts    int
}

func (g *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-ratelimit-limit", "5000")
	w.Header().Set("x-ratelimit-remaining", "4999")
	w.Header().Set("x-ratelimit-reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/repos/acme/app/pulls/7/comments":
		json.NewEncoder(w).Encode(g.comments)
	case r.Method == http.MethodPost && r.URL.Path == "/repos/acme/app/pulls/7/reviews":
		var body struct {
			Event    string           `json:"event"`
			Comments []map[string]any `json:"comments"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Event != "COMMENT" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		g.posts++
		g.comments = append(g.comments, body.Comments...)
		w.Write([]byte(`{"id":1,"state":"COMMENTED"}`))
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func chatBody(content string) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": content, "refusal": nil}}},
		"usage": map[string]any{"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340},
	})
	return b
}

func findingJSON(line int, evidence string) string {
	return fmt.Sprintf(`{"path":"app.go","line":%d,"end_line":null,"severity":"error","category":"security",`+
		`"message":"hard-coded password","evidence":%q,"suggestion":null,"confidence":0.9}`, line, evidence)
}

// waitReview reads review id of region until it is in state want, failing
// the test when it is not within timeout; it returns the last status.
func waitReview(t *testing.T, c *review.Plugin, region, id string, want ratelane.State, timeout time.Duration) review.Status {
	t.Helper()
	var s review.Status
	testkit.Eventually(t, timeout, "review "+id+" to be "+string(want), func() error {
		var err error
		if s, err = c.Get(context.Background(), region, id); err != nil {
			t.Fatal(err)
		}
		if s.State != want {
			return fmt.Errorf("review is %s (parts %+v)", s.State, s.Parts)
		}
		return nil
	})
	return s
}

// TestReviewScriptedProvider is issue 6's scripted run: a 429 with
// retry-after and x-ratelimit-reset-requests, malformed output, then
// output with one real and one invented finding. The review publishes the
// real finding once to GitHub, quarantines the invented one with its
// reason, spends one congestion and one schema attempt, and no provider
// call waited out the delay. A second review of the same change adds no
// comment.
func TestReviewScriptedProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	up, err := upstream.New(upstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	gh := &fakeGitHub{}
	ghs := httptest.NewServer(gh)
	defer ghs.Close()

	rateHeaders := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"},
		"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Limit-Requests": {"60"}}
	ok := http.Header{"Content-Type": {"application/json"}}
	if err := up.Script("openai",
		upstream.Response{Status: 429, Header: rateHeaders,
			Body: []byte(`{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)},
		upstream.Response{Status: 200, Header: ok, Body: chatBody(`{"findings":[{"path":"app.go",`)},
		upstream.Response{Status: 200, Header: ok, Body: chatBody(`{"findings":[` + findingJSON(4, `password := "hunter2"`) + `,` + findingJSON(42, "os.Exit(1)") + `]}`)},
	); err != nil {
		t.Fatal(err)
	}
	p, err := review.NewProvider(review.Profile{Name: "us-openai", Kind: "openai-compatible", Region: "us",
		Model: "gpt-4o-mini", BaseURL: up.LLMBaseURL("openai") + "/v1", APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	timed := &requestsPerCall{Provider: p, up: up, route: "openai"}
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Workers: 4}
	reviews := withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{timed}, GitHubBaseURL: ghs.URL, SweepEvery: 100 * time.Millisecond})
	c := startClient(t, cfg)

	req := review.Request{Region: "us", Repo: "acme/app", Change: "7", Diff: []byte(reviewDiff), Depth: "full",
		Publish: review.Publish{Kind: "github"}}
	sub, err := reviews.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	s := waitReview(t, reviews, "us", sub.ID, ratelane.StatePublished, testkit.Timeout)
	r := s.Result
	if len(r.Findings) != 1 || r.Findings[0].Line != 4 || r.Partial || r.Depth != "full" {
		t.Fatalf("result = %+v, want exactly the finding on line 4, full depth, not partial", r)
	}
	if len(r.Quarantined) != 1 || r.Quarantined[0].Finding.Line != 42 || r.Quarantined[0].Reason != "line_not_in_diff" {
		t.Fatalf("quarantined = %+v, want line 42 with line_not_in_diff", r.Quarantined)
	}
	parts, err := c.List(ctx, "us", ratelane.ListParams{Kind: "review.part"})
	if err != nil || len(parts) != 1 {
		t.Fatalf("parts = %d, %v", len(parts), err)
	}
	part, _ := c.Job(ctx, "us", parts[0].ID)
	if part.Attempts.Congestion != 1 || part.Attempts.Schema != 1 || part.Attempts.Transient != 0 {
		t.Errorf("attempts = %+v, want one congestion and one schema attempt", part.Attempts)
	}
	timed.mu.Lock()
	if len(timed.calls) != 3 || slices.ContainsFunc(timed.calls, func(n int64) bool { return n != 1 }) {
		t.Errorf("upstream requests per provider call %v, want 3 calls of 1: a call waited out the 1 s retry-after and tried again", timed.calls)
	}
	timed.mu.Unlock()
	waitGitHub(t, gh, 1)

	// A second review of the same change posts nothing new.
	up.Script("openai", upstream.Response{Status: 200, Header: ok, Body: chatBody(`{"findings":[` + findingJSON(4, `password := "hunter2"`) + `]}`)})
	sub2, err := reviews.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	waitReview(t, reviews, "us", sub2.ID, ratelane.StatePublished, testkit.Timeout)
	gj := waitKind(t, c, "us", "review.github", 2)
	_ = gj
	gh.mu.Lock()
	defer gh.mu.Unlock()
	if gh.posts != 1 || len(gh.comments) != 1 {
		t.Fatalf("GitHub got %d review requests with %d comments, want 1 and 1", gh.posts, len(gh.comments))
	}
	if body := gh.comments[0]["body"].(string); !strings.Contains(body, "<!-- ratelane:") || gh.comments[0]["side"] != "RIGHT" {
		t.Errorf("comment = %v", gh.comments[0])
	}
}

func waitGitHub(t *testing.T, gh *fakeGitHub, posts int) {
	t.Helper()
	testkit.WaitFor(t, testkit.Timeout, fmt.Sprintf("GitHub to get %d reviews", posts), func() bool {
		gh.mu.Lock()
		defer gh.mu.Unlock()
		return gh.posts >= posts
	})
}

// waitKind waits until n jobs of kind are published.
func waitKind(t *testing.T, c *ratelane.Client, region, kind string, n int) []*ratelane.Job {
	t.Helper()
	var js []*ratelane.Job
	testkit.Eventually(t, testkit.Timeout, fmt.Sprintf("%d %s jobs to publish", n, kind), func() error {
		var err error
		if js, err = c.List(context.Background(), region, ratelane.ListParams{Kind: kind, State: ratelane.StatePublished}); err != nil {
			t.Fatal(err)
		}
		if len(js) < n {
			return fmt.Errorf("%d published", len(js))
		}
		return nil
	})
	return js
}

// TestReviewProviderOfOtherRegionStopsStartup: a US provider profile wired
// to the EU lane is a NewClient error naming both regions.
func TestReviewProviderOfOtherRegionStopsStartup(t *testing.T) {
	t.Parallel()
	p, err := review.NewProvider(review.Profile{Name: "us-rules", Kind: "rules", Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "eu"}}}
	withReviews(&cfg, "eu", review.RegionConfig{Providers: []review.Provider{p}})
	_, err = ratelane.NewClient(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), `"eu"`) || !strings.Contains(err.Error(), `"us"`) {
		t.Fatalf("err = %v, want one naming both regions", err)
	}
}

// TestReviewCanaryStaysInRegion: a canary string in an EU review's diff is
// found in no US store file, no log line and no metric label.
func TestReviewCanaryStaysInRegion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const canary = "CANARY-7f3a9c-EU-ONLY"
	dir := t.TempDir()
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&logs, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}, {Name: "eu"}}, Logger: logger, Registry: reg}
	rc := review.Config{Regions: map[string]review.RegionConfig{}}
	for _, region := range []string{"us", "eu"} {
		p, err := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: region})
		if err != nil {
			t.Fatal(err)
		}
		rc.Regions[region] = review.RegionConfig{Providers: []review.Provider{p}, SweepEvery: 100 * time.Millisecond}
	}
	reviews := review.New(rc)
	cfg.Plugins = append(cfg.Plugins, reviews)
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	d := strings.Replace(reviewDiff, `"hunter2"`, `"`+canary+`"`, 1)
	d = strings.Replace(d, "+\t_ = password", "+\tfmt.Println(\"debug "+canary+"\")", 1)
	sub, err := reviews.Submit(ctx, review.Request{Region: "eu", Repo: "acme/app", Diff: []byte(d), Depth: "full"})
	if err != nil {
		t.Fatal(err)
	}
	s := waitReview(t, reviews, "eu", sub.ID, ratelane.StatePublished, testkit.Timeout)
	if len(s.Result.Findings) == 0 || !strings.Contains(s.Result.Findings[0].Evidence, canary) {
		t.Fatalf("the EU review should find the canary lines: %+v", s.Result)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), canary) {
					t.Errorf("metric %s has the canary in label %s", mf.GetName(), l.GetName())
				}
			}
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	if strings.Contains(logs.String(), canary) {
		t.Error("a log line holds the canary")
	}
	logMu.Unlock()
	found := false
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, _ := os.ReadFile(path)
		has := bytes.Contains(b, []byte(canary))
		if strings.HasPrefix(filepath.Base(path), "us.db") && has {
			t.Errorf("US store file %s holds the canary", path)
		}
		if strings.HasPrefix(filepath.Base(path), "eu.db") && has {
			found = true
		}
		return nil
	})
	if !found {
		t.Error("the canary is not in the EU store either: the check would prove nothing")
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// withReviews enables reviews in one region of cfg, as HandleReviews did
// before reviews became a plug-in, and returns the plug-in.
func withReviews(cfg *ratelane.Config, region string, rc review.RegionConfig) *review.Plugin {
	p := review.New(review.Config{Regions: map[string]review.RegionConfig{region: rc}})
	cfg.Plugins = append(cfg.Plugins, p)
	return p
}

// reviewsIn returns the review plug-in of cfg (nil without one).
func reviewsIn(cfg ratelane.Config) *review.Plugin {
	for _, p := range cfg.Plugins {
		if rv, ok := p.(*review.Plugin); ok {
			return rv
		}
	}
	return nil
}
