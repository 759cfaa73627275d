package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

// batchReviewAnswer is the simulated model's answer in the serve batch
// test: reviewAnswer when the request asked for structured output, prose
// otherwise (which validation refuses), as a model asked for free text
// might answer.
func batchReviewAnswer(r upstream.LLMRequest) string {
	if r.Schema == nil {
		return "The diff adds a TODO on line 3."
	}
	return reviewAnswer
}

// startBatchSim starts the batch API simulator of one provider with fast
// status changes (real time: serve and the simulator share the clock) and
// the one key it accepts.
func startBatchSim(t *testing.T, key string) *batchsim.Server {
	t.Helper()
	sim, err := batchsim.New(batchsim.Config{APIKey: key, ValidateFor: 50 * time.Millisecond, ProcessFor: 300 * time.Millisecond,
		FinalizeFor: 50 * time.Millisecond, CancelFor: 50 * time.Millisecond, Responder: batchReviewAnswer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	return sim
}

// TestServeBatches runs ratelane serve with a config whose providers
// section names the batch simulator as an openai provider (key from a
// file) and an anthropic provider (key from the environment), and sends a
// manifest to each through POST /v1/batches: the provider batch is
// submitted (with the findings schema as structured output), its results
// collected and validated, every review published once with the model's
// finding, and GET /v1/batches/{id} reconciles every item: all succeeded,
// every provider batch's summary accounting for all its items, the
// intake's prediction shown. No key appears in any log, answer, metric or
// page. Not parallel: it sets environment variables.
func TestServeBatches(t *testing.T) {
	openaiSim, anthropicSim := startBatchSim(t, serveOpenAIKey), startBatchSim(t, serveAnthropicKey)
	dir := t.TempDir()
	keyFile := serveKeys(t, dir)
	cfg := map[string]any{
		"data":       filepath.Join(dir, "data"),
		"regions":    []map[string]any{{"Name": "us", "Synchronous": "NORMAL"}},
		"workers":    4,
		"batch_lane": map[string]any{"poll_interval": "100ms", "turnaround": "1m"},
		"providers": map[string]any{"us": []map[string]any{
			{"name": "us-openai", "kind": "openai", "region": "us", "base_url": openaiSim.URL() + "/v1",
				"model": "gpt-4o-mini", "api_key_file": keyFile},
			{"name": "us-claude", "kind": "anthropic", "region": "us", "endpoint": anthropicSim.URL(),
				"model": "claude-sonnet-4-5", "api_key_env": "TEST_ANTHROPIC_KEY", "batch_queue_requests": 1000},
		}},
	}
	n := startServe(t, dir, cfg)
	defer n.stop()

	const reviews = 3
	for _, prov := range []struct {
		name string
		sim  *batchsim.Server
	}{{"us-openai", openaiSim}, {"us-claude", anthropicSim}} {
		var manifest []map[string]any
		for i := range reviews {
			manifest = append(manifest, map[string]any{"repo": "acme/app", "change": fmt.Sprint(i), "diff": reviewDiff})
		}
		code, body := n.call("POST", "/v1/batches", map[string]any{"region": "us", "provider": prov.name, "reviews": manifest})
		var b serveBatch
		n.decode(body, &b)
		if code != 202 || b.Provider != prov.name || b.Summary.Items != reviews || b.Summary.Intake == nil || b.Summary.Intake.Rounds != 1 {
			t.Fatalf("POST /v1/batches provider %s: %d\n%s", prov.name, code, body)
		}
		testkit.Eventually(t, 60*time.Second, "batch "+b.ID+" of "+prov.name+" to be done", func() error {
			_, body := n.call("GET", "/v1/batches/"+b.ID+"?region=us", nil)
			n.decode(body, &b)
			if b.State != "done" {
				return fmt.Errorf("batch is %s: %+v", b.State, b.Counts)
			}
			return nil
		})
		checkServedBatch(t, n, b, reviews)
		st := prov.sim.Stats()
		if st.OpenAIBatches+st.AnthropicBatches != 1 || st.Structured != reviews {
			t.Errorf("%s: simulator stats %+v, want one provider batch of %d structured requests", prov.name, st, reviews)
		}
	}
	n.checkNoKeys(t, serveOpenAIKey, serveAnthropicKey)
}

// serveBatch is the part of a batch answer TestServeBatches reads.
type serveBatch struct {
	ID       string `json:"id"`
	Provider string `json:"provider"`
	State    string `json:"state"`
	Counts   struct {
		Total, Pending, Submitted, Succeeded, Failed, Canceled int
	} `json:"counts"`
	Summary struct {
		Items     int      `json:"items"`
		ReviewIDs []string `json:"review_ids"`
		Intake    *struct {
			Rounds int64 `json:"rounds"`
		} `json:"intake"`
	} `json:"summary"`
	Chunks []struct {
		Key     string `json:"key"`
		State   string `json:"state"`
		Items   int    `json:"items"`
		Summary *struct {
			Succeeded, Failed, Canceled, Requeued, Foreign, Duplicates int
		} `json:"summary"`
	} `json:"chunks"`
	Items []struct {
		CustomID    string `json:"custom_id"`
		State       string `json:"state"`
		Disposition string `json:"disposition"`
	} `json:"items"`
}

// checkServedBatch checks a done batch through the API: zero unexplained
// items, and every review published once with the model's one finding.
func checkServedBatch(t *testing.T, n *servedNode, b serveBatch, reviews int) {
	t.Helper()
	if b.Counts.Total != reviews || b.Counts.Succeeded != reviews || len(b.Items) != reviews {
		t.Fatalf("batch %s: counts %+v and %d items, want %d succeeded", b.ID, b.Counts, len(b.Items), reviews)
	}
	for _, it := range b.Items {
		if it.State != "succeeded" || it.Disposition != "succeeded" {
			t.Errorf("item %s: %s (%s)", it.CustomID, it.State, it.Disposition)
		}
	}
	accounted := 0
	for _, c := range b.Chunks {
		s := c.Summary
		if c.State != "reconciled" || s == nil || s.Succeeded+s.Failed+s.Canceled+s.Requeued != c.Items || s.Foreign+s.Duplicates != 0 {
			t.Fatalf("provider batch %s does not reconcile: %+v", c.Key, c)
		}
		accounted += c.Items
	}
	if accounted != reviews {
		t.Fatalf("provider batches account for %d items, want %d", accounted, reviews)
	}
	for _, id := range b.Summary.ReviewIDs {
		n.waitReviewed("review "+id, id)
		var j struct {
			History []struct {
				Why string `json:"why"`
			} `json:"history"`
		}
		_, body := n.call("GET", "/v1/jobs/"+id+"?region=us", nil)
		n.decode(body, &j)
		aggregated := 0
		for _, h := range j.History {
			if strings.Contains(h.Why, "aggregated") {
				aggregated++
			}
		}
		if aggregated != 1 {
			t.Errorf("review %s was aggregated %d times, want once: %s", id, aggregated, body)
		}
	}
}
