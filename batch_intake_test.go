package ratelane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/review/chunk"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
	"github.com/ratelane/ratelane/review"
)

// intakeAdminKey is the admin key of the intake tests' servers.
const intakeAdminKey = "rl_intake01_AdminKeyForTheBatchIntakeTestsAbcdefghijklmno"

// intakeAPI serves reviews in us over HTTP with prof as the batch
// profile. Its simulator never processes a request (every batch runs to
// the end of its 24 h window), so submitted items stay out at the
// provider: the lane's backlog is exactly what the test sent.
func intakeAPI(t *testing.T, prof review.Profile) string {
	t.Helper()
	p, err := review.NewProvider(prof)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Workers: 2,
		Logger: quiet()}
	withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{p},
		Batch: review.BatchConfig{PollInterval: 100 * time.Millisecond}})
	_, url := serveAPI(t, cfg, intakeAdminKey)
	return url
}

// intakeSim is a simulator that never finishes a request.
func intakeSim(t *testing.T, kind string) review.Profile {
	t.Helper()
	_, prof := batchSim(t, kind, func(batchsim.FaultRequest) batchsim.Fault { return batchsim.FaultExpire })
	return prof
}

// intakeBatch is the part of a POST /v1/batches answer the tests read.
type intakeBatch struct {
	ID      string `json:"id"`
	Summary struct {
		Items  int    `json:"items"`
		Depth  string `json:"depth"`
		Tokens int64  `json:"tokens"`
		Intake *struct {
			PredictedFinish time.Time `json:"predicted_finish"`
			AheadItems      int64     `json:"ahead_items"`
			Rounds          int64     `json:"rounds"`
			Degraded        bool      `json:"degraded"`
			Late            bool      `json:"late"`
			Detail          string    `json:"detail"`
		} `json:"intake"`
	} `json:"summary"`
}

// postManifest sends n one-part reviews (diff(i) each) due by deadline
// with policy, and returns the status, the answer and its Retry-After.
func postManifest(t *testing.T, url string, n int, diff func(int) string, deadline time.Time, policy string) (int, []byte, string) {
	t.Helper()
	var reviews []map[string]any
	for i := range n {
		reviews = append(reviews, map[string]any{"repo": "acme/app", "change": fmt.Sprint(i), "diff": diff(i)})
	}
	body := map[string]any{"region": "us", "deadline": deadline.Format(time.RFC3339), "reviews": reviews}
	if policy != "" {
		body["on_overload"] = policy
	}
	resp, raw := callJSON(t, "POST", url, "/v1/batches", intakeAdminKey, body, nil)
	return resp.StatusCode, raw, resp.Header.Get("Retry-After")
}

// TestBatchIntakeBacklog: with a provider queue of 4 requests and one
// hour per provider batch, a manifest of 3 due in 90 minutes is accepted
// (one round); a second one is refused with 429 and a Retry-After of the
// half hour it is late by, because the first one's 3 items are ahead of
// it in the lane; on_overload queue accepts it, marked late; and a
// manifest of 5 that needs two rounds even on an idle lane is a 400 on
// deadline, since retrying cannot help.
func TestBatchIntakeBacklog(t *testing.T) {
	t.Parallel()
	prof := intakeSim(t, "anthropic")
	prof.BatchQueueRequests = 4
	url := intakeAPI(t, prof)
	deadline := time.Now().Add(90 * time.Minute)

	code, raw, _ := postManifest(t, url, 3, batchDiff, deadline, "")
	var first intakeBatch
	if err := json.Unmarshal(raw, &first); err != nil || code != http.StatusAccepted {
		t.Fatalf("first manifest: %d %s", code, raw)
	}
	in := first.Summary.Intake
	if in == nil || in.Rounds != 1 || in.AheadItems != 0 || in.PredictedFinish.After(deadline) || in.Late || in.Degraded {
		t.Fatalf("first manifest's intake: %s", raw)
	}

	code, raw, retry := postManifest(t, url, 3, batchDiff, deadline, "")
	var p struct{ Type, Title, Detail string }
	_ = json.Unmarshal(raw, &p)
	secs, _ := strconv.Atoi(retry)
	if code != http.StatusTooManyRequests || !strings.HasSuffix(p.Type, "/batch-late") || secs < 25*60 || secs > 35*60 ||
		!strings.Contains(p.Detail, "3 items") || !strings.Contains(p.Detail, "2 round") {
		t.Fatalf("second manifest: %d, Retry-After %q: %s", code, retry, raw)
	}

	code, raw, _ = postManifest(t, url, 3, batchDiff, deadline, "queue")
	var queued intakeBatch
	if err := json.Unmarshal(raw, &queued); err != nil || code != http.StatusAccepted {
		t.Fatalf("queued manifest: %d %s", code, raw)
	}
	if in := queued.Summary.Intake; in == nil || !in.Late || in.AheadItems != 3 || in.Rounds != 2 || !strings.Contains(in.Detail, "deadline_exceeded") {
		t.Fatalf("queued manifest's intake: %s", raw)
	}

	code, raw, _ = postManifest(t, url, 5, batchDiff, deadline, "")
	if code != http.StatusBadRequest || !strings.Contains(string(raw), `"deadline"`) || !strings.Contains(string(raw), "idle lane") {
		t.Fatalf("a manifest too large for its deadline on its own: %d %s", code, raw)
	}
}

