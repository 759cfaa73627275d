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

// lineCases are items whose lines exercise every escape and every
// omitted field.
func lineCases(t testing.TB) []Item {
	review := reviewItem(t)
	plain := review
	plain.Request.Format, plain.Request.System = nil, ""
	odd := Item{CustomID: "odd", Request: Request{Model: "m", System: "<sys> & \u2028\u2029", Prompt: "bad \xff utf-8 \x00 \"q\" \\ \t \b\f\x7f\x1f \xe2\x80 é",
		MaxTokens: 1, Format: &Format{Name: "n", Schema: map[string]any{"z": []any{1.5, nil, true, "<>"}, "a": map[string]any{"y": 1e21, "b": ""}}}}}
	noModel := plain
	noModel.Request.Model = ""
	emptySchema := plain
	emptySchema.Request.Format = &Format{Name: "e", Schema: map[string]any{}}
	nilSchema := plain
	nilSchema.Request.Format = &Format{Name: "e"}
	return []Item{review, plain, odd, noModel, emptySchema, nilSchema}
}

// TestOpenAILineMatchesTheSDK: the one-pass encoder writes exactly the
// bytes the SDK's types did (HTML-escaped, keys in the SDK's order, the
// schema's sorted, invalid UTF-8 replaced), EncodedSize is their length,
// and jsonl is the lines each ended by a newline.
func TestOpenAILineMatchesTheSDK(t *testing.T) {
	t.Parallel()
	cases := lineCases(t)
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
// upload; encoded in one pass, EncodedSize was 4 allocations and 490 B,
// and counted from the fields (session 40) it is none; a 100-item file is
// 306 and 1.3 MB (the buffer). The file's bound leaves room for -race's
// own allocations.
func TestOpenAIEncodingAllocations(t *testing.T) {
	o := NewOpenAI(Config{APIKey: "unused"})
	it := reviewItem(t)
	if n := testing.AllocsPerRun(50, func() {
		if _, err := o.EncodedSize(it); err != nil {
			t.Fatal(err)
		}
	}); n > 0 {
		t.Fatalf("EncodedSize: %.0f allocations per review item, want none (4 encoding the line, 151 with the SDK's types)", n)
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

// FuzzOpenAILineSize: for any item, EncodedSize (counted from the
// fields, not encoded) is the length of the line encodeLine writes,
// without its newline.
func FuzzOpenAILineSize(f *testing.F) {
	for _, it := range lineCases(f) {
		name := ""
		if it.Request.Format != nil {
			name = it.Request.Format.Name
		}
		f.Add(it.CustomID, it.Request.Model, it.Request.System, it.Request.Prompt, it.Request.MaxTokens, name)
	}
	o := NewOpenAI(Config{APIKey: "unused"})
	schema := map[string]any{"type": "object", "description": "<a & b>\u2028"}
	f.Fuzz(func(t *testing.T, id, model, system, prompt string, maxTokens int64, format string) {
		it := Item{CustomID: id, Request: Request{Model: model, System: system, Prompt: prompt, MaxTokens: maxTokens}}
		if format != "" {
			it.Request.Format = &Format{Name: format, Schema: schema}
		}
		var line bytes.Buffer
		if err := o.encodeLine(json.NewEncoder(&line), it); err != nil {
			t.Fatal(err)
		}
		if n, err := o.EncodedSize(it); err != nil || n != int64(line.Len()-1) {
			t.Fatalf("EncodedSize = %d, %v; the line is %d bytes: %q", n, err, line.Len()-1, line.Bytes())
		}
	})
}

// TestOpenAIUploadFileIsTheSizedLines: the upload's file part is the
// SDK's lines byte for byte, exactly as long as the items' EncodedSize
// and separators (what Split counted) and fileSize (what the body's
// buffer is grown by before the encoding).
func TestOpenAIUploadFileIsTheSizedLines(t *testing.T) {
	t.Parallel()
	o := NewOpenAI(Config{APIKey: "unused"})
	cases := lineCases(t)
	var want bytes.Buffer
	var sized int64
	for _, it := range cases {
		ref, err := sdkLine(it)
		if err != nil {
			t.Fatal(err)
		}
		want.Write(ref)
		want.WriteByte('\n')
		n, err := o.EncodedSize(it)
		if err != nil {
			t.Fatal(err)
		}
		sized += n + OpenAILimits.SepBytes
	}
	body, contentType, err := o.uploadBody(t.Context(), "k", cases)
	if err != nil {
		t.Fatal(err)
	}
	parts := formParts(t, contentType, body.Bytes())
	if len(parts) != 2 || parts[0].name != "file" || parts[0].body != want.String() {
		t.Fatalf("file part %+v, want the SDK's lines %q", parts, want.String())
	}
	if sized != int64(want.Len()) || o.fileSize(cases) != want.Len() {
		t.Fatalf("sized %d, fileSize %d; the file is %d bytes", sized, o.fileSize(cases), want.Len())
	}
}
