package llmbatch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/ratelane/ratelane/internal/review/finding"
)

// sdkLine is an item's JSONL line as ratelane encoded it with the SDK's
// openai.ChatCompletionNewParams until session 23: the reference the
// one-pass encoder (encodeLine) must match byte for byte.
func sdkLine(it Item) ([]byte, error) {
	type line struct {
		CustomID string                         `json:"custom_id"`
		Method   string                         `json:"method"`
		URL      string                         `json:"url"`
		Body     openai.ChatCompletionNewParams `json:"body"`
	}
	var msgs []openai.ChatCompletionMessageParamUnion
	if it.Request.System != "" {
		msgs = append(msgs, openai.SystemMessage(it.Request.System))
	}
	msgs = append(msgs, openai.UserMessage(it.Request.Prompt))
	body := openai.ChatCompletionNewParams{Model: it.Request.Model, Messages: msgs, MaxCompletionTokens: openai.Int(it.Request.MaxTokens)}
	if f := it.Request.Format; f != nil {
		body.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: f.Name, Strict: openai.Bool(true), Schema: f.Schema}}}
	}
	return json.Marshal(line{CustomID: it.CustomID, Method: http.MethodPost, URL: "/v1/chat/completions", Body: body})
}

// reviewSchema is the findings schema a review item asks for.
func reviewSchema(t testing.TB) map[string]any {
	var schema map[string]any
	if err := json.Unmarshal(finding.StrictSchema(), &schema); err != nil {
		t.Fatal(err)
	}
	return schema
}

// reviewItem is a review-sized item: a 4 KB diff part with the findings
// schema as structured output.
func reviewItem(t testing.TB) Item {
	prompt := "Review this diff.\n" + strings.Repeat("+\tif a < b && c > d { return \"x\" } // é\n", 100)
	return Item{CustomID: "rev-0001-p0", Request: Request{Model: "gpt-4.1-mini", System: "You review code.", Prompt: prompt, MaxTokens: 2048,
		Format: &Format{Name: "review_findings_v1", Schema: reviewSchema(t)}}}
}

// TestOpenAILineMatchesTheSDK: the one-pass encoder writes exactly the
// bytes the SDK's types did (HTML-escaped, keys in the SDK's order, the
// schema's sorted, invalid UTF-8 replaced), EncodedSize is their length,
// and jsonl is the lines each ended by a newline.
func TestOpenAILineMatchesTheSDK(t *testing.T) {
	t.Parallel()
	review := reviewItem(t)
	plain := review
	plain.Request.Format, plain.Request.System = nil, ""
	odd := Item{CustomID: "odd", Request: Request{Model: "m", System: "<sys> & \u2028\u2029", Prompt: "bad \xff utf-8 \x00 \"q\" \\ \t",
		MaxTokens: 1, Format: &Format{Name: "n", Schema: map[string]any{"z": []any{1.5, nil, true, "<>"}, "a": map[string]any{"y": 1e21, "b": ""}}}}}
	noModel := plain
	noModel.Request.Model = ""
	emptySchema := plain
	emptySchema.Request.Format = &Format{Name: "e", Schema: map[string]any{}}
	nilSchema := plain
	nilSchema.Request.Format = &Format{Name: "e"}
	cases := []Item{review, plain, odd, noModel, emptySchema, nilSchema}
	o := NewOpenAI(Config{APIKey: "unused"})
	var want bytes.Buffer
	for _, it := range cases {
		ref, err := sdkLine(it)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := o.encodeLine(json.NewEncoder(&got), it); err != nil {
			t.Fatal(err)
		}
		if got.String() != string(ref)+"\n" {
			t.Fatalf("item %s:\n got %s\nwant %s", it.CustomID, got.Bytes(), ref)
		}
		if n, err := o.EncodedSize(it); err != nil || n != int64(len(ref)) {
			t.Fatalf("item %s: EncodedSize = %d, %v; want %d", it.CustomID, n, err, len(ref))
		}
		want.Write(ref)
		want.WriteByte('\n')
	}
	buf, err := o.jsonl(t.Context(), cases)
	if err != nil || buf.String() != want.String() {
		t.Fatalf("jsonl = %q, %v; want %q", buf, err, want.String())
	}
}

// TestOpenAIEncodingAllocations pins what sizing and encoding a
// review-sized item allocate. With the SDK's types (until session 23) a
// line was 151 allocations and 46 KB, for EncodedSize and again for the
// upload; encoded in one pass, EncodedSize is 4 allocations and 490 B
// (it keeps nothing) and a 100-item file 306 and 1.3 MB (the buffer);
// the bounds leave room for -race's own allocations.
func TestOpenAIEncodingAllocations(t *testing.T) {
	o := NewOpenAI(Config{APIKey: "unused"})
	it := reviewItem(t)
	if n := testing.AllocsPerRun(50, func() {
		if _, err := o.EncodedSize(it); err != nil {
			t.Fatal(err)
		}
	}); n > 20 {
		t.Fatalf("EncodedSize: %.0f allocations per review item, want at most 20 (151 with the SDK's types)", n)
	}
	its := make([]Item, 100)
	for i := range its {
		its[i] = it
	}
	if n := testing.AllocsPerRun(5, func() {
		if _, err := o.jsonl(context.Background(), its); err != nil {
			t.Fatal(err)
		}
	}); n > 20*100 {
		t.Fatalf("jsonl: %.0f allocations for 100 review items, want at most 2,000 (15,100 with the SDK's types)", n)
	}
}

// BenchmarkOpenAIEncode sizes one review-sized item (Split's cost per
// item) and encodes a 100-item upload file.
func BenchmarkOpenAIEncode(b *testing.B) {
	o := NewOpenAI(Config{APIKey: "unused"})
	it := reviewItem(b)
	b.Run("EncodedSize", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := o.EncodedSize(it); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SDKLine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := sdkLine(it); err != nil {
				b.Fatal(err)
			}
		}
	})
	its := make([]Item, 100)
	for i := range its {
		its[i] = it
	}
	b.Run("JSONL100", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := o.jsonl(context.Background(), its); err != nil {
				b.Fatal(err)
			}
		}
	})
}
