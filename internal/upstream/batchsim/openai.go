package batchsim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// simFile is an OpenAI file: an uploaded input or a generated result.
type simFile struct {
	id       string
	purpose  string
	filename string
	created  time.Time
	data     []byte
}

// openAIFile is OpenAI's file object.
type openAIFile struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Bytes         int64   `json:"bytes"`
	CreatedAt     int64   `json:"created_at"`
	ExpiresAt     *int64  `json:"expires_at"`
	Filename      string  `json:"filename"`
	Purpose       string  `json:"purpose"`
	Status        string  `json:"status"`
	StatusDetails *string `json:"status_details"`
}

// batchFileTTL is how long batch input and output files live by default
// (OpenAI: 30 days for purpose=batch).
const batchFileTTL = 30 * 24 * time.Hour

func (f *simFile) object() openAIFile {
	exp := unix(f.created.Add(batchFileTTL))
	return openAIFile{ID: f.id, Object: "file", Bytes: int64(len(f.data)), CreatedAt: f.created.Unix(),
		ExpiresAt: exp, Filename: f.filename, Purpose: f.purpose, Status: "processed"}
}

// openAIErr writes OpenAI's error body {"error":{message,type,param,code}}.
func openAIErr(w http.ResponseWriter, status int, typ, code, param, msg string) {
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	if param != "" {
		e["param"] = param
	}
	upstream.WriteJSON(w, status, map[string]any{"error": e})
}

func invalidRequest(w http.ResponseWriter, param, msg string) {
	openAIErr(w, http.StatusBadRequest, "invalid_request_error", "", param, msg)
}

// openAI wraps an OpenAI handler with the Date header and key check.
func (s *Server) openAI(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", s.cfg.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("x-request-id", fmt.Sprintf("req_%d", time.Now().UnixNano()))
		if !s.keyOK(bearer(r)) {
			openAIErr(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "", "Incorrect API key provided.")
			return
		}
		h(w, r)
	}
}

var filePurposes = []string{"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}

func (s *Server) handlePostFile(w http.ResponseWriter, r *http.Request) {
	limit := s.cfg.Limits.OpenAIMaxUploadBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20) // room for the multipart framing
	mr, err := r.MultipartReader()
	if err != nil {
		invalidRequest(w, "", "request body must be multipart/form-data")
		return
	}
	var purpose, filename string
	var data []byte
	gotFile := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.uploadErr(w, err)
			return
		}
		switch part.FormName() {
		case "purpose":
			b, err := io.ReadAll(io.LimitReader(part, 64))
			if err != nil {
				s.uploadErr(w, err)
				return
			}
			purpose = string(b)
		case "file":
			filename, gotFile = part.FileName(), true
			data, err = io.ReadAll(io.LimitReader(part, limit+1))
			if err != nil {
				s.uploadErr(w, err)
				return
			}
			if int64(len(data)) > limit {
				openAIErr(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "file_too_large", "file",
					fmt.Sprintf("File is too large: the maximum is %d bytes.", limit))
				return
			}
		}
	}
	switch {
	case !gotFile:
		invalidRequest(w, "file", "Missing required parameter: 'file'.")
		return
	case !slices.Contains(filePurposes, purpose):
		invalidRequest(w, "purpose", fmt.Sprintf("Invalid value for 'purpose': %q.", purpose))
		return
	case purpose == "batch" && !strings.HasSuffix(filename, ".jsonl"):
		invalidRequest(w, "file", "Invalid file format for Batch API. Must be .jsonl")
		return
	}
	s.mu.Lock()
	f := &simFile{id: s.nextID("file-"), purpose: purpose, filename: filename, created: s.cfg.Now(), data: data}
	s.files[f.id] = f
	s.stats.Uploads++
	obj := f.object()
	s.mu.Unlock()
	upstream.WriteJSON(w, http.StatusOK, obj)
}

func (s *Server) uploadErr(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		openAIErr(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "file_too_large", "file", "File is too large.")
		return
	}
	invalidRequest(w, "", "malformed multipart body")
}

func (s *Server) file(id string) *simFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[id]
}

func notFound(w http.ResponseWriter, what, id string) {
	openAIErr(w, http.StatusNotFound, "invalid_request_error", "", "", fmt.Sprintf("No such %s: '%s'", what, id))
}

func (s *Server) handleGetFile(w http.ResponseWriter, r *http.Request) {
	f := s.file(r.PathValue("id"))
	if f == nil {
		notFound(w, "File", r.PathValue("id"))
		return
	}
	upstream.WriteJSON(w, http.StatusOK, f.object())
}

