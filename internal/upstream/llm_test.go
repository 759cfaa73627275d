package upstream

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

const (
	chatBody     = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"review"},{"role":"user","content":[{"type":"text","text":"diff"}]}]}`
	messagesBody = `{"model":"claude-sonnet-4-5","max_tokens":512,"system":"review","messages":[{"role":"user","content":"diff"}]}`
)

func decode[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %T: %v", v, err)
	}
	return v
}

func TestChatCompletionShape(t *testing.T) {
	t.Parallel()
	seenc := make(chan LLMRequest, 1)
	b := setup(t, Config{
		Routes:    map[string]RouteConfig{"openai": {Rate: 10, Burst: 10}},
		Responder: func(r LLMRequest) string { seenc <- r; return `{"findings":[{"line":1}]}` },
	})
	resp, body := b.post(t, b.srv.URL()+"/v1/chat/completions", chatBody, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := decode[chatCompletion](t, body)
	if got.Object != "chat.completion" || got.Model != "gpt-4o-mini" || len(got.Choices) != 1 ||
		got.Choices[0].Message.Content != `{"findings":[{"line":1}]}` || got.Choices[0].FinishReason != "stop" {
		t.Errorf("completion = %+v", got)
	}
	if u := got.Usage; u.PromptTokens < 1 || u.CompletionTokens < 1 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage = %+v", u)
	}
	if seen := <-seenc; seen.Provider != "openai" || seen.System != "review" || !slices.Equal(seen.Messages, []Message{{"user", "diff"}}) {
		t.Errorf("responder saw %+v", seen)
	}
	if resp.Header.Get("x-request-id") == "" || resp.Header.Get("x-ratelimit-remaining-requests") != "9" {
		t.Errorf("headers = %v", resp.Header)
	}
}

func TestMessagesShape(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Routes: map[string]RouteConfig{"claude": {Rate: 10, Burst: 10}}})
	resp, body := b.post(t, b.srv.LLMBaseURL("claude")+"/v1/messages", messagesBody, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := decode[anthropicMessage](t, body)
	if got.Type != "message" || got.Role != "assistant" || len(got.Content) != 1 || got.Content[0].Type != "text" ||
		got.Content[0].Text != `{"findings":[]}` || got.StopReason != "end_turn" || got.Usage.InputTokens < 1 || got.Usage.OutputTokens < 1 {
		t.Errorf("message = %+v", got)
	}
	reset, err := time.Parse(time.RFC3339, resp.Header.Get("anthropic-ratelimit-requests-reset"))
	if err != nil || resp.Header.Get("anthropic-ratelimit-requests-remaining") != "9" || resp.Header.Get("request-id") == "" {
		t.Errorf("headers = %v (reset parse error %v)", resp.Header, err)
	}
	if d := time.Until(reset); d < -time.Second || d > 2*time.Second {
		t.Errorf("reset %v is not about 100ms ahead", reset)
	}
	if r := b.srv.Stats().Routes["claude"]; r.Accepted != 1 {
		t.Errorf("claude route accepted %d, want 1 (the /r/{name} prefix picks the route)", r.Accepted)
	}
}

func TestLLMRateLimitErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, body string
		over             OverLimit
		status           int
		errType          string
	}{
		{"openai 429", "/v1/chat/completions", chatBody, OverLimit429Seconds, 429, "rate_limit_exceeded"},
		{"openai 503", "/v1/chat/completions", chatBody, OverLimit503, 503, "server_error"},
		{"anthropic 429", "/v1/messages", messagesBody, OverLimit429Seconds, 429, "rate_limit_error"},
		{"anthropic 529", "/v1/messages", messagesBody, OverLimit503, 529, "overloaded_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := RouteConfig{Rate: 0.5, Burst: 1, OverLimit: tc.over}
			// A fake clock: a stall of 2 s between the requests would
			// refill the bucket on the real one.
			b := setup(t, Config{Now: newFakeClock().Now, Routes: map[string]RouteConfig{"openai": rc, "anthropic": rc}})
			b.post(t, b.srv.URL()+tc.path, tc.body, nil)
			resp, body := b.post(t, b.srv.URL()+tc.path, tc.body, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := llmErrorKind(t, body); got != tc.errType {
				t.Errorf("error kind %q, want %q in %s", got, tc.errType, body)
			}
			if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < 1 || n > 2 {
				t.Errorf("Retry-After = %q, want 1..2", resp.Header.Get("Retry-After"))
			}
		})
	}
}

// llmErrorKind returns OpenAI's error.code (or error.type when code is
// null) or Anthropic's error.type.
func llmErrorKind(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string  `json:"type"`
			Code    *string `json:"code"`
			Message string  `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not a provider error body: %s", body)
	}
	if e.Type == "error" || e.Error.Code == nil {
		return e.Error.Type
	}
	return *e.Error.Code
}

func TestLLMQuotaAndInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Routes: map[string]RouteConfig{"openai": {Quota: 1}, "anthropic": {Quota: 1}}})
	chat, msgs := b.srv.URL()+"/v1/chat/completions", b.srv.URL()+"/v1/messages"
	for _, tc := range []struct {
		url, body string
		status    int
		kind      string
	}{
		{chat, `{"model":`, 400, "invalid_request_error"},
		{chat, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`, 400, "invalid_request_error"},
		{msgs, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{chat, chatBody, 200, ""},
		{chat, chatBody, 429, "insufficient_quota"},
		{msgs, messagesBody, 200, ""},
		{msgs, messagesBody, 400, "invalid_request_error"},
	} {
		resp, body := b.post(t, tc.url, tc.body, nil)
		if resp.StatusCode != tc.status {
			t.Fatalf("POST %s %s: status %d, want %d", tc.url, tc.body, resp.StatusCode, tc.status)
		}
		if tc.kind != "" && llmErrorKind(t, body) != tc.kind {
			t.Errorf("POST %s: error %s, want %s", tc.url, body, tc.kind)
		}
		if tc.status == 429 && resp.Header.Get("Retry-After") != "" {
			t.Errorf("insufficient_quota carries Retry-After %q", resp.Header.Get("Retry-After"))
		}
	}
	rep := b.srv.Stats()
	if o := rep.Routes["openai"]; o.Invalid != 2 || o.QuotaExhausted != 1 || o.Accepted != 1 || o.RateLimited != 0 {
		t.Errorf("openai report = %+v", o)
	}
}

// TestScriptedResponses: "429, then bad output, then good output", exactly
// as queued, then normal behaviour.
func TestScriptedResponses(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Routes: map[string]RouteConfig{"openai": {Rate: 1, Burst: 1}}})
	script := []Response{
		{Status: 429, Header: http.Header{"Retry-After": {"7"}, "X-Ratelimit-Reset-Requests": {"7s"}}, Body: []byte(`{"error":{"code":"rate_limit_exceeded"}}`)},
		{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"choices":[{"message":{"content":"not json"}}]}`)},
		{Status: 200, Header: http.Header{"Content-Type": {"application/json"}, "X-Trace": {"a", "b"}}, Body: []byte(`{"ok":true}`)},
	}
	if err := b.srv.Script("openai", script...); err != nil {
		t.Fatal(err)
	}
	script[0].Header.Set("Retry-After", "mutated") // the queue holds copies
	for i, want := range []Response{
		{Status: 429, Header: http.Header{"Retry-After": {"7"}, "X-Ratelimit-Reset-Requests": {"7s"}}, Body: []byte(`{"error":{"code":"rate_limit_exceeded"}}`)},
		script[1], script[2],
	} {
		resp, body := b.post(t, b.srv.URL()+"/v1/chat/completions", chatBody, nil)
		resp.Header.Del("Content-Length")
		if resp.StatusCode != want.Status || string(body) != string(want.Body) || !headersEqual(resp.Header, want.Header) {
			t.Fatalf("scripted %d: %d %v %s, want %d %v %s", i, resp.StatusCode, resp.Header, body, want.Status, want.Header, want.Body)
		}
	}
	resp, body := b.post(t, b.srv.URL()+"/v1/chat/completions", chatBody, nil)
	if resp.StatusCode != 200 || decode[chatCompletion](t, body).Object != "chat.completion" {
		t.Fatalf("after the script: %d %s", resp.StatusCode, body)
	}
	if r := b.srv.Stats().Routes["openai"]; r.Scripted != 3 || r.Accepted != 3 || r.StatusCounts[429] != 1 {
		t.Errorf("report = %+v", r)
	}
	if err := b.srv.Script("nope", Response{Status: 200}); err == nil {
		t.Error("Script on an unknown route succeeded")
	}
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
