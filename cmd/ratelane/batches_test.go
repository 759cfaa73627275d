package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
	"github.com/ratelane/ratelane/review"
)

// newBatchLiveAPI is a live API whose region eu has a review profile of
// kind openai on the batch simulator, so the batch verbs run end to end.
func newBatchLiveAPI(t *testing.T) *liveAPI {
	t.Helper()
	sim, err := batchsim.New(batchsim.Config{ValidateFor: 20 * time.Millisecond, ProcessFor: 100 * time.Millisecond,
		FinalizeFor: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	p, err := review.NewProvider(review.Profile{Name: "openai", Kind: "openai", Region: "eu", Model: "m", APIKey: "sk-test",
		BaseURL: sim.URL() + "/v1/"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "eu", Synchronous: "NORMAL"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Plugins = append(cfg.Plugins, review.New(review.Config{Regions: map[string]review.RegionConfig{"eu": {
		Providers: []review.Provider{p}, SweepEvery: 50 * time.Millisecond, Batch: review.BatchConfig{PollInterval: 50 * time.Millisecond}}}}))
	_, url := serveAPI(t, cfg, liveAdminKey, true)
	return &liveAPI{url: url}
}

// TestBatchesVerbs: batches create sends two diff files as one batch, ls
// lists it, get shows its items until it is done, and cancel of a done
// batch fails with the server's 409; bad input exits non-zero with a
// message.
func TestBatchesVerbs(t *testing.T) {
	t.Parallel()
	api := newBatchLiveAPI(t)
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"one.diff", "two.diff"} {
		f := filepath.Join(dir, name)
		d := "diff --git a/" + name + ".go b/" + name + ".go\n--- a/" + name + ".go\n+++ b/" + name + ".go\n@@ -1 +1,2 @@\n package a\n+// TODO: later\n"
		if err := os.WriteFile(f, []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var created struct {
		ID      string `json:"id"`
		Summary struct {
			Reviews int `json:"reviews"`
		} `json:"summary"`
	}
	api.okJSON(t, &created, "batches", "create", "--region", "eu", "--repo", "acme/app", "--diff", files[0], "--diff", files[1])
	if created.ID == "" || created.Summary.Reviews != 2 {
		t.Fatalf("created %+v", created)
	}
	if out := api.ok(t, "batches", "ls"); !strings.Contains(out, created.ID) || !strings.Contains(out, "openai") {
		t.Fatalf("batches ls:\n%s", out)
	}
	testkit.Eventually(t, 30*time.Second, "batch "+created.ID+" to be done", func() error {
		var b struct {
			State  string `json:"state"`
			Counts struct{ Succeeded int }
		}
		api.okJSON(t, &b, "batches", "get", created.ID)
		if b.State != "done" {
			return fmt.Errorf("batch is %s", b.State)
		}
		if b.Counts.Succeeded != 2 {
			t.Fatalf("done with %d succeeded, want 2", b.Counts.Succeeded)
		}
		return nil
	})
	if out := api.ok(t, "batches", "get", created.ID); !strings.Contains(out, "r0-p0") || !strings.Contains(out, "reconciled") {
		t.Fatalf("batches get:\n%s", out)
	}
	api.fails(t, 1, []string{"409"}, "batches", "cancel", created.ID)
	api.fails(t, 1, []string{"404"}, "batches", "get", "01900000-0000-7000-8000-000000000000")
	api.fails(t, 2, []string{"--region is required"}, "batches", "create", "--diff", files[0])
	api.fails(t, 2, []string{"--diff FILE is required"}, "batches", "create", "--region", "eu")
	api.fails(t, 1, []string{"reviews[0].diff"}, "batches", "create", "--region", "eu", "--diff", "/dev/null")
	// Ten minutes is less than one provider batch's turnaround (1 h): the
	// intake refuses it on deadline, unless told to queue it anyway.
	soon := time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)
	api.fails(t, 1, []string{"400", "deadline", "idle lane"}, "batches", "create", "--region", "eu", "--diff", files[0], "--deadline", soon)
	var late struct {
		Summary struct {
			Intake struct{ Late bool } `json:"intake"`
		} `json:"summary"`
	}
	api.okJSON(t, &late, "batches", "create", "--region", "eu", "--diff", files[0], "--deadline", soon, "--on-overload", "queue")
	if !late.Summary.Intake.Late {
		t.Fatalf("--on-overload queue: intake %+v, want late", late.Summary.Intake)
	}
}
