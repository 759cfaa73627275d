package llmbatch

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
)

// sdkResult is openAIResult as it was until session 40, decoding a 200's
// body through the SDK's openai.ChatCompletion: the reference the plain
// struct (openAICompletion) must agree with.
func sdkResult(l resultLine) Result {
	if l.Error != nil || l.Response == nil || l.Response.StatusCode != http.StatusOK {
		return openAIResult(l) // these never read the completion
	}
	r := Result{CustomID: l.CustomID}
	var c openai.ChatCompletion
	if err := json.Unmarshal(l.Response.Body, &c); err != nil || len(c.Choices) == 0 {
		r.Kind, r.ErrorType, r.Retryable = KindErrored, "unreadable_response", true
		return r
	}
	r.Kind, r.Body = KindSucceeded, []byte(c.Choices[0].Message.Content)
	r.InputTokens, r.OutputTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
	return r
}

// completionLine is a 200 line of an output file around body.
func completionLine(body string) string {
	return `{"id":"batch_req_1","custom_id":"rev-1","response":{"status_code":200,"request_id":"req_1","body":` + body + `},"error":null}`
}

// resultLines are output and error file lines as OpenAI writes them, and
// the shapes a completion's body may take.
var resultLines = []string{
	// A review's answer, with every field of a real completion.
	completionLine(`{"id":"chatcmpl-1","object":"chat.completion","created":1733000000,"model":"gpt-4.1-mini-2025-04-14",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"{\"findings\":[{\"line\":3,\"msg\":\"<b> \\u0026 \\u2028\"}]}","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":1234,"completion_tokens":56,"total_tokens":1290,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},` +
		`"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},` +
		`"service_tier":"default","system_fingerprint":"fp_1"}`),
	// Cut short by max_completion_tokens.
	completionLine(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"{\"findi"},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":2048}}`),
	// A refusal: content null, the refusal beside it.
	completionLine(`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":9}}`),
	// Filtered, a tool call, two choices, no usage, an empty answer.
	completionLine(`{"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}],"usage":{"prompt_tokens":1,"completion_tokens":0}}`),
	completionLine(`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`),
	completionLine(`{"choices":[{"message":{"content":"first"}},{"message":{"content":"second"}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`),
	completionLine(`{"choices":[{"message":{"content":"no usage"},"finish_reason":"stop"}]}`),
	completionLine(`{"choices":[{"message":{"content":"usage null"}}],"usage":null}`),
	completionLine(`{"choices":[{"message":{"content":"é \ud83d\ude00 \u0000 \n"}}],"usage":{"prompt_tokens":0,"completion_tokens":1}}`),
	// A usage that is not an object: the answer is kept.
	completionLine(`{"choices":[{"message":{"content":"kept"}}],"usage":[]}`),
	completionLine(`{"choices":[{"message":{"content":"kept"}}],"usage":"n/a"}`),
	// Bodies with no answer to read.
	completionLine(`{"choices":[]}`),
	completionLine(`{"choices":null}`),
	completionLine(`{}`),
	completionLine(`null`),
	completionLine(`"nope"`),
	completionLine(`[1,2]`),
	completionLine(`{"choices":[{"message":null}],"usage":{"prompt_tokens":5,"completion_tokens":6}}`),
	// A 200 whose body is an error object.
	completionLine(`{"error":{"message":"The model produced invalid content.","type":"invalid_request_error","param":null,"code":null}}`),
	// Errored requests and lines of the error file.
	`{"id":"r","custom_id":"a","response":{"status_code":400,"request_id":"q","body":{"error":{"message":"m","type":"invalid_request_error","param":"messages","code":null}}},"error":null}`,
	`{"id":"r","custom_id":"a","response":{"status_code":429,"body":{"error":{"type":"tokens","code":"rate_limit_exceeded"}}},"error":null}`,
	`{"id":"r","custom_id":"a","response":{"status_code":500,"body":{"error":{"type":"server_error"}}},"error":null}`,
	`{"id":"r","custom_id":"a","response":null,"error":{"code":"batch_expired","message":"This request could not be executed before the completion window expired."}}`,
	`{"id":"r","custom_id":"a","response":null,"error":{"code":"batch_cancelled","message":"m"}}`,
	`{"id":"r","custom_id":"a","response":null,"error":{"code":"request_timeout","message":"m"}}`,
	`{"id":"r","custom_id":"a","response":null,"error":null}`,
}

// TestOpenAIResultMatchesTheSDK: every line, decoded through the plain
// struct and through the SDK's ChatCompletion, gives the same result:
// kind, answer bytes, usage, status, error type and retryability.
func TestOpenAIResultMatchesTheSDK(t *testing.T) {
	t.Parallel()
	for _, line := range resultLines {
		var l resultLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		got, want := openAIResult(l), sdkResult(l)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", line, got, want)
		}
	}
	// The lines a test is worth: a real answer, with its usage, is read.
	var l resultLine
	if err := json.Unmarshal([]byte(resultLines[0]), &l); err != nil {
		t.Fatal(err)
	}
	if r := openAIResult(l); r.Kind != KindSucceeded || !bytes.HasPrefix(r.Body, []byte(`{"findings"`)) || r.InputTokens != 1234 || r.OutputTokens != 56 {
		t.Fatalf("real completion read as %+v", r)
	}
}

// FuzzOpenAIResultMatchesTheSDK: for any well-typed completion (the
// fields ratelane reads, and those beside them, of the types OpenAI
// sends) the plain struct and the SDK agree. Mistyped bodies are
// FuzzOpenAIResultLine's: there the two may differ (openAICompletion).
func FuzzOpenAIResultMatchesTheSDK(f *testing.F) {
	f.Add(`{"findings":[]}`, false, "", int64(1234), int64(56), "stop", uint8(1), true)
	f.Add("", true, "I can't help with that.", int64(7), int64(9), "stop", uint8(1), true)
	f.Add("cut", false, "", int64(10), int64(2048), "length", uint8(2), false)
	f.Add("<\u2028 \xff>", false, "", int64(-1), int64(0), "content_filter", uint8(0), true)
	f.Fuzz(func(t *testing.T, content string, nullContent bool, refusal string, prompt, completion int64, finish string, choices uint8, usage bool) {
		msg := map[string]any{"role": "assistant", "content": content}
		if nullContent {
			msg["content"] = nil
		}
		if refusal != "" {
			msg["refusal"] = refusal
		}
		body := map[string]any{"id": "c", "object": "chat.completion", "model": "m"}
		cs := []any{}
		for i := range int(choices % 4) {
			cs = append(cs, map[string]any{"index": i, "message": msg, "finish_reason": finish, "logprobs": nil})
		}
		body["choices"] = cs
		if usage {
			body["usage"] = map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
		}
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		var l resultLine
		if err := json.Unmarshal([]byte(completionLine(string(raw))), &l); err != nil {
			t.Fatal(err)
		}
		if got, want := openAIResult(l), sdkResult(l); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", raw, got, want)
		}
	})
}