func (s *Server) handleGetFileContent(w http.ResponseWriter, r *http.Request) {
	f := s.file(r.PathValue("id"))
	if f == nil || s.cfg.Now().After(f.created.Add(batchFileTTL)) {
		notFound(w, "File", r.PathValue("id"))
		return
	}
	if f.purpose == "batch_output" {
		s.mu.Lock()
		s.stats.ResultDownloads++
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(f.data)
}

func (s *Server) handleDeleteFile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	_, ok := s.files[id]
	delete(s.files, id)
	s.mu.Unlock()
	if !ok {
		notFound(w, "File", id)
		return
	}
	upstream.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "file", "deleted": true})
}

// batchCreate is the body of POST /v1/batches.
type batchCreate struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

// batchEndpoint is the only endpoint the simulator runs; the real API
// also accepts /v1/responses, /v1/embeddings and others.
const batchEndpoint = "/v1/chat/completions"

func (s *Server) handlePostBatch(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	d, rejected := s.takeRejection(ProviderOpenAI)
	s.mu.Unlock()
	if rejected {
		setRetryAfter(w.Header(), d)
		openAIErr(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "",
			"Rate limit reached for batch creation. Please try again later.")
		return
	}
	var in batchCreate
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
		invalidRequest(w, "", "We could not parse the JSON body of your request.")
		return
	}
	switch {
	case in.CompletionWindow != "24h":
		invalidRequest(w, "completion_window", "Invalid value for 'completion_window': only '24h' is supported.")
		return
	case in.Endpoint != batchEndpoint:
		invalidRequest(w, "endpoint", "Invalid value for 'endpoint': the simulator supports '/v1/chat/completions' only.")
		return
	case len(in.Metadata) > 16:
		invalidRequest(w, "metadata", "Invalid 'metadata': at most 16 keys.")
		return
	}
	f := s.file(in.InputFileID)
	if f == nil || f.purpose != "batch" {
		invalidRequest(w, "input_file_id", fmt.Sprintf("Invalid 'input_file_id': '%s'.", in.InputFileID))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	b := &simBatch{provider: ProviderOpenAI, id: s.nextID("batch_"), created: now, expires: now.Add(s.cfg.Window),
		start: now.Add(s.cfg.ValidateFor), endpoint: in.Endpoint, inputFileID: in.InputFileID,
		window: in.CompletionWindow, metadata: in.Metadata}
	b.reqs, b.invalid = s.parseInput(f.data, in.Endpoint)
	s.addBatch(b)
	s.stats.OpenAIBatches++
	upstream.WriteJSON(w, http.StatusOK, s.openAIView(b, now))
}

// inputLine is one line of a batch input file.
type inputLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// parseInput validates an input file as OpenAI does during "validating":
// a malformed file fails the whole batch, with errors naming the lines
// (codes chosen by the simulator; OpenAI's exact codes for each case are
// not published). Requests whose body is unusable are kept and answered
// with a per-request 400, as OpenAI does. Call with s.mu held.
func (s *Server) parseInput(data []byte, endpoint string) ([]simRequest, []batchError) {
	lim := s.cfg.Limits
	if int64(len(data)) > lim.OpenAIMaxInputBytes {
		return nil, []batchError{{Code: "file_too_large",
			Message: fmt.Sprintf("The input file is %d bytes; the maximum for a batch is %d.", len(data), lim.OpenAIMaxInputBytes)}}
	}
	var reqs []simRequest
	var errs []batchError
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), len(data)+1)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		n := lineNo
		bad := func(code, msg string) { errs = append(errs, batchError{Code: code, Message: msg, Line: &n}) }
		var in inputLine
		switch err := json.Unmarshal(raw, &in); {
		case err != nil:
			bad("invalid_json_line", "This line is not parseable as valid JSON.")
		case in.CustomID == "":
			bad("missing_custom_id", "custom_id is required.")
		case seen[in.CustomID]:
			bad("duplicate_custom_id", "The custom_id for this request is a duplicate of another request.")
		case in.Method != http.MethodPost:
			bad("invalid_method", "method must be POST.")
		case in.URL != endpoint:
			bad("mismatched_endpoint", "The url for this request does not match the batch's endpoint.")
		default:
			seen[in.CustomID] = true
			req, why := parseParams(in.Body, ProviderOpenAI, false)
			reqs = append(reqs, simRequest{customID: in.CustomID, req: req, invalid: why})
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, batchError{Code: "invalid_file", Message: "The input file could not be read as JSONL."})
	}
	if len(reqs)+len(errs) > lim.OpenAIMaxRequests {
		errs = append(errs, batchError{Code: "too_many_requests",
			Message: fmt.Sprintf("The input file has %d requests; the maximum for a batch is %d.", len(reqs)+len(errs), lim.OpenAIMaxRequests)})
	}
	if len(reqs) == 0 && len(errs) == 0 {
		errs = append(errs, batchError{Code: "empty_file", Message: "The input file has no requests."})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	for i := range reqs {
		reqs[i].fault = s.cfg.Fault(FaultRequest{Provider: ProviderOpenAI, CustomID: reqs[i].customID,
			Attempt: s.attempt(ProviderOpenAI, reqs[i].customID)})
	}
	return reqs, nil
}

