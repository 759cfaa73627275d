package llmbatch

import (
	"bytes"
	"encoding/json"
	"reflect"
	"runtime/debug"
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
		sdk, err := sdkCreateBody([]Item{it})
		if err != nil {
			t.Fatal(err)
		}
		if body, err := a.createBody([]Item{it}); err != nil || !bytes.Equal(body, sdk) {
			t.Fatalf("create body (%v)\n%s\nthe SDK's\n%s", err, body, sdk)
		}
	})
}

// sdkCreateBody is the create body the SDK writes for items: its
// params' MarshalJSON, which its request builder sends as it is.
func sdkCreateBody(items []Item) ([]byte, error) {
	reqs := make([]anthropic.MessageBatchNewParamsRequest, len(items))
	for i, it := range items {
		reqs[i] = anthropicRequest(it)
	}
	return anthropic.MessageBatchNewParams{Requests: reqs}.MarshalJSON()
}

// TestAnthropicCreateBodyMatchesTheSDK: Create sends, through the SDK's
// client, the very bytes the SDK sent for the same items from its own
// types (every escape, every omitted field, several requests), on the
// same path with the same content type; and the body is written in its
// one buffer, sized exactly (no growth).
func TestAnthropicCreateBodyMatchesTheSDK(t *testing.T) {
	t.Parallel()
	srv, got := captureServer(t, `{"id":"msgbatch_1","type":"message_batch","processing_status":"in_progress"}`)
	a := NewAnthropic(Config{APIKey: "k", BaseURL: srv.URL + "/"})
	cases := anthropicSizeCases(t)
	for _, items := range [][]Item{cases, cases[:1], cases[2:3]} {
		reqs := make([]anthropic.MessageBatchNewParamsRequest, len(items))
		for i, it := range items {
			reqs[i] = anthropicRequest(it)
		}
		if _, err := a.client.Messages.Batches.New(t.Context(), anthropic.MessageBatchNewParams{Requests: reqs}); err != nil {
			t.Fatal(err)
		}
		sdk := <-got
		if id, err := a.Create(t.Context(), "k", "", items); err != nil || id != "msgbatch_1" {
			t.Fatalf("Create = %q, %v", id, err)
		}
		ours := <-got
		if ours.path != sdk.path || ours.contentType != sdk.contentType {
			t.Errorf("Create sent %s (%s); the SDK sent %s (%s)", ours.path, ours.contentType, sdk.path, sdk.contentType)
		}
		var x, y any
		if err := json.Unmarshal(ours.body, &x); err != nil {
			t.Fatalf("Create's body does not decode: %v", err)
		}
		if err := json.Unmarshal(sdk.body, &y); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%d items: Create's body decodes to another value than the SDK's", len(items))
		}
		if !bytes.Equal(ours.body, sdk.body) {
			t.Errorf("%d items: Create sent\n%s\nthe SDK sent\n%s", len(items), ours.body, sdk.body)
		}
		body, err := a.createBody(items)
		if err != nil || cap(body) != len(body) {
			t.Errorf("%d items: body of %d bytes in a buffer of %d (%v); want it sized exactly",
				len(items), len(body), cap(body), err)
		}
	}
}

// TestAnthropicCreateBodyAllocations: the create body of a sweep's 100
// review items allocates no more than one item's: its buffer and encoder,
// nothing per request (the SDK's types: ~139 allocations per item). The
// collector is off while it counts: a collection empties encoding/json's
// pool of encoders, and its next encoder and buffer are allocated again
// whatever the number of requests.
func TestAnthropicCreateBodyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation bound: -race drops sync.Pool items, so encoding/json's encoder state is allocated per request")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	a := NewAnthropic(Config{APIKey: "unused"})
	its := sweepItems(t)
	allocs := func(items []Item) float64 {
		return testing.AllocsPerRun(20, func() {
			if _, err := a.createBody(items); err != nil {
				t.Fatal(err)
			}
		})
	}
	if one, all := allocs(its[:1]), allocs(its); all > one {
		t.Fatalf("create body: %.0f allocations for %d items, %.0f for one; want none per item", all, len(its), one)
	}
}
