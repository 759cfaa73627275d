//go:build unix

package ratelane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/review/batchlane"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/review"
)

// The child process of TestBatchKill9 reads its orders from these.
const (
	batchKillDirEnv   = "RATELANE_BATCH_KILL_DIR"
	batchKillURLEnv   = "RATELANE_BATCH_KILL_URL"
	batchKillKindEnv  = "RATELANE_BATCH_KILL_KIND"
	batchKillStageEnv = "RATELANE_BATCH_KILL_STAGE"
	batchKillIDEnv    = "RATELANE_BATCH_KILL_ID"
)

// batchKillProfile is the profile both processes use, on the parent's
// simulator (the provider outlives the killed process, as a real one does).
func batchKillProfile(kind, url string) review.Profile {
	p := review.Profile{Name: kind + "-batch", Kind: kind, Region: "us", Model: "m-1", APIKey: "sk-test", MaxOutputTokens: 512, BaseURL: url + "/"}
	if kind == "openai" {
		p.BaseURL = url + "/v1/"
	}
	return p
}

// TestBatchKillChild is the worker process of TestBatchKill9; it does
// nothing unless started by it. With a stage it blocks the batch lane at
// that stage, says so in a marker file and waits to be killed; without one
// it runs until the batch is done and its reviews are final, then stops.
func TestBatchKillChild(t *testing.T) {
	dir := childDir(t, batchKillDirEnv, "TestBatchKill9")
	stage := os.Getenv(batchKillStageEnv)
	hook := func(name string) {
		if name == stage {
			_ = os.WriteFile(filepath.Join(dir, "at-"+stage), nil, 0o600)
			// Stop the whole process, not only this goroutine: the
			// lane's other jobs (the collect pass polling the same
			// chunk) would otherwise go on between the marker and the
			// parent's SIGKILL and move the chunk past the stage.
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			select {} // hold this point until SIGKILL
		}
	}
	prof := batchKillProfile(os.Getenv(batchKillKindEnv), os.Getenv(batchKillURLEnv))
	// Its own transport, whose idle connections to the parent's simulator
	// are closed before the leak check at exit.
	tr := &http.Transport{}
	prof.HTTPClient = &http.Client{Transport: tr}
	cfg, rv := batchConfig(t, dir, prof, hook)
	ctx := context.Background()
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if stage != "" {
		select {} // until killed
	}
	waitBatch(t, rv, os.Getenv(batchKillIDEnv), 60*time.Second)
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	tr.CloseIdleConnections()
}

