package ratelane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/review/batchlane"
	"github.com/ratelane/ratelane/internal/review/reviewapi"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
	"github.com/ratelane/ratelane/review"
)

// invoiceSchema is an extraction test's schema: closed, every property
// required, as both providers' structured outputs want.
const invoiceSchema = `{"type":"object","properties":{"vendor":{"type":"string","minLength":1},` +
	`"total":{"type":"number","minimum":0},"currency":{"type":"string","enum":["EUR","USD"]}},` +
	`"required":["vendor","total","currency"],"additionalProperties":false}`

// extractionAnswer is the simulated model of the extraction tests: an
// instance of the request's schema (batchsim.SchemaResponder) when the
// request carries the invoice schema as structured output and its system
// prompt is the template's, prose otherwise (which validation refuses), so
// the tests fail if the lane stops sending either.
func extractionAnswer(r upstream.LLMRequest) string {
	if !sameJSON(r.Schema, []byte(invoiceSchema)) || !strings.Contains(r.System, "Extract from the input") {
		return "The vendor is ACME and the total is 12 EUR."
	}
	return batchsim.SchemaResponder(r)
}

// extractionSim starts the batch simulator with a short completion window
// (so that an item that never runs expires in seconds) and fault.
func extractionSim(t *testing.T, kind string, fault func(batchsim.FaultRequest) batchsim.Fault) (*batchsim.Server, review.Profile) {
	t.Helper()
	return simWith(t, kind, batchsim.Config{ValidateFor: 50 * time.Millisecond, ProcessFor: 300 * time.Millisecond,
		FinalizeFor: 50 * time.Millisecond, CancelFor: 50 * time.Millisecond, Window: 2 * time.Second,
		Responder: extractionAnswer, Fault: fault})
}

// TestBatchExtractionEndToEnd sends a manifest of generic extraction items
// through each provider's simulated batch API: valid answers are published
// once on their items; an answer that fails its schema once is requeued and
// succeeds; one that always fails is quarantined (failed,
// attempts_exhausted:invalid_output:schema, nothing published); an item
// that expires is requeued and succeeds. Every provider batch's
// reconciliation accounts for all its items, and neither the input nor the
// schema appears in the logs.
func TestBatchExtractionEndToEnd(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"openai", "anthropic"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sim, prof := extractionSim(t, kind, func(r batchsim.FaultRequest) batchsim.Fault {
				switch {
				case r.CustomID == "inv-bad-once" && r.Attempt == 1, r.CustomID == "inv-bad":
					return batchsim.FaultBadOutput
				case r.CustomID == "inv-expires" && r.Attempt == 1:
					return batchsim.FaultExpire
				}
				return batchsim.FaultNone
			})
			cfg, rv := batchConfig(t, t.TempDir(), prof, nil)
			var logs testkit.Buffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c := startClient(t, cfg)
			ids := []string{"inv-0", "inv-1", "inv-bad-once", "inv-bad", "inv-expires"}
			req := review.BatchRequest{Region: "us", Tenant: "acme"}
			for i, id := range ids {
				req.Extractions = append(req.Extractions, review.BatchExtraction{ID: id, Template: "extract",
					Input: fmt.Sprintf("SECRET-INPUT-%d: invoice from ACME, total 12.50 EUR", i), Schema: json.RawMessage(invoiceSchema)})
			}
			st, err := rv.SubmitBatch(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if st.Summary.Extractions != len(ids) || st.Summary.Items != len(ids) || st.Summary.Reviews != 0 || st.Tenant != "acme" {
				t.Fatalf("submitted %+v", st.Summary)
			}
			s := waitBatch(t, rv, st.ID, 60*time.Second)
			if want := (store.BatchCounts{Total: len(ids), Succeeded: len(ids) - 1, Failed: 1}); s.Counts != want {
				t.Fatalf("counts %+v, want %+v", s.Counts, want)
			}
			items, err := rv.BatchItems(ctx, "us", st.ID, "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			want := `{"currency":"EUR","total":0,"vendor":"sim"}` // batchsim.Example of invoiceSchema
			for _, it := range items {
				attempts := map[string]int{"inv-bad-once": 2, "inv-expires": 2, "inv-bad": 3}[it.CustomID]
				if attempts == 0 {
					attempts = 1
				}
				if it.Attempts != attempts {
					t.Errorf("item %s took %d attempts, want %d", it.CustomID, it.Attempts, attempts)
				}
				if it.CustomID == "inv-bad" {
					if it.State != store.ItemFailed || it.Reason != "attempts_exhausted:invalid_output:schema" || it.Result != nil {
						t.Errorf("invalid item %s: state %s reason %q result %v, want failed and quarantined", it.CustomID, it.State, it.Reason, it.Result)
					}
					continue
				}
				if it.State != store.ItemSucceeded || it.Result == nil || string(it.Result.Output) != want || it.Result.Provider != prof.Name ||
					it.Result.OutputTokens == 0 || it.Review != "" {
					t.Fatalf("item %s: %+v (result %+v), want succeeded with %s", it.CustomID, it, it.Result, want)
				}
			}
			requeued := 0
			for _, ch := range s.Chunks {
				sum := ch.Summary
				if ch.State != string(llmbatch.StateReconciled) || sum == nil {
					t.Fatalf("chunk %s is %s", ch.Key, ch.State)
				}
				if got := sum.Succeeded + sum.Failed + sum.Canceled + sum.Requeued; got != ch.Items || sum.Foreign != 0 || sum.Duplicates != 0 {
					t.Fatalf("chunk %s: summary %+v does not account for its %d items", ch.Key, sum, ch.Items)
				}
				requeued += sum.Requeued
			}
			if requeued == 0 {
				t.Errorf("no chunk requeued the expired item: %+v", s.Chunks)
			}
			if st := sim.Stats(); st.Structured < len(ids) {
				t.Errorf("%d structured requests, want at least %d", st.Structured, len(ids))
			}
			for _, kind := range []string{review.KindBatchSubmit, review.KindBatchCollect} {
				waitDriver(t, c, kind)
			}
			if out := logs.String(); strings.Contains(out, "SECRET-INPUT") || strings.Contains(out, "minLength") {
				t.Errorf("the logs show an item's input or schema")
			}
		})
	}
}

