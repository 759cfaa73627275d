package upstream

import (
	"net/http"
)

// openAIDialect emulates OpenAI's POST /v1/chat/completions.
type openAIDialect struct{}

func (openAIDialect) endpoint() endpoint         { return endpointOpenAI }
func (openAIDialect) nativeHeaders() HeaderStyle { return HeaderStyleXRateLimit }
func (openAIDialect) requestIDHeader() string    { return "x-request-id" }

func (openAIDialect) parse(body []byte, route string) (LLMRequest, string) {
	_, req, problem := parseChat(body, "openai", route)
	return req, problem
}

// openAIError is OpenAI's error body: {"error":{"message","type","param","code"}}.
type openAIError struct {
	Error openAIErrorDetail `json:"error"`
}

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (openAIDialect) writeError(w http.ResponseWriter, status int, st step, detail string) {
	e := openAIErrorDetail{Message: detail, Type: "invalid_request_error"}
	switch {
	case st == stepQuota:
		e = openAIErrorDetail{Message: "You exceeded your current quota, please check your plan and billing details.",
			Type: "insufficient_quota", Code: ptr("insufficient_quota")}
	case status == http.StatusTooManyRequests:
		e = openAIErrorDetail{Message: "Rate limit reached for requests. Please try again later.",
			Type: "requests", Code: ptr("rate_limit_exceeded")}
	case status == http.StatusUnauthorized:
		e = openAIErrorDetail{Message: "Incorrect API key provided.", Type: "invalid_request_error", Code: ptr("invalid_api_key")}
	case status >= 500:
		e = openAIErrorDetail{Message: "The server had an error while processing your request. Sorry about that!", Type: "server_error"}
		if status == http.StatusServiceUnavailable {
			e.Message = "The server is overloaded or not ready yet."
		}
	}
	if e.Message == "" {
		e.Message = stepMessage(st, status)
	}
	WriteJSON(w, status, openAIError{Error: e})
}

// chatCompletion is OpenAI's chat.completion object.
type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             chatUsage    `json:"usage"`
	SystemFingerprint *string      `json:"system_fingerprint"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (openAIDialect) writeSuccess(w http.ResponseWriter, s *Server, status int, req LLMRequest) {
	text := s.cfg.Responder(req)
	in, out := promptTokens(req), estimateTokens(text)
	WriteJSON(w, status, chatCompletion{
		ID:      "chatcmpl-" + s.nextID(),
		Object:  "chat.completion",
		Created: s.cfg.Now().Unix(),
		Model:   req.Model,
		Choices: []chatChoice{{
			Message:      chatMessage{Role: "assistant", Content: text},
			FinishReason: "stop",
		}},
		Usage: chatUsage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out},
	})
}

// anthropicDialect emulates Anthropic's POST /v1/messages.
type anthropicDialect struct{}

func (anthropicDialect) endpoint() endpoint         { return endpointAnthropic }
func (anthropicDialect) nativeHeaders() HeaderStyle { return HeaderStyleAnthropic }
func (anthropicDialect) requestIDHeader() string    { return "request-id" }

func (anthropicDialect) parse(body []byte, route string) (LLMRequest, string) {
	cr, req, problem := parseChat(body, "anthropic", route)
	if problem != "" {
		return req, problem
	}
	if cr.MaxTokens == nil || *cr.MaxTokens < 1 {
		return req, "max_tokens: field required"
	}
	system, ok := ContentText(cr.System)
	if !ok {
		return req, "system: want a string or an array of text blocks"
	}
	req.System = joinNonEmpty(system, req.System)
	return req, ""
}

func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	default:
		return a + "\n" + b
	}
}

// anthropicError is Anthropic's error body: {"type":"error","error":{"type","message"}}.
type anthropicError struct {
	Type  string               `json:"type"`
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicErrorTypes maps statuses to Anthropic's documented error types.
var anthropicErrorTypes = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
	403: "permission_error", 404: "not_found_error", 413: "request_too_large",
	429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error",
}

func (anthropicDialect) writeError(w http.ResponseWriter, status int, st step, detail string) {
	typ, ok := anthropicErrorTypes[status]
	if !ok {
		typ = "api_error"
		if status < 500 {
			typ = "invalid_request_error"
		}
	}
	msg := detail
	switch {
	case st == stepQuota:
		msg = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."
	case status == statusOverloaded:
		msg = "Overloaded"
	case status == http.StatusTooManyRequests:
		msg = "This request would exceed the rate limit for your organization. Please reduce the prompt length or the maximum tokens requested, or try again later."
	case msg == "":
		msg = stepMessage(st, status)
	}
	WriteJSON(w, status, anthropicError{Type: "error", Error: anthropicErrorDetail{Type: typ, Message: msg}})
}

// anthropicMessage is Anthropic's message object.
type anthropicMessage struct {
	ID           string             `json:"id"`
	Type         string             `json:"type"`
	Role         string             `json:"role"`
	Model        string             `json:"model"`
	Content      []anthropicContent `json:"content"`
	StopReason   string             `json:"stop_reason"`
	StopSequence *string            `json:"stop_sequence"`
	Usage        anthropicUsage     `json:"usage"`
}

type anthropicContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

func (anthropicDialect) writeSuccess(w http.ResponseWriter, s *Server, status int, req LLMRequest) {
	text := s.cfg.Responder(req)
	WriteJSON(w, status, anthropicMessage{
		ID:         "msg_" + s.nextID(),
		Type:       "message",
		Role:       "assistant",
		Model:      req.Model,
		Content:    []anthropicContent{{Type: "text", Text: text}},
		StopReason: "end_turn",
		Usage:      anthropicUsage{InputTokens: promptTokens(req), OutputTokens: estimateTokens(text)},
	})
}

func ptr[T any](v T) *T { return &v }
