package batchsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// anthropicErr writes Anthropic's error body
// {"type":"error","error":{"type","message"},"request_id"}.
func anthropicErr(w http.ResponseWriter, status int, typ, msg string) {
	upstream.WriteJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg},
		"request_id": w.Header().Get("request-id")})
}

// anthropic wraps an Anthropic handler with the Date and request-id
// headers and the key and anthropic-version checks. The key may come as
// x-api-key or, as anthropic-sdk-go v2 sends it, "Authorization: Bearer".
func (s *Server) anthropic(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", s.cfg.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("request-id", fmt.Sprintf("req_%d", time.Now().UnixNano()))
		key := r.Header.Get("X-Api-Key")
		if key == "" {
			key = bearer(r)
		}
		if !s.keyOK(key) {
			anthropicErr(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
			return
		}
		if r.Header.Get("Anthropic-Version") == "" {
			anthropicErr(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
			return
		}
		h(w, r)
	}
}

// customIDPattern is Anthropic's rule for a request's custom_id.
var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// messageBatchCreate is the body of POST /v1/messages/batches.
type messageBatchCreate struct {
	Requests []struct {
		CustomID string          `json:"custom_id"`
		Params   json.RawMessage `json:"params"`
	} `json:"requests"`
}

func (s *Server) handlePostMessageBatch(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	d, rejected := s.takeRejection(ProviderAnthropic)
	s.mu.Unlock()
	if rejected {
		setRetryAfter(w.Header(), d)
		anthropicErr(w, http.StatusTooManyRequests, "rate_limit_error", "Number of batch requests has exceeded your rate limit.")
		return
	}
	lim := s.cfg.Limits
	// Read the body whole (draining any excess) rather than cutting it
	// off: a cut-off body makes net/http close the connection the slow way.
	body, err := io.ReadAll(io.LimitReader(r.Body, lim.AnthropicMaxBytes+1))
	if int64(len(body)) > lim.AnthropicMaxBytes {
		_, _ = io.Copy(io.Discard, r.Body)
		anthropicErr(w, http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", lim.AnthropicMaxBytes))
		return
	}
	var in messageBatchCreate
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	switch {
	case err != nil:
		anthropicErr(w, http.StatusBadRequest, "invalid_request_error", "request body is not valid JSON")
		return
	case len(in.Requests) == 0:
		anthropicErr(w, http.StatusBadRequest, "invalid_request_error", "requests: at least one request is required")
		return
	case len(in.Requests) > lim.AnthropicMaxRequests:
		anthropicErr(w, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("requests: a batch holds at most %d requests, got %d", lim.AnthropicMaxRequests, len(in.Requests)))
		return
	}
	reqs := make([]simRequest, 0, len(in.Requests))
	seen := make(map[string]bool, len(in.Requests))
	for i, q := range in.Requests {
		switch {
		case !customIDPattern.MatchString(q.CustomID):
			anthropicErr(w, http.StatusBadRequest, "invalid_request_error",
				fmt.Sprintf("requests.%d.custom_id: must match ^[a-zA-Z0-9_-]{1,64}$", i))
			return
		case seen[q.CustomID]:
			anthropicErr(w, http.StatusBadRequest, "invalid_request_error",
				fmt.Sprintf("requests.%d.custom_id: duplicate custom_id", i))
			return
		}
		seen[q.CustomID] = true
		req, why := parseParams(q.Params, ProviderAnthropic, true)
		reqs = append(reqs, simRequest{customID: q.CustomID, req: req, invalid: why})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	for i := range reqs {
		reqs[i].fault = s.cfg.Fault(FaultRequest{Provider: ProviderAnthropic, CustomID: reqs[i].customID,
			Attempt: s.attempt(ProviderAnthropic, reqs[i].customID)})
	}
	b := &simBatch{provider: ProviderAnthropic, id: s.nextID("msgbatch_"), created: now, start: now,
		expires: now.Add(s.cfg.Window), reqs: reqs}
	s.addBatch(b)
	s.stats.AnthropicBatches++
	upstream.WriteJSON(w, http.StatusOK, s.anthropicView(b, now))
}

// messageBatch is Anthropic's message_batch object.
type messageBatch struct {
	ID                string        `json:"id"`
	Type              string        `json:"type"`
	ProcessingStatus  string        `json:"processing_status"`
	RequestCounts     messageCounts `json:"request_counts"`
	EndedAt           *string       `json:"ended_at"`
	CreatedAt         *string       `json:"created_at"`
	ExpiresAt         *string       `json:"expires_at"`
	ArchivedAt        *string       `json:"archived_at"`
	CancelInitiatedAt *string       `json:"cancel_initiated_at"`
	ResultsURL        *string       `json:"results_url"`
}

type messageCounts struct {
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Errored    int `json:"errored"`
	Canceled   int `json:"canceled"`
	Expired    int `json:"expired"`
}

// anthropicEnd is when b ends: at the cancel plus CancelFor, at the end of
// processing, or at the window's end.
func (s *Server) anthropicEnd(b *simBatch) time.Time {
	if !b.cancelAt.IsZero() {
		return b.cancelAt.Add(s.cfg.CancelFor)
	}
	end, _ := b.naturalEnd()
	return end
}

// anthropicView renders b at now. Call with s.mu held.
func (s *Server) anthropicView(b *simBatch, now time.Time) messageBatch {
	v := messageBatch{ID: b.id, Type: "message_batch", CreatedAt: rfc3339(b.created), ExpiresAt: rfc3339(b.expires),
		CancelInitiatedAt: rfc3339(b.cancelAt)}
	end := s.anthropicEnd(b)
	switch {
	case now.Before(end) && !b.cancelAt.IsZero():
		v.ProcessingStatus = "canceling"
	case now.Before(end):
		v.ProcessingStatus = "in_progress"
	default:
		v.ProcessingStatus = "ended"
	}
	if v.ProcessingStatus != "ended" {
		// Anthropic counts every request as processing until the whole
		// batch ends.
		v.RequestCounts.Processing = len(b.reqs)
		return v
	}
	v.EndedAt = rfc3339(end)
	if archived := b.created.Add(s.cfg.Retention); !now.Before(archived) {
		v.ArchivedAt = rfc3339(archived)
	}
	url := s.URL() + "/v1/messages/batches/" + b.id + "/results"
	v.ResultsURL = &url
	for _, r := range b.reqs {
		switch kind, _ := s.anthropicKind(b, r); kind {
		case "succeeded":
			v.RequestCounts.Succeeded++
		case "errored":
			v.RequestCounts.Errored++
		case "canceled":
			v.RequestCounts.Canceled++
		case "expired":
			v.RequestCounts.Expired++
		}
	}
	s.materializeAnthropic(b)
	return v
}

// anthropicKind is the result type of request r of an ended batch, and
// the error type when it errored. A dropped request counts as succeeded
// (the provider believes it answered) but has no line in the results.
func (s *Server) anthropicKind(b *simBatch, r simRequest) (string, string) {
	switch {
	case !b.doneBy(r, b.cutoff()) && !b.cancelAt.IsZero():
		return "canceled", ""
	case !b.doneBy(r, b.cutoff()):
		return "expired", ""
	case r.invalid != "" || r.fault == FaultInvalid:
		return "errored", "invalid_request_error"
	case r.fault == FaultServerError:
		return "errored", "api_error"
	}
	return "succeeded", ""
}

// materializeAnthropic builds b's results once. Call with s.mu held.
func (s *Server) materializeAnthropic(b *simBatch) {
	if b.materialized {
		return
	}
	b.materialized = true
	var buf bytes.Buffer
	for _, i := range b.shuffled() {
		r := b.reqs[i]
		if r.fault == FaultDrop && b.doneBy(r, b.cutoff()) {
			continue
		}
		kind, errType := s.anthropicKind(b, r)
		result := map[string]any{"type": kind}
		switch kind {
		case "succeeded":
			result["message"] = s.anthropicMessage(r)
		case "errored":
			msg := "Internal server error"
			if errType == "invalid_request_error" {
				msg = r.invalid
				if msg == "" {
					msg = "Invalid request."
				}
			}
			result["error"] = map[string]any{"type": "error", "request_id": s.nextID("req_"),
				"error": map[string]any{"type": errType, "message": msg}}
		}
		line, _ := json.Marshal(map[string]any{"custom_id": r.customID, "result": result}) // cannot fail
		buf.Write(line)
		buf.WriteByte('\n')
	}
	b.results = buf.Bytes()
}

// anthropicMessage is the message object of a successful request.
func (s *Server) anthropicMessage(r simRequest) map[string]any {
	text := s.answer(r)
	return map[string]any{
		"id": s.nextID("msg_"), "type": "message", "role": "assistant", "model": r.req.Model,
		"content":     []any{map[string]any{"type": "text", "text": text}},
		"stop_reason": "end_turn", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": promptTokens(r.req), "output_tokens": estimateTokens(text)},
	}
}

// anthropicBatch serves a route on one Anthropic message batch (see
// [Server.batchRoute]), answering not_found_error for an unknown id.
func (s *Server) anthropicBatch(h batchHandler) http.HandlerFunc {
	return s.batchRoute(ProviderAnthropic, func(w http.ResponseWriter, _ string) {
		anthropicErr(w, http.StatusNotFound, "not_found_error", "message batch not found")
	}, h)
}

func (s *Server) handleGetMessageBatch(w http.ResponseWriter, _ *http.Request, b *simBatch) {
	upstream.WriteJSON(w, http.StatusOK, s.anthropicView(b, s.cfg.Now()))
}

func (s *Server) handleGetMessageBatchResults(w http.ResponseWriter, _ *http.Request, b *simBatch) {
	v := s.anthropicView(b, s.cfg.Now())
	switch {
	case v.ProcessingStatus != "ended":
		anthropicErr(w, http.StatusBadRequest, "invalid_request_error", "results are available once the batch has ended")
		return
	case v.ArchivedAt != nil:
		anthropicErr(w, http.StatusNotFound, "not_found_error", "results are no longer available: the retention period has passed")
		return
	}
	s.stats.ResultDownloads++
	w.Header().Set("Content-Type", "application/binary")
	_, _ = w.Write(b.results)
}

func (s *Server) handleCancelMessageBatch(w http.ResponseWriter, _ *http.Request, b *simBatch) {
	now := s.cfg.Now()
	if v := s.anthropicView(b, now); v.ProcessingStatus == "in_progress" {
		b.cancelAt = now
		s.stats.Cancels++
	}
	// Cancelling a canceling or ended batch changes nothing and answers
	// the batch as it is.
	upstream.WriteJSON(w, http.StatusOK, s.anthropicView(b, now))
}

func (s *Server) handleDeleteMessageBatch(w http.ResponseWriter, _ *http.Request, b *simBatch) {
	id := b.id
	if s.anthropicView(b, s.cfg.Now()).ProcessingStatus != "ended" {
		anthropicErr(w, http.StatusBadRequest, "invalid_request_error", "a batch can be deleted only once it has ended; cancel it first")
		return
	}
	delete(s.batches, id)
	ids := s.order[ProviderAnthropic]
	for i, x := range ids {
		if x == id {
			s.order[ProviderAnthropic] = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	upstream.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message_batch_deleted"})
}

func (s *Server) handleListMessageBatches(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := listLimit(q.Get("limit"))
	if !ok {
		anthropicErr(w, http.StatusBadRequest, "invalid_request_error", "limit: must be between 1 and 100")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := newestFirst(s.order[ProviderAnthropic], q.Get("after_id"), q.Get("before_id"))
	more := len(ids) > limit
	if q.Get("before_id") != "" {
		ids = ids[max(0, len(ids)-limit):]
		more = len(ids) < len(newestFirst(s.order[ProviderAnthropic], "", q.Get("before_id")))
	} else {
		ids = ids[:min(limit, len(ids))]
	}
	now := s.cfg.Now()
	data := make([]messageBatch, 0, len(ids))
	for _, id := range ids {
		data = append(data, s.anthropicView(s.batches[id], now))
	}
	page := map[string]any{"data": data, "has_more": more, "first_id": nil, "last_id": nil}
	if len(ids) > 0 {
		page["first_id"], page["last_id"] = ids[0], ids[len(ids)-1]
	}
	upstream.WriteJSON(w, http.StatusOK, page)
}
