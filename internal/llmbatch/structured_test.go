package llmbatch_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

// answerSchema is a small schema in the strict subset both providers take.
func answerSchema() map[string]any {
	return map[string]any{"type": "object", "additionalProperties": false, "required": []any{"answer"},
		"properties": map[string]any{"answer": map[string]any{"type": "string"}}}
}

// TestStructuredOutput: an item's Format goes out in each provider's
// batch wire format (OpenAI response_format json_schema strict, Anthropic
// output_config.format), which the simulator reads and hands to the model
// as the schema to answer; an item whose schema breaks the providers'
// structured-output rules (an open object) is refused per request, so it
// ends failed and its neighbours are unaffected.
func TestStructuredOutput(t *testing.T) {
	eachProvider(t, func(t *testing.T, provider string) {
		var mu sync.Mutex
		seen := map[string]string{} // prompt -> schema the model was asked for
		model := func(r upstream.LLMRequest) string {
			mu.Lock()
			defer mu.Unlock()
			seen[r.Messages[len(r.Messages)-1].Text] = string(r.Schema)
			return echo(r)
		}
		b := setup(t, provider, opts{sim: batchsim.Config{Responder: model}})
		its := items("so", 3)
		for i := range its[:2] {
			its[i].Request.Format = &llmbatch.Format{Name: "answer_v1", Schema: answerSchema()}
		}
		open := answerSchema()
		open["additionalProperties"] = true
		its[2].Request.Format = &llmbatch.Format{Name: "answer_v1", Schema: open}
		if err := llmbatch.ValidateItems(its); err != nil {
			t.Fatal(err)
		}
		s := newSink(t)
		c := b.run(t, b.driver(&journal{}, s), llmbatch.NewChunk("so-c0", provider, ids(its)), its)
		if want := (llmbatch.Summary{Succeeded: 2, Failed: 1}); *c.Summary != want {
			t.Fatalf("summary %+v, want %+v", *c.Summary, want)
		}
		want, _ := json.Marshal(answerSchema())
		for _, it := range its[:2] {
			var got any // re-encoded: the SDKs may order keys differently
			if err := json.Unmarshal([]byte(seen[it.Request.Prompt]), &got); err != nil {
				t.Fatalf("%s: the model was asked for no schema (%q)", it.CustomID, seen[it.Request.Prompt])
			}
			if g, _ := json.Marshal(got); string(g) != string(want) {
				t.Errorf("%s: schema %s, want %s", it.CustomID, g, want)
			}
		}
		if r := s.published["so-c0/so-002"]; r.Disposition != llmbatch.DispFailed || !strings.Contains(r.Reason, "invalid_request_error") {
			t.Errorf("open-object schema: %s %q, want failed as an invalid request", r.Disposition, r.Reason)
		}
		if got := b.sim.Stats().Structured; got != 2 {
			t.Errorf("simulator saw %d structured requests, want 2", got)
		}
	})
}

// TestValidateFormat: a Format needs a valid name and a schema.
func TestValidateFormat(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]*llmbatch.Format{
		"bad name":  {Name: "has space", Schema: answerSchema()},
		"no schema": {Name: "ok"},
	} {
		its := items("vf", 1)
		its[0].Request.Format = f
		if err := llmbatch.ValidateItems(its); err == nil || !strings.Contains(err.Error(), "format") {
			t.Errorf("%s: %v, want an error naming format", name, err)
		}
	}
}
