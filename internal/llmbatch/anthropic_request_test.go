package llmbatch

import (
	"encoding/json"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
)

// anthropicSizeCases are lineCases and the fields the SDK omits or keeps
// when empty: no prompt, no custom_id, zero and negative max_tokens, a
// Format without a schema, an empty schema.
func anthropicSizeCases(t testing.TB) []Item {
	cases := lineCases(t)
	return append(cases, Item{}, Item{Request: Request{MaxTokens: -5, Format: &Format{Name: "x", Schema: map[string]any{}}}},
		Item{CustomID: "a", Request: Request{Model: "m", System: "s", Format: &Format{}}})
}

// TestAnthropicRequestSize: EncodedSize is the length of each request as
// the SDK encodes it, and the create body Create sends is those requests
// and their separators: what Split counted against the size limit.
func TestAnthropicRequestSize(t *testing.T) {
	t.Parallel()
	a := NewAnthropic(Config{APIKey: "unused"})
	cases := anthropicSizeCases(t)
	reqs := make([]anthropic.MessageBatchNewParamsRequest, len(cases))
	sum := int64(len(`{"requests":[]}`) + len(cases) - 1)
	for i, it := range cases {
		reqs[i] = anthropicRequest(it)
		ref, err := json.Marshal(reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		n, err := a.EncodedSize(it)
		if err != nil || n != int64(len(ref)) {
			t.Errorf("item %d: EncodedSize = %d, %v; the SDK's request is %d bytes: %s", i, n, err, len(ref), ref)
		}
		sum += n
	}
	body, err := json.Marshal(anthropic.MessageBatchNewParams{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(body)) != sum {
		t.Fatalf("create body %d bytes, sized %d", len(body), sum)
	}
}

// TestAnthropicSizeAllocations: sizing a review item allocates nothing
// once its Format's schema is encoded (the SDK's encoding: ~140).
func TestAnthropicSizeAllocations(t *testing.T) {
	a := NewAnthropic(Config{APIKey: "unused"})
	it := reviewItem(t)
	if n := testing.AllocsPerRun(50, func() {
		if _, err := a.EncodedSize(it); err != nil {
			t.Fatal(err)
		}
	}); n > 0 {
		t.Fatalf("EncodedSize: %.0f allocations per review item, want none", n)
	}
}

// FuzzAnthropicRequestSize: for any item, EncodedSize is the length of
// the SDK's encoding of its request.
func FuzzAnthropicRequestSize(f *testing.F) {
	for _, it := range anthropicSizeCases(f) {
		desc := ""
		if it.Request.Format != nil && it.Request.Format.Schema != nil {
			desc = "<a & b>\u2028"
		}
		f.Add(it.CustomID, it.Request.Model, it.Request.System, it.Request.Prompt, it.Request.MaxTokens, desc, it.Request.Format != nil)
	}
	a := NewAnthropic(Config{APIKey: "unused"})
	f.Fuzz(func(t *testing.T, id, model, system, prompt string, maxTokens int64, desc string, format bool) {
		it := Item{CustomID: id, Request: Request{Model: model, System: system, Prompt: prompt, MaxTokens: maxTokens}}
		if format {
			it.Request.Format = &Format{Name: "n"}
			if desc != "" {
				it.Request.Format.Schema = map[string]any{"type": "object", "description": desc, "enum": []any{desc, 1.5e300, 1e-7, nil}}
			}
		}
		ref, err := json.Marshal(anthropicRequest(it))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := a.EncodedSize(it); err != nil || n != int64(len(ref)) {
			t.Fatalf("EncodedSize = %d, %v; the SDK's request is %d bytes: %s", n, err, len(ref), ref)
		}
	})
}