// TestBatchExtractionRefused: a manifest with a bad extraction item is
// refused whole, naming the item and field, before anything is stored.
func TestBatchExtractionRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, prof := extractionSim(t, "openai", nil)
	_, rv := startBatchClient(t, prof)
	ok := review.BatchExtraction{ID: "a", Input: "x", Template: "extract", Schema: json.RawMessage(invoiceSchema)}
	for name, tc := range map[string]struct {
		x     review.BatchExtraction
		field string
	}{
		"id":         {review.BatchExtraction{ID: "a b", Input: "x", Template: "extract", Schema: ok.Schema}, "extractions[1].id"},
		"input":      {review.BatchExtraction{ID: "b", Template: "extract", Schema: ok.Schema}, "extractions[1].input"},
		"big input":  {review.BatchExtraction{ID: "b", Input: strings.Repeat("x", 256<<10+1), Template: "extract", Schema: ok.Schema}, "extractions[1].input"},
		"both":       {review.BatchExtraction{ID: "b", Input: "x", Template: "extract", Instruction: "do", Schema: ok.Schema}, "extractions[1].instruction"},
		"template":   {review.BatchExtraction{ID: "b", Input: "x", Template: "poem", Schema: ok.Schema}, "extractions[1].template"},
		"schema":     {review.BatchExtraction{ID: "b", Input: "x", Template: "extract", Schema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"strin"}}}`)}, "extractions[1].schema"},
		"root":       {review.BatchExtraction{ID: "b", Input: "x", Template: "extract", Schema: json.RawMessage(`{"type":"array"}`)}, "extractions[1].schema"},
		"remote ref": {review.BatchExtraction{ID: "b", Input: "x", Template: "extract", Schema: json.RawMessage(`{"type":"object","$ref":"file:///etc/passwd"}`)}, "extractions[1].schema"},
		"duplicate":  {review.BatchExtraction{ID: "a", Input: "x", Template: "extract", Schema: ok.Schema}, "extractions[1].id"},
		// Valid JSON Schemas no provider request could carry, or no answer
		// could satisfy: refused now, not failed or quarantined later.
		"open object": {review.BatchExtraction{ID: "b", Input: "x", Template: "extract",
			Schema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`)}, "extractions[1].schema"},
		"optional property": {review.BatchExtraction{ID: "b", Input: "x", Template: "extract",
			Schema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`)}, "extractions[1].schema"},
		"unsatisfiable": {review.BatchExtraction{ID: "b", Input: "x", Template: "extract",
			Schema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","enum":[1]}},"required":["a"],"additionalProperties":false}`)}, "extractions[1].schema"},
	} {
		_, err := rv.SubmitBatch(ctx, review.BatchRequest{Region: "us", Extractions: []review.BatchExtraction{ok, tc.x}})
		var in *reviewapi.InputError
		if !errors.As(err, &in) || in.Field != tc.field {
			t.Errorf("%s: %v, want an input error on %s", name, err, tc.field)
		}
	}
	bs, err := rv.ListBatches(ctx, "us", review.BatchListParams{})
	if err != nil || len(bs) != 0 {
		t.Fatalf("batches after refusals: %v, %v", bs, err)
	}
}

