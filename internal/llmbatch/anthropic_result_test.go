package llmbatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
)

// sdkAnthropicResult is Anthropic's result decode as it was until session
// 41: the line through the SDK's MessageBatchIndividualResponse (as its
// jsonl stream decoded it), then read. The reference the plain struct
// (anthropicLine) must agree with on well-typed lines.
func sdkAnthropicResult(line string) (Result, error) {
	var l anthropic.MessageBatchIndividualResponse
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		return Result{}, err
	}
	r := Result{CustomID: l.CustomID}
	switch v := l.Result.AsAny().(type) {
	case anthropic.MessageBatchSucceededResult:
		var text strings.Builder
		for _, b := range v.Message.Content {
			if b.Type == "text" {
				text.WriteString(b.Text)
			}
		}
		r.Kind, r.Body = KindSucceeded, []byte(text.String())
		r.InputTokens, r.OutputTokens = v.Message.Usage.InputTokens, v.Message.Usage.OutputTokens
	case anthropic.MessageBatchErroredResult:
		typ := v.Error.Error.Type
		r.Kind, r.ErrorType = KindErrored, typ
		r.Retryable = typ != "invalid_request_error" && typ != "permission_error" && typ != "authentication_error"
	case anthropic.MessageBatchCanceledResult:
		r.Kind = KindCanceled
	case anthropic.MessageBatchExpiredResult:
		r.Kind = KindExpired
	default:
		r.Kind, r.ErrorType, r.Retryable = KindErrored, "unknown_result_type", true
	}
	return r, nil
}

// plainAnthropicResult is line through decodeAnthropicResults, alone.
func plainAnthropicResult(t testing.TB, line string) Result {
	t.Helper()
	rs, err := decodeAnthropicResults(t.Context(), strings.NewReader(line))
	if err != nil || len(rs) != 1 {
		t.Fatalf("%s: %d results, %v", line, len(rs), err)
	}
	return rs[0]
}

// succeededLine is a succeeded result line around message.
func succeededLine(message string) string {
	return `{"custom_id":"rev-1","result":{"type":"succeeded","message":` + message + `}}`
}

// fullMessage is a review's answer with every field a real message has.
const fullMessage = `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",` +
	`"content":[{"type":"text","text":"{\"findings\":[{\"line\":3,\"msg\":\"<b> \\u0026 \\u2028\"}]}","citations":null}],` +
	`"stop_reason":"end_turn","stop_sequence":null,"container":null,"context_management":null,` +
	`"usage":{"input_tokens":1234,"output_tokens":56,"cache_creation_input_tokens":0,"cache_read_input_tokens":1024,` +
	`"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"server_tool_use":null,"service_tier":"batch"}}`

// anthropicWellTyped are result lines as Anthropic writes them: both
// decodes must give the same Result.
var anthropicWellTyped = []string{
	succeededLine(fullMessage),
	// Cut short, a refusal, a stop sequence, a pause.
	succeededLine(`{"type":"message","content":[{"type":"text","text":"{\"findi"}],"stop_reason":"max_tokens","usage":{"input_tokens":10,"output_tokens":2048}}`),
	succeededLine(`{"type":"message","content":[{"type":"text","text":"I can't help with that."}],"stop_reason":"refusal","usage":{"input_tokens":7,"output_tokens":9}}`),
	succeededLine(`{"content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence","stop_sequence":"###","usage":{"input_tokens":1,"output_tokens":1}}`),
	succeededLine(`{"content":[],"stop_reason":"pause_turn","usage":{"input_tokens":1,"output_tokens":0}}`),
	// Tool use beside text, tool use alone, thinking before the text.
	succeededLine(`{"content":[{"type":"text","text":"first "},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":[1,{"b":null}]}},{"type":"text","text":"second"}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}`),
	succeededLine(`{"content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}`),
	succeededLine(`{"content":[{"type":"thinking","thinking":"hm","signature":"sig"},{"type":"redacted_thinking","data":"x"},{"type":"text","text":"answer"}],"usage":{"input_tokens":3,"output_tokens":4}}`),
	succeededLine(`{"content":[{"type":"text","text":"é \ud83d\ude00 \u0000 \n"}],"usage":{"input_tokens":0,"output_tokens":1}}`),
	// No usage, a null usage, no content, null content.
	succeededLine(`{"content":[{"type":"text","text":"no usage"}]}`),
	succeededLine(`{"content":[{"type":"text","text":"usage null"}],"usage":null}`),
	succeededLine(`{"usage":{"input_tokens":5,"output_tokens":6}}`),
	succeededLine(`{"content":null,"usage":{"input_tokens":5,"output_tokens":6}}`),
	// Errored, as the API and the simulator write them.
	`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","request_id":"req_1","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}}}`,
	`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"Internal server error"}}}}`,
	`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"m"}}}}`,
	`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"permission_error","message":"m"}}}}`,
	`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"authentication_error","message":"m"}}}}`,
	`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"rate_limit_error","message":"m"}}}}`,
	`{"custom_id":"a","result":{"type":"errored"}}`,
	// Canceled, expired, a type unknown to both, none.
	`{"custom_id":"a","result":{"type":"canceled"}}`,
	`{"custom_id":"a","result":{"type":"expired"}}`,
	`{"custom_id":"a","result":{"type":"deferred","message":{"content":[]}}}`,
	`{"custom_id":"a","result":{}}`,
	`{"custom_id":"a"}`,
	`{}`,
	`null`,
}

