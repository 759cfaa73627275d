package upstream

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// LLMRequest is what a [Responder] sees of a chat request: enough to pick
// an answer, never logged.
type LLMRequest struct {
	// Provider is "openai" or "anthropic".
	Provider string
	// Route is the route name the request came to.
	Route string
	// Model is the requested model.
	Model string
	// System is the system prompt (Anthropic "system", or OpenAI
	// "system"/"developer" messages joined by newlines).
	System string
	// Messages are the non-system messages, text parts joined.
	Messages []Message
	// Schema is the JSON Schema the request asks its answer to match
	// (structured output: OpenAI's response_format of type json_schema,
	// Anthropic's output_config.format), nil when it asks for free text.
	// The batch simulator fills it; a Responder may answer accordingly.
	Schema json.RawMessage
}

// Message is one chat message reduced to its text.
type Message struct {
	Role string
	Text string
}

// Responder returns the assistant text of a successful LLM answer. It is
// called concurrently and must not block for long.
type Responder func(LLMRequest) string

// DefaultResponder answers every request with `{"findings":[]}`, a valid
// empty review.
func DefaultResponder(LLMRequest) string { return `{"findings":[]}` }

// WireMessage is a chat message as both providers send it: content is a
// string or an array of typed parts. The batch simulator reads the same
// messages inside batch requests.
type WireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// ContentText returns the text of a string or of the "text" parts of an
// array of parts; false when raw is neither.
func ContentText(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), true
}

// chatRequest is the part of either provider's request body the simulator reads.
type chatRequest struct {
	Model     string          `json:"model"`
	Messages  []WireMessage   `json:"messages"`
	System    json.RawMessage `json:"system"`
	MaxTokens *int            `json:"max_tokens"`
	Stream    bool            `json:"stream"`
}

// parseChat decodes body and checks the fields both providers require.
func parseChat(body []byte, provider, route string) (chatRequest, LLMRequest, string) {
	var cr chatRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		return cr, LLMRequest{}, "request body is not valid JSON"
	}
	req := LLMRequest{Provider: provider, Route: route, Model: cr.Model}
	switch {
	case cr.Model == "":
		return cr, req, "model: field required"
	case len(cr.Messages) == 0:
		return cr, req, "messages: at least one message is required"
	case cr.Stream:
		return cr, req, "stream: streaming is not supported by the simulator"
	}
	var system []string
	for i, m := range cr.Messages {
		text, ok := ContentText(m.Content)
		if !ok {
			return cr, req, "messages." + strconv.Itoa(i) + ".content: want a string or an array of parts"
		}
		if m.Role == "system" || m.Role == "developer" {
			system = append(system, text)
			continue
		}
		req.Messages = append(req.Messages, Message{Role: m.Role, Text: text})
	}
	req.System = strings.Join(system, "\n")
	return cr, req, ""
}

// estimateTokens approximates a token count as one per four bytes.
func estimateTokens(texts ...string) int {
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	return max(1, (n+3)/4)
}

func promptTokens(req LLMRequest) int {
	texts := []string{req.System}
	for _, m := range req.Messages {
		texts = append(texts, m.Text)
	}
	return estimateTokens(texts...)
}

func (s *Server) handlePostChatCompletions(w http.ResponseWriter, r *http.Request) {
	s.serve(w, r, routeOr(r, s.cfg.OpenAIRoute), openAIDialect{})
}

func (s *Server) handlePostMessages(w http.ResponseWriter, r *http.Request) {
	s.serve(w, r, routeOr(r, s.cfg.AnthropicRoute), anthropicDialect{})
}

// routeOr is the {name} path segment, or def for the unprefixed paths.
func routeOr(r *http.Request, def string) string {
	if name := r.PathValue("name"); name != "" {
		return name
	}
	return def
}
