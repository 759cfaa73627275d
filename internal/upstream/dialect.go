package upstream

import (
	"net/http"
)

// dialect is the wire format of one kind of endpoint: how it parses
// requests and writes answers. The pipeline is shared; only formats differ.
type dialect interface {
	endpoint() endpoint
	// nativeHeaders is the header style of HeaderStyleNative.
	nativeHeaders() HeaderStyle
	// requestIDHeader names the header carrying a request id, or is empty.
	requestIDHeader() string
	// parse extracts the request; a non-empty problem makes it invalid.
	parse(body []byte, route string) (req LLMRequest, problem string)
	// writeError writes a non-2xx answer produced by step (or a 2xx
	// StatusOverride); detail is the validation problem for stepInvalid.
	writeError(w http.ResponseWriter, status int, st step, detail string)
	// writeSuccess writes a successful answer to req with a 2xx status.
	writeSuccess(w http.ResponseWriter, s *Server, status int, req LLMRequest)
}

func (s *Server) handlePostHook(w http.ResponseWriter, r *http.Request) {
	s.serve(w, r, r.PathValue("name"), hookDialect{})
}

// hookDialect emulates a webhook receiver: JSON {"ok":true} on success,
// {"error":"..."} otherwise.
type hookDialect struct{}

func (hookDialect) endpoint() endpoint         { return endpointHook }
func (hookDialect) nativeHeaders() HeaderStyle { return HeaderStyleNone }
func (hookDialect) requestIDHeader() string    { return "" }

func (hookDialect) parse([]byte, string) (LLMRequest, string) { return LLMRequest{}, "" }

func (hookDialect) writeError(w http.ResponseWriter, status int, st step, detail string) {
	if noBody(status) {
		w.WriteHeader(status)
		return
	}
	msg := detail
	if msg == "" {
		msg = stepMessage(st, status)
	}
	WriteJSON(w, status, map[string]any{"error": msg})
}

func (hookDialect) writeSuccess(w http.ResponseWriter, _ *Server, status int, _ LLMRequest) {
	if noBody(status) {
		w.WriteHeader(status)
		return
	}
	WriteJSON(w, status, map[string]any{"ok": true})
}

// noBody reports whether status forbids or customarily has no body.
func noBody(status int) bool {
	return status == http.StatusNoContent || status == http.StatusNotModified || status < 200
}

// stepMessage is a short human-readable reason for an answer.
func stepMessage(st step, status int) string {
	switch st {
	case stepOverLimit:
		return "rate limit exceeded"
	case stepBadSignature:
		return "invalid webhook signature"
	case stepTransient:
		return "transient upstream failure"
	case stepQuota:
		return "quota exhausted"
	default:
		if text := http.StatusText(status); text != "" {
			return text
		}
		return "error"
	}
}