// anthropicMistyped are lines the SDK read by coercing: the plain decode
// calls each unreadable and retries it, where the SDK may have called it
// a success (anthropicLine). The counts of a mistyped usage are dropped
// and the answer kept.
var anthropicMistyped = []struct {
	line string
	want Result
}{
	{succeededLine(`{"content":[{"type":"text","text":12}],"usage":{"input_tokens":1,"output_tokens":2}}`), unreadable("rev-1")},
	{succeededLine(`{"content":"text","usage":{"input_tokens":1,"output_tokens":2}}`), unreadable("rev-1")},
	{succeededLine(`{"content":[7]}`), unreadable("rev-1")},
	{succeededLine(`"a message"`), unreadable("rev-1")},
	{succeededLine(`null`), unreadable("rev-1")},
	{`{"custom_id":"rev-1","result":{"type":"succeeded"}}`, unreadable("rev-1")},
	{`{"custom_id":"rev-1","result":{"type":7}}`, unreadable("rev-1")},
	{`{"custom_id":"rev-1","result":"succeeded"}`, unreadable("rev-1")},
	{`{"custom_id":"rev-1","result":{"type":"errored","error":{"error":{"type":400}}}}`, unreadable("rev-1")},
	{`{"custom_id":12,"result":{"type":"canceled"}}`, unreadable("")},
	{`"a line"`, unreadable("")},
	{`[1,2]`, unreadable("")},
	{succeededLine(`{"content":[{"type":"text","text":"kept"}],"usage":[]}`), Result{CustomID: "rev-1", Kind: KindSucceeded, Body: []byte("kept")}},
	{succeededLine(`{"content":[{"type":"text","text":"kept"}],"usage":{"input_tokens":"12","output_tokens":3}}`), Result{CustomID: "rev-1", Kind: KindSucceeded, Body: []byte("kept")}},
}

func unreadable(id string) Result {
	return Result{CustomID: id, Kind: KindErrored, ErrorType: "unreadable_response", Retryable: true}
}

// TestAnthropicResultMatchesTheSDK: every well-typed line, decoded
// through the plain struct and through the SDK's type, gives the same
// result: kind, answer bytes, usage, error type and retryability.
// Mistyped lines give the unreadable (retried) result.
func TestAnthropicResultMatchesTheSDK(t *testing.T) {
	t.Parallel()
	for _, line := range anthropicWellTyped {
		want, err := sdkAnthropicResult(line)
		if err != nil {
			t.Fatalf("%s: SDK: %v", line, err)
		}
		if got := plainAnthropicResult(t, line); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", line, got, want)
		}
	}
	for _, c := range anthropicMistyped {
		if got := plainAnthropicResult(t, c.line); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.line, got, c.want)
		}
	}
	// The line a test is worth: a real answer, with its usage, is read.
	if r := plainAnthropicResult(t, anthropicWellTyped[0]); r.Kind != KindSucceeded || !bytes.HasPrefix(r.Body, []byte(`{"findings"`)) || r.InputTokens != 1234 || r.OutputTokens != 56 {
		t.Fatalf("real message read as %+v", r)
	}
}

