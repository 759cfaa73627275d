package ratelane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
	"github.com/ratelane/ratelane/review"
)

// batchAnswer is the simulated model: for every added line of the prompt
// that holds a TODO it reports a finding anchored on that line (which the
// pipeline's verification accepts), and one invented finding on a line
// the diff does not show (which it quarantines). It reads only the prompt
// the batch lane built, so it is deterministic. Like a model asked for free
// text, it answers prose unless the request asked for structured output
// with the findings schema (which the lane's validation then refuses).
func batchAnswer(r upstream.LLMRequest) string {
	if sameJSON(r.Schema, []byte(invoiceSchema)) {
		return extractionAnswer(r) // an extraction manifest's item (TestBatchKill9)
	}
	if !sameJSON(r.Schema, finding.StrictSchema()) {
		return "I looked at the diff and found one unfinished TODO."
	}
	var fs []map[string]any
	path := ""
	line := regexp.MustCompile(`^L(\d+): \+(.*)$`)
	for _, m := range r.Messages {
		for _, l := range strings.Split(m.Text, "\n") {
			if p, ok := strings.CutPrefix(l, "File: "); ok {
				path = p
				continue
			}
			sub := line.FindStringSubmatch(l)
			if sub == nil || !strings.Contains(sub[2], "TODO") {
				continue
			}
			var n int
			fmt.Sscan(sub[1], &n)
			fs = append(fs, map[string]any{"path": path, "line": n, "end_line": nil, "severity": "warning",
				"category": "maintainability", "message": "unfinished work", "evidence": sub[2], "suggestion": nil, "confidence": 0.9})
		}
	}
	fs = append(fs, map[string]any{"path": path, "line": 99999, "end_line": nil, "severity": "info", "category": "style",
		"message": "invented", "evidence": "nothing", "suggestion": nil, "confidence": 0.1})
	b, _ := json.Marshal(map[string]any{"findings": fs})
	return string(b)
}

// sameJSON reports whether a and b hold equal JSON values.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// batchDiff is review n of a sweep: two files, the first with a TODO; one
// part at the default part size.
func batchDiff(n int) string {
	return fmt.Sprintf("diff --git a/svc/a%d.go b/svc/a%d.go\nnew file mode 100644\n--- /dev/null\n+++ b/svc/a%d.go\n@@ -0,0 +1,3 @@\n"+
		"+package svc\n+// TODO: handle case %d\n+func A%d() {}\n"+
		"diff --git a/svc/b%d.go b/svc/b%d.go\nnew file mode 100644\n--- /dev/null\n+++ b/svc/b%d.go\n@@ -0,0 +1,2 @@\n"+
		"+package svc\n+func B%d() {}\n", n, n, n, n, n, n, n, n, n)
}

// batchSim starts the batch simulator with fast status transitions (real
// time: the ratelane client and the simulator share the wall clock) and
// fault, and returns it with the review profile of kind pointing at it.
func batchSim(t *testing.T, kind string, fault func(batchsim.FaultRequest) batchsim.Fault) (*batchsim.Server, review.Profile) {
	t.Helper()
	return batchSimFor(t, kind, fault, 300*time.Millisecond)
}

// batchSimFor is batchSim with batches that take process to run.
func batchSimFor(t *testing.T, kind string, fault func(batchsim.FaultRequest) batchsim.Fault, process time.Duration) (*batchsim.Server, review.Profile) {
	t.Helper()
	return simWith(t, kind, batchsim.Config{ValidateFor: 50 * time.Millisecond, ProcessFor: process,
		FinalizeFor: 50 * time.Millisecond, CancelFor: 50 * time.Millisecond, Responder: batchAnswer, Fault: fault})
}

