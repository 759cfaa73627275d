package llmbatch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkAnthropicSweepFile is the Anthropic batch path's own work for
// 100 review items (a sweep file each), as the batch lane does it: submit
// sizes them for Split and encodes the create body as Create does
// (createBody; until session 42 the SDK's types did, measured here
// through json.Marshal); collect decodes a 100-line results stream of
// review answers with every field a real result has. Divide by 100 for a file's share.
func BenchmarkAnthropicSweepFile(b *testing.B) {
	a := NewAnthropic(Config{APIKey: "unused"})
	its := sweepItems(b)
	b.Run("submit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			chunks, _, err := Split(its, a.Limits(), a.EncodedSize)
			if err != nil || len(chunks) != 1 {
				b.Fatal(len(chunks), err)
			}
			if _, err := a.createBody(chunks[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	var file bytes.Buffer
	for i := range its {
		text, _ := json.Marshal(`{"findings":[{"path":"a/b.go","line":` + fmt.Sprint(i) + `,"severity":"warning","message":"x < y && z"}]}`)
		fmt.Fprintf(&file, `{"custom_id":"rev-%04d-p0","result":{"type":"succeeded","message":{"id":"msg_01%022d","type":"message","role":"assistant",`+
			`"model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":%s,"citations":null}],"stop_reason":"end_turn","stop_sequence":null,`+
			`"container":null,"context_management":null,"usage":{"input_tokens":1234,"output_tokens":56,"cache_creation_input_tokens":0,"cache_read_input_tokens":1024,`+
			`"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"server_tool_use":null,"service_tier":"batch"}}}}`+"\n", i, i, text)
	}
	b.Run("collect", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(file.Len()))
		for b.Loop() {
			rs, err := decodeAnthropicResults(b.Context(), bytes.NewReader(file.Bytes()))
			if err != nil || len(rs) != len(its) || rs[0].Kind != KindSucceeded || rs[0].InputTokens != 1234 {
				b.Fatal(len(rs), err)
			}
		}
	})
}