// TestAnthropicResultsStream: lines are read in order, a mistyped one is
// its own result, and a line that is not JSON ends the read with an error
// naming it, as the SDK's stream did.
func TestAnthropicResultsStream(t *testing.T) {
	t.Parallel()
	stream := anthropicWellTyped[0] + "\n" + anthropicMistyped[0].line + "\n" + `{"custom_id":"c","result":{"type":"expired"}}` + "\n"
	rs, err := decodeAnthropicResults(t.Context(), strings.NewReader(stream))
	if err != nil || len(rs) != 3 || rs[0].Kind != KindSucceeded || rs[1].ErrorType != "unreadable_response" || rs[2].CustomID != "c" || rs[2].Kind != KindExpired {
		t.Fatalf("%+v, %v", rs, err)
	}
	_, err = decodeAnthropicResults(t.Context(), strings.NewReader(stream+`{"custom_id":"d","result":{`+"\n"))
	var syntax *json.SyntaxError
	if err == nil || !strings.Contains(err.Error(), "line 4") || !errors.As(err, &syntax) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated stream: %v", err)
	}
}

// FuzzAnthropicResultMatchesTheSDK: for any well-typed line (the fields
// ratelane reads, and those beside them, of the types Anthropic sends)
// the plain struct and the SDK agree. Mistyped lines are
// TestAnthropicResultMatchesTheSDK's: there the two differ by design.
func FuzzAnthropicResultMatchesTheSDK(f *testing.F) {
	f.Add("rev-1", "succeeded", uint8(1), "{\"findings\":[]}", "", int64(1234), int64(56), true, "end_turn")
	f.Add("rev-2", "succeeded", uint8(6), "<\u2028 \xff>", "", int64(-1), int64(0), false, "tool_use")
	f.Add("a", "errored", uint8(0), "", "invalid_request_error", int64(0), int64(0), false, "")
	f.Add("b", "errored", uint8(0), "", "api_error", int64(0), int64(0), false, "")
	f.Add("c", "expired", uint8(0), "", "", int64(0), int64(0), false, "")
	f.Add("d", "canceled", uint8(2), "x", "", int64(0), int64(0), true, "refusal")
	f.Add("e", "other", uint8(3), "x", "", int64(1), int64(2), true, "max_tokens")
	f.Fuzz(func(t *testing.T, id, typ string, blocks uint8, text, errType string, in, out int64, usage bool, stop string) {
		result := map[string]any{"type": typ}
		switch typ {
		case "succeeded":
			content := []any{}
			for i := range int(blocks % 8) {
				switch i % 3 {
				case 0:
					content = append(content, map[string]any{"type": "text", "text": text, "citations": nil})
				case 1:
					content = append(content, map[string]any{"type": "tool_use", "id": "toolu_" + text, "name": "f", "input": map[string]any{"q": text}})
				default:
					content = append(content, map[string]any{"type": "thinking", "thinking": text, "signature": "s"})
				}
			}
			msg := map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
				"content": content, "stop_reason": stop, "stop_sequence": nil}
			if usage {
				msg["usage"] = map[string]any{"input_tokens": in, "output_tokens": out, "cache_read_input_tokens": in / 2}
			}
			result["message"] = msg
		case "errored":
			result["error"] = map[string]any{"type": "error", "request_id": "req_1", "error": map[string]any{"type": errType, "message": text}}
		}
		raw, err := json.Marshal(map[string]any{"custom_id": id, "result": result})
		if err != nil {
			t.Fatal(err)
		}
		want, err := sdkAnthropicResult(string(raw))
		if err != nil {
			t.Fatal(err)
		}
		if got := plainAnthropicResult(t, string(raw)); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", raw, got, want)
		}
	})
}