// TestBatchCreate429PausesSubmitKey: a 429 on a provider batch create
// pauses the batch's submit key for every node (its shared pause, as a
// job's 429 pauses its key), not only the chunk, so the next manifest's
// intake predicts the wait.
func TestBatchCreate429PausesSubmitKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim, prof := extractionSim(t, "anthropic", nil)
	sim.RejectCreates(batchsim.ProviderAnthropic, 1, time.Hour)
	c, rv := startBatchClient(t, prof)
	req := review.BatchRequest{Region: "us", Extractions: []review.BatchExtraction{{ID: "a", Input: "x", Template: "extract",
		Schema: json.RawMessage(invoiceSchema)}}}
	st, err := rv.SubmitBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	key := batchlane.SubmitKey(prof)
	testkit.Eventually(t, testkit.Timeout, "the provider to refuse the chunk's create", func() error {
		s, err := rv.GetBatch(ctx, "us", st.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Chunks) == 1 && s.Chunks[0].Refusals == 1 {
			return nil
		}
		return fmt.Errorf("chunks %+v", s.Chunks)
	})
	// The pause is written with the pass's outcome, right after the chunk.
	var paused time.Time
	testkit.Eventually(t, testkit.Timeout, "submit key "+key+" to be paused", func() error {
		ls, err := c.Limits(ctx, "us")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Name == key && !l.PausedUntil.IsZero() {
				paused = l.PausedUntil
				return nil
			}
		}
		return fmt.Errorf("limits %+v", ls)
	})
	if paused.Before(time.Now().Add(30 * time.Minute)) {
		t.Fatalf("submit key %s paused until %v, want about an hour (the create's Retry-After)", key, paused)
	}
	req.OnOverload = "queue"
	next, err := rv.SubmitBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if in := next.Summary.Intake; in == nil || in.SubmitKey != key || in.SubmitWaitSeconds < 30*60 {
		t.Fatalf("the next manifest's intake %+v does not wait for the paused submit key", in)
	}
}

// checkExtractions checks the end state of an extraction manifest of n
// items that all succeeded: each published once with the schema's
// instance after one provider batch, and every chunk's reconciliation
// accounting for all its items.
func checkExtractions(t *testing.T, rv *review.Plugin, s review.BatchStatus, n int) {
	t.Helper()
	if s.Counts != (store.BatchCounts{Total: n, Succeeded: n}) {
		t.Fatalf("counts %+v, want %d succeeded", s.Counts, n)
	}
	items, err := rv.BatchItems(context.Background(), "us", s.ID, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Result == nil || string(it.Result.Output) != `{"currency":"EUR","total":0,"vendor":"sim"}` || it.Attempts != 1 {
			t.Fatalf("item %s: %+v (result %+v)", it.CustomID, it, it.Result)
		}
	}
	for _, ch := range s.Chunks {
		sum := ch.Summary
		if ch.State != string(llmbatch.StateReconciled) || sum == nil || sum.Succeeded != ch.Items || sum.Foreign != 0 || sum.Duplicates != 0 {
			t.Fatalf("chunk %s is %s with %+v", ch.Key, ch.State, sum)
		}
	}
}