// simWith starts a batch simulator with cfg, closed when the test ends,
// and returns it with a profile of the given provider kind pointed at it.
func simWith(t *testing.T, kind string, cfg batchsim.Config) (*batchsim.Server, review.Profile) {
	t.Helper()
	sim, err := batchsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	prof := review.Profile{Name: kind + "-batch", Kind: kind, Region: "us", Model: "m-1", APIKey: "sk-test", MaxOutputTokens: 512}
	if kind == "openai" {
		prof.BaseURL = sim.URL() + "/v1/"
	} else {
		prof.BaseURL = sim.URL() + "/"
	}
	return sim, prof
}

// batchSettleGroup is the batch tests' results per store write: small, so
// that a chunk of a few items is delivered in several writes and a crash
// can land between them (batchlane.StagePartlyDelivered).
const batchSettleGroup = 2

// startBatchClient starts a client on a new directory with the batch
// lane on prof, stopped when the test ends, and returns it with its
// review plug-in.
func startBatchClient(t *testing.T, prof review.Profile) (*ratelane.Client, *review.Plugin) {
	t.Helper()
	cfg, rv := batchConfig(t, t.TempDir(), prof, nil)
	return startClient(t, cfg), rv
}

// batchConfig is the client configuration of the batch tests: one region
// with the profile, short poll interval, the given stage hook.
func batchConfig(t *testing.T, dir string, prof review.Profile, stage func(string)) (ratelane.Config, *review.Plugin) {
	t.Helper()
	p, err := review.NewProvider(prof)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Workers: 4, LeaseFor: 5 * time.Second,
		Logger: quiet()}
	rv := withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{p}, SweepEvery: 100 * time.Millisecond,
		Batch: review.BatchConfig{PollInterval: 100 * time.Millisecond, SettleGroup: batchSettleGroup, Stage: stage}})
	return cfg, rv
}

// waitBatch polls a batch until it is done and its reviews are final.
func waitBatch(t *testing.T, rv *review.Plugin, id string, within time.Duration) review.BatchStatus {
	t.Helper()
	var s review.BatchStatus
	testkit.Eventually(t, within, "batch "+id+" to be done with its reviews final", func() error {
		var err error
		if s, err = rv.GetBatch(context.Background(), "us", id); err != nil {
			t.Fatal(err)
		}
		if s.State == store.BatchDone && reviewsFinal(t, rv, s) {
			return nil
		}
		return fmt.Errorf("batch %s is %s with %+v", id, s.State, s.Counts)
	})
	return s
}