// openAIBatch is OpenAI's batch object.
type openAIBatch struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           *openAIErrors     `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    openAICounts      `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
}

type openAIErrors struct {
	Object string       `json:"object"`
	Data   []batchError `json:"data"`
}

type openAICounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// openAIPhase is an OpenAI batch's status at now and when it entered it.
func (s *Server) openAIPhase(b *simBatch, now time.Time, v *openAIBatch) string {
	validated := b.start
	if !b.cancelAt.IsZero() {
		v.CancellingAt = unix(b.cancelAt)
		if !b.cancelAt.Before(validated) {
			v.InProgressAt = unix(validated)
		}
		if end := b.cancelAt.Add(s.cfg.CancelFor); !now.Before(end) {
			v.CancelledAt = unix(end)
			return "cancelled"
		}
		return "cancelling"
	}
	if now.Before(validated) {
		return "validating"
	}
	if len(b.invalid) > 0 {
		v.FailedAt = unix(validated)
		return "failed"
	}
	v.InProgressAt = unix(validated)
	end, ok := b.naturalEnd()
	if !ok {
		if now.Before(end) {
			return "in_progress"
		}
		v.ExpiredAt = unix(end)
		return "expired"
	}
	if now.Before(end) {
		return "in_progress"
	}
	v.FinalizingAt = unix(end)
	if done := end.Add(s.cfg.FinalizeFor); !now.Before(done) {
		v.CompletedAt = unix(done)
		return "completed"
	}
	return "finalizing"
}

// openAIView renders b at now, building its result files the first time
// it is seen ended. Call with s.mu held.
func (s *Server) openAIView(b *simBatch, now time.Time) openAIBatch {
	v := openAIBatch{ID: b.id, Object: "batch", Endpoint: b.endpoint, InputFileID: b.inputFileID,
		CompletionWindow: b.window, CreatedAt: b.created.Unix(), ExpiresAt: unix(b.expires), Metadata: b.metadata}
	v.Status = s.openAIPhase(b, now, &v)
	if len(b.invalid) > 0 && v.Status == "failed" {
		v.Errors = &openAIErrors{Object: "list", Data: b.invalid}
	}
	v.RequestCounts.Total = len(b.reqs)
	for _, r := range b.reqs {
		if !b.doneBy(r, now) || r.fault == FaultDrop {
			continue
		}
		if r.invalid != "" || r.fault == FaultInvalid || r.fault == FaultServerError {
			v.RequestCounts.Failed++
		} else {
			v.RequestCounts.Completed++
		}
	}
	switch v.Status {
	case "completed", "expired", "cancelled":
		s.materializeOpenAI(b, v.Status)
		if b.outputFileID != "" {
			v.OutputFileID = &b.outputFileID
		}
		if b.errorFileID != "" {
			v.ErrorFileID = &b.errorFileID
		}
	}
	return v
}

// outputLine is one line of an output or error file.
type outputLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *outputResponse `json:"response"`
	Error    *outputError    `json:"error"`
}

type outputResponse struct {
	StatusCode int    `json:"status_code"`
	RequestID  string `json:"request_id"`
	Body       any    `json:"body"`
}