// TestBatchLearnedTurnaround: once the lane's recent provider batches of a
// profile hold batchlane.MinTurnaroundSamples turnarounds, the intake
// predicts with their median (seconds here) instead of the configured
// turnaround (the default hour).
func TestBatchLearnedTurnaround(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, prof := extractionSim(t, "openai", nil)
	_, rv := startBatchClient(t, prof)
	req := review.BatchRequest{Region: "us", Extractions: []review.BatchExtraction{{ID: "a", Input: "x", Template: "extract",
		Schema: json.RawMessage(invoiceSchema)}}}
	var ids []string
	for range batchlane.MinTurnaroundSamples {
		st, err := rv.SubmitBatch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if in := st.Summary.Intake; in.TurnaroundSamples != 0 || in.TurnaroundSeconds != batchlane.DefaultMinTurnaround.Seconds() {
			t.Fatalf("before any batch ended, intake %+v; want the configured turnaround", in)
		}
		ids = append(ids, st.ID)
	}
	for _, id := range ids {
		waitBatch(t, rv, id, 60*time.Second)
	}
	st, err := rv.SubmitBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if in := st.Summary.Intake; in.TurnaroundSamples != batchlane.MinTurnaroundSamples || in.TurnaroundSeconds <= 0 || in.TurnaroundSeconds > 120 {
		t.Fatalf("after %d batches, intake %+v; want their median turnaround (seconds)", len(ids), in)
	}
}

// TestBatchExtractionSchemaProblem: over HTTP, a manifest whose schema
// breaks the providers' structured-output rules, or that no answer could
// satisfy, is refused at POST /v1/batches with a problem+json naming the
// item's schema and saying why, and nothing is stored; the same manifest
// with the schema fixed is accepted.
func TestBatchExtractionSchemaProblem(t *testing.T) {
	t.Parallel()
	_, prof := extractionSim(t, "anthropic", nil)
	url := intakeAPI(t, prof)
	manifest := func(schema string) map[string]any {
		return map[string]any{"region": "us", "extractions": []map[string]any{
			{"id": "ok", "input": "x", "template": "extract", "schema": json.RawMessage(invoiceSchema)},
			{"id": "bad", "input": "x", "template": "classify", "schema": json.RawMessage(schema)}}}
	}
	for name, tc := range map[string]struct{ schema, why string }{
		"open object": {`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
			"additionalProperties must be supplied and false"},
		"open nested object": {`{"type":"object","properties":{"a":{"type":"object","properties":{}}},"required":["a"],"additionalProperties":false}`,
			"schema.properties.a: additionalProperties"},
		"optional property": {`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`,
			"every property in strict mode"},
		"no value of the type": {`{"type":"object","properties":{"a":{"type":"string","enum":[1]}},"required":["a"],"additionalProperties":false}`,
			"cannot be satisfied"},
		"empty range": {`{"type":"object","properties":{"n":{"type":"integer","minimum":3,"maximum":2}},"required":["n"],"additionalProperties":false}`,
			"minimum 3 is above maximum 2"},
	} {
		resp, raw := callJSON(t, "POST", url, "/v1/batches", intakeAdminKey, manifest(tc.schema), nil)
		var p struct {
			Type, Detail string
			Errors       []struct{ Field, Message string }
		}
		_ = json.Unmarshal(raw, &p)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") ||
			len(p.Errors) != 1 || p.Errors[0].Field != "extractions[1].schema" || !strings.Contains(string(raw), tc.why) {
			t.Errorf("%s: %d %s: %s; want a 400 problem+json on extractions[1].schema saying %q", name, resp.StatusCode,
				resp.Header.Get("Content-Type"), raw, tc.why)
		}
	}
	var list struct {
		Batches []json.RawMessage `json:"batches"`
	}
	resp, raw := callJSON(t, "GET", url, "/v1/batches", intakeAdminKey, nil, nil)
	if err := json.Unmarshal(raw, &list); err != nil || resp.StatusCode != http.StatusOK || len(list.Batches) != 0 {
		t.Fatalf("batches after the refusals: %d %s", resp.StatusCode, raw)
	}
	fixed := `{"type":"object","properties":{"a":{"type":["string","null"]}},"required":["a"],"additionalProperties":false}`
	if resp, raw := callJSON(t, "POST", url, "/v1/batches", intakeAdminKey, manifest(fixed), nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the manifest with its schema fixed: %d %s", resp.StatusCode, raw)
	}
}