func reviewsFinal(t *testing.T, rv *review.Plugin, s review.BatchStatus) bool {
	t.Helper()
	for _, id := range s.Summary.ReviewIDs {
		st, err := rv.Get(context.Background(), "us", id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != ratelane.StatePublished && st.State != ratelane.StateTerminal {
			return false
		}
	}
	return true
}

// checkBatch checks the end state of a sweep of n reviews whose items all
// succeeded: every review published with exactly its one TODO finding
// (none twice) and its invented finding quarantined, every item
// succeeded, every chunk reconciled with a summary that accounts for all
// its items (Report.Check), and every review published exactly once.
func checkBatch(t *testing.T, c *ratelane.Client, rv *review.Plugin, s review.BatchStatus, n int) {
	t.Helper()
	ctx := context.Background()
	if s.Counts != (store.BatchCounts{Total: n, Succeeded: n}) {
		t.Fatalf("counts %+v, want %d succeeded (one part per review)", s.Counts, n)
	}
	if len(s.Summary.ReviewIDs) != n {
		t.Fatalf("%d reviews, want %d", len(s.Summary.ReviewIDs), n)
	}
	seen := map[string]bool{}
	for i, id := range s.Summary.ReviewIDs {
		st, err := rv.Get(ctx, "us", id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != ratelane.StatePublished || st.Result == nil || st.Result.Partial {
			t.Fatalf("review %d is %s (result %+v)", i, st.State, st.Result)
		}
		if len(st.Result.Findings) != 1 || len(st.Result.Quarantined) != 1 {
			t.Fatalf("review %d: %d findings and %d quarantined, want 1 and 1 (the invented one)", i,
				len(st.Result.Findings), len(st.Result.Quarantined))
		}
		f := st.Result.Findings[0]
		if key := f.Path + ":" + f.Evidence; seen[key] || f.Evidence != fmt.Sprintf("// TODO: handle case %d", i) {
			t.Fatalf("review %d: finding %s duplicated or wrong", i, key)
		} else {
			seen[key] = true
		}
		// Published exactly once: one validated -> published write in the
		// history, whatever crashed before.
		j, err := c.Job(ctx, "us", id)
		if err != nil {
			t.Fatal(err)
		}
		pubs := 0
		for _, rec := range j.History {
			if strings.Contains(rec.Why, "aggregated") {
				pubs++
				if strings.Contains(rec.Why, "0 parts") {
					t.Errorf("review %d: history says %q; its parts are batch items, not part jobs", i, rec.Why)
				}
			}
		}
		// Never leased, it names the batch lane's key, not the interactive
		// lane's allowance.
		if len(j.LimitKeys) != 1 || !strings.HasPrefix(j.LimitKeys[0], "batch-collect:") {
			t.Errorf("review %d names limit keys %v, want the batch collection key alone", i, j.LimitKeys)
		}
		if pubs != 1 {
			t.Fatalf("review %d was aggregated %d times", i, pubs)
		}
	}
	total := 0
	for _, ch := range s.Chunks {
		if ch.State != string(llmbatch.StateReconciled) || ch.Summary == nil {
			t.Fatalf("chunk %s is %s", ch.Key, ch.State)
		}
		sum := ch.Summary
		if got := sum.Succeeded + sum.Failed + sum.Canceled + sum.Requeued; got != ch.Items || sum.Foreign != 0 || sum.Duplicates != 0 {
			t.Fatalf("chunk %s: summary %+v does not account for its %d items", ch.Key, sum, ch.Items)
		}
		total += sum.Succeeded
	}
	if total != n {
		t.Fatalf("chunks delivered %d successes, want %d", total, n)
	}
}

// TestBatchSweepEndToEnd runs a sweep of reviews through each provider's
// batch API (the simulator, through the official SDKs), with a first-time
// retryable error and an expiry for two items that are requeued and
// succeed in a second provider batch.
func TestBatchSweepEndToEnd(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"openai", "anthropic"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sim, prof := batchSim(t, kind, func(r batchsim.FaultRequest) batchsim.Fault {
				switch {
				case r.CustomID == "r1-p0" && r.Attempt == 1:
					return batchsim.FaultServerError
				case r.CustomID == "r2-p0" && r.Attempt == 1:
					return batchsim.FaultDrop
				}
				return batchsim.FaultNone
			})
			_ = sim
			c, rv := startBatchClient(t, prof)
			const n = 5
			req := review.BatchRequest{Region: "us", Tenant: "acme"}
			for i := range n {
				req.Reviews = append(req.Reviews, review.BatchReview{Repo: "acme/app", Change: fmt.Sprint(i), Diff: []byte(batchDiff(i))})
			}
			st, err := rv.SubmitBatch(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if st.Summary.Items != n || st.Counts.Pending != n {
				t.Fatalf("submitted %+v", st)
			}
			s := waitBatch(t, rv, st.ID, 30*time.Second)
			checkBatch(t, c, rv, s, n)
			// The two requeued items go out again in one more provider batch,
			// or two when the submit pass runs between their settlements.
			if len(s.Chunks) < 2 || len(s.Chunks) > 3 {
				t.Fatalf("%d provider batches, want 2 or 3", len(s.Chunks))
			}
			items, err := rv.BatchItems(ctx, "us", st.ID, "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				want := 1
				if it.CustomID == "r1-p0" || it.CustomID == "r2-p0" {
					want = 2
				}
				if it.Attempts != want {
					t.Errorf("item %s took %d attempts, want %d", it.CustomID, it.Attempts, want)
				}
			}
			// The drivers end published on their next pass, through the engine.
			for _, kind := range []string{review.KindBatchSubmit, review.KindBatchCollect} {
				waitDriver(t, c, kind)
			}
		})
	}
}