// contextDiff is a one-hunk diff that changes one line among many
// unchanged ones: at depth fast (one line of context) its part is a small
// fraction of the full one.
func contextDiff(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/big%d.go b/big%d.go\n--- a/big%d.go\n+++ b/big%d.go\n@@ -1,200 +1,200 @@\n", n, n, n, n)
	for i := range 200 {
		if i == 100 {
			fmt.Fprintf(&b, "-var x%d = 1\n+var x%d = 2 // TODO: check case %d\n", i, i, n)
			continue
		}
		fmt.Fprintf(&b, " var unchangedLineNumber%d = \"some context the reviewer reads\"\n", i)
	}
	return b.String()
}

// partTokens is what the intake counts for contextDiff at depth mode: the
// part's estimate, the prompt's overhead and the answer cap.
func partTokens(t *testing.T, mode chunk.Mode, maxOut int) int64 {
	t.Helper()
	d, err := diff.Parse([]byte(contextDiff(0)))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := chunk.Split(d, chunk.Options{Mode: mode})
	if err != nil || len(parts) != 1 {
		t.Fatalf("split: %v (%d parts)", err, len(parts))
	}
	return int64(parts[0].Tokens + pipeline.PromptOverheadTokens + maxOut)
}

// TestBatchIntakeDegrade: with an OpenAI token queue that holds the
// manifest at depth fast but not at full depth, a manifest due in 90
// minutes is refused by default (400 on deadline: two rounds even on an
// idle lane), and accepted with on_overload degrade, planned at depth
// fast in one round, the summary saying so and why.
func TestBatchIntakeDegrade(t *testing.T) {
	t.Parallel()
	prof := intakeSim(t, "openai")
	full, fast := partTokens(t, chunk.ModeFull, prof.MaxOutputTokens), partTokens(t, chunk.ModeFast, prof.MaxOutputTokens)
	if fast*3 >= full*2 {
		t.Fatalf("depth fast saves too little to test: %d tokens against %d", fast, full)
	}
	prof.BatchQueueTokens = (full + fast) / 2
	url := intakeAPI(t, prof)
	deadline := time.Now().Add(90 * time.Minute)

	code, raw, _ := postManifest(t, url, 1, contextDiff, deadline, "")
	if code != http.StatusBadRequest || !strings.Contains(string(raw), `"deadline"`) {
		t.Fatalf("full depth by default: %d %s", code, raw)
	}
	code, raw, _ = postManifest(t, url, 1, contextDiff, deadline, "degrade")
	var b intakeBatch
	if err := json.Unmarshal(raw, &b); err != nil || code != http.StatusAccepted {
		t.Fatalf("degrade: %d %s", code, raw)
	}
	in := b.Summary.Intake
	if b.Summary.Depth != pipeline.DepthFast || b.Summary.Tokens != fast || in == nil || !in.Degraded || in.Rounds != 1 ||
		in.PredictedFinish.After(deadline) || !strings.Contains(in.Detail, "depth fast") {
		t.Fatalf("degraded intake (full %d, fast %d tokens): %s", full, fast, raw)
	}
}

// intakeMark marks the context of TestBatchIntakeInPieces's own
// manifest, so its counting Yield tells the intake's pieces from the batch
// handlers'.
type intakeMark struct{}

// TestBatchIntakeInPieces: a manifest's intake goes in pieces with the
// batch lane's Yield between them (where the batch pacer rests it), each
// of a bounded size whatever the manifest's: one per 32 reviews planned,
// one per store write of its objects, one before its jobs' insert and one
// before the batch's record. 300 one-part reviews (300 objects: a diff
// each, which is also its part's text: pipeline.PartArgs.WholeDiff) are
// 9 + 2 + 1 + 1 yields; in one piece they were none.
func TestBatchIntakeInPieces(t *testing.T) {
	t.Parallel()
	p, err := review.NewProvider(intakeSim(t, "openai"))
	if err != nil {
		t.Fatal(err)
	}
	var yields atomic.Int64
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Workers: 2,
		Logger: quiet()}
	rv := withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{p},
		Batch: review.BatchConfig{PollInterval: 100 * time.Millisecond, Yield: func(ctx context.Context) {
			if ctx.Value(intakeMark{}) != nil {
				yields.Add(1)
			}
		}}})
	startClient(t, cfg)
	req := review.BatchRequest{Region: "us"}
	for i := range 300 {
		req.Reviews = append(req.Reviews, review.BatchReview{Repo: "acme/app", Change: fmt.Sprint(i), Diff: []byte(batchDiff(i))})
	}
	st, err := rv.SubmitBatch(context.WithValue(context.Background(), intakeMark{}, true), req)
	if err != nil {
		t.Fatal(err)
	}
	if st.Summary.Items != 300 {
		t.Fatalf("submitted %d items, want 300", st.Summary.Items)
	}
	if n := yields.Load(); n != 9+2+1+1 {
		t.Fatalf("the intake's pieces: %d yields, want 13 (9 planning, 2 object writes, the jobs, the batch)", n)
	}
}
