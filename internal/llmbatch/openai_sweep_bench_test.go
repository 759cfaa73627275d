package llmbatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
)

// BenchmarkOpenAISweepFile is the OpenAI batch path's own work for 100
// review items (a sweep file each), as the batch lane does it: submit
// sizes them for Split and encodes the chunk's upload body; collect
// decodes a 100-line output file of review answers. Divide by 100 for a
// file's share.
func BenchmarkOpenAISweepFile(b *testing.B) {
	o := NewOpenAI(Config{APIKey: "unused"})
	its := sweepItems(b)
	b.Run("submit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			chunks, _, err := Split(its, o.Limits(), o.EncodedSize)
			if err != nil || len(chunks) != 1 {
				b.Fatal(len(chunks), err)
			}
			if _, _, err := o.uploadBody(b.Context(), "k", chunks[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	var file bytes.Buffer
	for i := range its {
		content, _ := json.Marshal(`{"findings":[{"path":"a/b.go","line":` + fmt.Sprint(i) + `,"severity":"warning","message":"x < y && z"}]}`)
		fmt.Fprintf(&file, `{"id":"batch_req_%d","custom_id":"rev-%04d-p0","response":{"status_code":200,"request_id":"req_%d","body":`+
			`{"id":"chatcmpl-%d","object":"chat.completion","created":1733000000,"model":"gpt-4.1-mini-2025-04-14",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":1234,"completion_tokens":56,"total_tokens":1290,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},`+
			`"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},`+
			`"service_tier":"default","system_fingerprint":"fp_1"}},"error":null}`+"\n", i, i, i, i, content)
	}
	b.Run("collect", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(file.Len()))
		for b.Loop() {
			dec := json.NewDecoder(bytes.NewReader(file.Bytes()))
			n := 0
			for {
				var l resultLine
				if err := dec.Decode(&l); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					b.Fatal(err)
				}
				if r := openAIResult(l); r.Kind != KindSucceeded {
					b.Fatalf("%+v", r)
				}
				n++
			}
			if n != len(its) {
				b.Fatal(n)
			}
		}
	})
}

// sweepItems are 100 review items, a sweep file each, custom_ids as the
// batch lane makes them.
func sweepItems(tb testing.TB) []Item {
	it := reviewItem(tb)
	its := make([]Item, 100)
	for i := range its {
		its[i] = it
		its[i].CustomID = fmt.Sprintf("rev-%04d-p0", i)
	}
	return its
}