// TestBatchDeadlineAndCancel: a batch whose deadline is too close sends
// nothing and ends its items deadline_exceeded; a cancelled batch ends its
// items canceled. Both reviews end terminal with the reason. (The intake
// refuses such a batch by default; on_overload queue accepts it, as a
// batch whose prediction went wrong would be.)
func TestBatchDeadlineAndCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	_, prof := batchSim(t, "anthropic", func(r batchsim.FaultRequest) batchsim.Fault {
		mu.Lock()
		defer mu.Unlock()
		return batchsim.FaultExpire // never processed: only a cancel ends the batch
	})
	_, rv := startBatchClient(t, prof)
	late, err := rv.SubmitBatch(ctx, review.BatchRequest{Region: "us", Deadline: time.Now().Add(10 * time.Minute),
		OnOverload: "queue", Reviews: []review.BatchReview{{Diff: []byte(batchDiff(0))}}})
	if err != nil {
		t.Fatal(err)
	}
	s := waitBatch(t, rv, late.ID, 20*time.Second)
	if s.Counts != (store.BatchCounts{Total: 1, Failed: 1}) || len(s.Chunks) != 0 {
		t.Fatalf("late batch: %+v with %d chunks, want 1 failed and nothing sent", s.Counts, len(s.Chunks))
	}
	checkReasons(t, rv, late.ID, "deadline_exceeded")
	st, _ := rv.Get(ctx, "us", s.Summary.ReviewIDs[0])
	if st.State != ratelane.StateTerminal || st.Result == nil || len(st.Result.FailedParts) != 1 {
		t.Fatalf("late review %s: %+v", st.State, st.Result)
	}

	cb, err := rv.SubmitBatch(ctx, review.BatchRequest{Region: "us", Reviews: []review.BatchReview{{Diff: []byte(batchDiff(1))}}})
	if err != nil {
		t.Fatal(err)
	}
	// Cancel once the provider batch runs.
	testkit.Eventually(t, testkit.Timeout, "the provider batch of "+cb.ID+" to run", func() error {
		s, err := rv.GetBatch(ctx, "us", cb.ID)
		if err != nil {
			return err
		}
		if len(s.Chunks) > 0 && s.Chunks[0].BatchID != "" {
			return nil
		}
		return fmt.Errorf("batch %s is %s with chunks %+v", cb.ID, s.State, s.Chunks)
	})
	if _, err := rv.CancelBatch(ctx, "us", cb.ID); err != nil {
		t.Fatal(err)
	}
	s = waitBatch(t, rv, cb.ID, 20*time.Second)
	if s.Counts != (store.BatchCounts{Total: 1, Canceled: 1}) {
		t.Fatalf("cancelled batch: %+v", s.Counts)
	}
	checkReasons(t, rv, cb.ID, "canceled")
	if _, err := rv.CancelBatch(ctx, "us", cb.ID); err == nil {
		t.Fatal("cancelling a done batch succeeded")
	}
}

// waitDriver waits for the one driver job of kind to be published.
func waitDriver(t *testing.T, c *ratelane.Client, kind string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the "+kind+" job to publish", func() error {
		js, err := c.List(context.Background(), "us", ratelane.ListParams{Kind: kind})
		if err != nil || len(js) != 1 {
			t.Fatalf("%s jobs: %v, %v", kind, js, err)
		}
		if js[0].State == job.StatePublished {
			return nil
		}
		return fmt.Errorf("%s job is %s", kind, js[0].State)
	})
}

func checkReasons(t *testing.T, rv *review.Plugin, id, reason string) {
	t.Helper()
	items, err := rv.BatchItems(context.Background(), "us", id, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Reason != reason {
			t.Errorf("item %s ended %s with %q, want %q", it.CustomID, it.State, it.Reason, reason)
		}
	}
}

var _ = pipeline.KindReview