type outputError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// materializeOpenAI writes b's output and error files once. Call with
// s.mu held.
func (s *Server) materializeOpenAI(b *simBatch, status string) {
	if b.materialized {
		return
	}
	b.materialized = true
	var out, errs bytes.Buffer
	add := func(buf *bytes.Buffer, l outputLine) {
		line, _ := json.Marshal(l) // plain structs: cannot fail
		buf.Write(line)
		buf.WriteByte('\n')
	}
	for _, i := range b.shuffled() {
		r := b.reqs[i]
		l := outputLine{ID: s.nextID("batch_req_"), CustomID: r.customID}
		reqID := s.nextID("req_")
		switch {
		case !b.doneBy(r, b.cutoff()) && status == "cancelled":
			l.Error = &outputError{Code: "batch_cancelled", Message: "The batch was cancelled before this request executed."}
			add(&errs, l)
		case !b.doneBy(r, b.cutoff()):
			l.Error = &outputError{Code: "batch_expired", Message: "This request could not be executed before the completion window expired."}
			add(&errs, l)
		case r.fault == FaultDrop:
		case r.invalid != "" || r.fault == FaultInvalid:
			msg := r.invalid
			if msg == "" {
				msg = "Invalid request."
			}
			l.Response = &outputResponse{StatusCode: 400, RequestID: reqID, Body: map[string]any{"error": map[string]any{
				"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}}}
			add(&errs, l)
		case r.fault == FaultServerError:
			l.Response = &outputResponse{StatusCode: 500, RequestID: reqID, Body: map[string]any{"error": map[string]any{
				"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error", "param": nil, "code": nil}}}
			add(&errs, l)
		default:
			l.Response = &outputResponse{StatusCode: 200, RequestID: reqID, Body: s.chatCompletion(r, b.created)}
			add(&out, l)
		}
	}
	file := func(buf *bytes.Buffer, suffix string) string {
		if buf.Len() == 0 {
			return ""
		}
		f := &simFile{id: s.nextID("file-"), purpose: "batch_output", filename: b.id + suffix,
			created: s.cfg.Now(), data: buf.Bytes()}
		s.files[f.id] = f
		return f.id
	}
	b.outputFileID = file(&out, "_output.jsonl")
	b.errorFileID = file(&errs, "_error.jsonl")
}

// chatCompletion is the body of a successful chat completion.
func (s *Server) chatCompletion(r simRequest, created time.Time) map[string]any {
	text := s.answer(r)
	in, out := promptTokens(r.req), estimateTokens(text)
	return map[string]any{
		"id": s.nextID("chatcmpl-"), "object": "chat.completion", "created": created.Unix(), "model": r.req.Model,
		"choices": []any{map[string]any{"index": 0, "logprobs": nil, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": text, "refusal": nil}}},
		"usage":              map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
		"system_fingerprint": nil,
	}
}

// openAIBatch serves a route on one OpenAI batch (see [Server.batchRoute]),
// answering OpenAI's 404 for an unknown id.
func (s *Server) openAIBatch(h batchHandler) http.HandlerFunc {
	return s.batchRoute(ProviderOpenAI, func(w http.ResponseWriter, id string) { notFound(w, "batch", id) }, h)
}

func (s *Server) handleGetBatch(w http.ResponseWriter, _ *http.Request, b *simBatch) {
	upstream.WriteJSON(w, http.StatusOK, s.openAIView(b, s.cfg.Now()))
}

func (s *Server) handleCancelBatch(w http.ResponseWriter, _ *http.Request, b *simBatch) {
	now := s.cfg.Now()
	switch v := s.openAIView(b, now); v.Status {
	case "cancelling":
	case "validating", "in_progress":
		b.cancelAt = now
		s.stats.Cancels++
	default:
		openAIErr(w, http.StatusConflict, "invalid_request_error", "", "",
			fmt.Sprintf("Cannot cancel a batch with status '%s'.", v.Status))
		return
	}
	upstream.WriteJSON(w, http.StatusOK, s.openAIView(b, now))
}

func (s *Server) handleListBatches(w http.ResponseWriter, r *http.Request) {
	limit, ok := listLimit(r.URL.Query().Get("limit"))
	if !ok {
		invalidRequest(w, "limit", "limit must be between 1 and 100.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := newestFirst(s.order[ProviderOpenAI], r.URL.Query().Get("after"), "")
	more := len(ids) > limit
	ids = ids[:min(limit, len(ids))]
	now := s.cfg.Now()
	data := make([]openAIBatch, 0, len(ids))
	for _, id := range ids {
		data = append(data, s.openAIView(s.batches[id], now))
	}
	page := map[string]any{"object": "list", "data": data, "has_more": more, "first_id": nil, "last_id": nil}
	if len(ids) > 0 {
		page["first_id"], page["last_id"] = ids[0], ids[len(ids)-1]
	}
	upstream.WriteJSON(w, http.StatusOK, page)
}

// newestFirst returns ids (oldest first) newest first, starting after the
// id after (exclusive) or ending before the id before (exclusive).
func newestFirst(ids []string, after, before string) []string {
	out := slices.Clone(ids)
	slices.Reverse(out)
	if after != "" {
		if i := slices.Index(out, after); i >= 0 {
			out = out[i+1:]
		}
	}
	if before != "" {
		if i := slices.Index(out, before); i >= 0 {
			out = out[:i]
		}
	}
	return out
}