// TestBatchKill9 is issue 15's crash case for the batch lane: a sweep of
// reviews runs against the simulator's batch API, its worker process is
// killed with SIGKILL at each stage (the provider batch submitted, seen in
// progress, its results downloaded, its items partly delivered), against
// each provider's batch API, and a
// restarted worker finishes it. Every finding is published exactly once,
// every review aggregated once, the provider got exactly one batch, and
// every chunk's reconciliation accounts for all its items.
func TestBatchKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stage, kind string
		// extract sends a manifest of extraction items instead of reviews.
		extract bool
	}{
		// A review sweep: every stage against each provider's batch API.
		{batchlane.StageSubmitted, "openai", false},
		{batchlane.StageSubmitted, "anthropic", false},
		{batchlane.StageInProgress, "openai", false},
		{batchlane.StageInProgress, "anthropic", false},
		{batchlane.StageDownloaded, "openai", false},
		{batchlane.StageDownloaded, "anthropic", false},
		{batchlane.StagePartlyDelivered, "openai", false},
		{batchlane.StagePartlyDelivered, "anthropic", false},
		// An extraction manifest: the two stages whose writes differ from
		// a review's (no review job; the result is on the item).
		{batchlane.StageSubmitted, "anthropic", true},
		{batchlane.StagePartlyDelivered, "openai", true},
	} {
		name := tc.stage + "-" + tc.kind
		if tc.extract {
			name += "-extraction"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			// Long enough that a poll sees the batch running, however
			// loaded the machine.
			sim, prof := batchSimFor(t, tc.kind, nil, 3*time.Second)
			// Submit, then close the client: the workers are the children.
			cfg, rv := batchConfig(t, dir, prof, nil)
			c, err := ratelane.NewClient(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			const n = 6
			req := review.BatchRequest{Region: "us", Tenant: "acme"}
			for i := range n {
				if tc.extract {
					req.Extractions = append(req.Extractions, review.BatchExtraction{ID: fmt.Sprintf("x%d", i), Template: "extract",
						Input: fmt.Sprintf("invoice %d from ACME", i), Schema: json.RawMessage(invoiceSchema)})
					continue
				}
				req.Reviews = append(req.Reviews, review.BatchReview{Repo: "acme/app", Change: fmt.Sprint(i), Diff: []byte(batchDiff(i))})
			}
			st, err := rv.SubmitBatch(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			child := func(stage string) *exec.Cmd {
				cmd := exec.Command(exe, "-test.run", "^TestBatchKillChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), batchKillDirEnv+"="+dir, batchKillURLEnv+"="+sim.URL(), batchKillKindEnv+"="+tc.kind,
					batchKillStageEnv+"="+stage, batchKillIDEnv+"="+st.ID)
				return cmd
			}
			// The first worker reaches the stage and is killed there.
			cmd := child(tc.stage)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Killed in any case, so that a worker that never reaches the
			// stage does not outlive the failed test.
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			marker := filepath.Join(dir, "at-"+tc.stage)
			testkit.Eventually(t, 60*time.Second, "the worker to reach "+tc.stage, func() error {
				_, err := os.Stat(marker)
				return err
			})
			_ = cmd.Process.Signal(syscall.SIGKILL)
			if err := cmd.Wait(); err == nil {
				t.Fatal("the killed worker exited cleanly")
			}
			// The kill landed where it was meant to: what the store holds.
			cfg, rv = batchConfig(t, dir, prof, nil)
			c, err = ratelane.NewClient(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			mid, err := rv.GetBatch(ctx, "us", st.ID)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			wantChunk, wantCounts := map[string]string{
				batchlane.StageSubmitted: "submitted", batchlane.StageInProgress: "in_progress",
				batchlane.StageDownloaded: "results_ready", batchlane.StagePartlyDelivered: "results_ready",
			}[tc.stage], store.BatchCounts{Total: n, Submitted: n}
			if tc.stage == batchlane.StagePartlyDelivered {
				// The first group was written, and no more.
				wantCounts = store.BatchCounts{Total: n, Submitted: n - batchSettleGroup, Succeeded: batchSettleGroup}
			}
			if len(mid.Chunks) != 1 || mid.Chunks[0].State != wantChunk || mid.Counts != wantCounts {
				t.Fatalf("after the kill at %s: chunks %+v, counts %+v; want one %s chunk and %+v", tc.stage, mid.Chunks, mid.Counts, wantChunk, wantCounts)
			}
			// A fresh worker finishes the batch.
			out, err := child("").CombinedOutput()
			if err != nil {
				t.Fatalf("second worker: %v\n%s", err, out)
			}
			cfg, rv = batchConfig(t, dir, prof, nil)
			c, err = ratelane.NewClient(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := rv.GetBatch(ctx, "us", st.ID)
			if err != nil {
				t.Fatal(err)
			}
			if s.State != store.BatchDone {
				t.Fatalf("batch is %s after the second worker", s.State)
			}
			if tc.extract {
				checkExtractions(t, rv, s, n)
			} else {
				checkBatch(t, c, rv, s, n)
			}
			stats := sim.Stats()
			if created := stats.OpenAIBatches + stats.AnthropicBatches; created != 1 || len(s.Chunks) != 1 {
				t.Fatalf("%d provider batches created for %d chunks, want exactly 1", created, len(s.Chunks))
			}
		})
	}
}
