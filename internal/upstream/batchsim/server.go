package batchsim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// Server is a running batch API simulator. Create it with [New], stop it
// with [Server.Close]. All methods are safe for concurrent use.
type Server struct {
	*upstream.Listener // URL, Close

	cfg Config

	mu       sync.Mutex
	seq      uint64
	files    map[string]*simFile
	batches  map[string]*simBatch
	order    map[string][]string // provider -> batch ids, oldest first
	attempts map[string]int      // provider+"\x00"+custom_id -> batches seen in
	reject   map[string]rejection
	stats    Stats
}

// rejection is a pending series of 429 answers to creates.
type rejection struct {
	n          int
	retryAfter time.Duration
}

// Stats counts what the simulator was asked to do, for tests that prove a
// client neither duplicates nor skips a call.
type Stats struct {
	// Uploads counts accepted OpenAI file uploads.
	Uploads int
	// OpenAIBatches and AnthropicBatches count created batches.
	OpenAIBatches, AnthropicBatches int
	// Rejected counts creates answered 429 by RejectCreates.
	Rejected int
	// ResultDownloads counts downloads of OpenAI output or error files
	// and of Anthropic results.
	ResultDownloads int
	// Cancels counts accepted cancel requests.
	Cancels int
	// Structured counts requests of created batches that asked for
	// structured output with a schema the provider accepts.
	Structured int
}

// New validates cfg, listens on cfg.Addr and serves until Close. The base
// URL is URL(): the OpenAI SDK wants URL()+"/v1/", the Anthropic SDK
// URL()+"/".
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("batchsim config: %w", err)
	}
	l, err := upstream.Listen(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("batchsim listen %s: %w", cfg.Addr, err)
	}
	s := &Server{
		Listener: l,
		cfg:      cfg,
		files:    map[string]*simFile{},
		batches:  map[string]*simBatch{},
		order:    map[string][]string{},
		attempts: map[string]int{},
		reject:   map[string]rejection{},
	}
	l.Serve(s.Handler())
	return s, nil
}

// RejectCreates makes the next n batch creates of provider (ProviderOpenAI
// or ProviderAnthropic) fail with 429 and a Retry-After of retryAfter
// (rounded up to whole seconds, plus retry-after-ms), as the providers
// answer when their batch queue or rate limit is full. Nothing is created.
func (s *Server) RejectCreates(provider string, n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reject[provider] = rejection{n: n, retryAfter: retryAfter}
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Handler returns the simulator's routes, for mounting it in another
// server; New serves it on its own listener.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/files", s.openAI(s.handlePostFile))
	mux.HandleFunc("GET /v1/files/{id}", s.openAI(s.handleGetFile))
	mux.HandleFunc("GET /v1/files/{id}/content", s.openAI(s.handleGetFileContent))
	mux.HandleFunc("DELETE /v1/files/{id}", s.openAI(s.handleDeleteFile))
	mux.HandleFunc("POST /v1/batches", s.openAI(s.handlePostBatch))
	mux.HandleFunc("GET /v1/batches", s.openAI(s.handleListBatches))
	mux.HandleFunc("GET /v1/batches/{id}", s.openAI(s.openAIBatch(s.handleGetBatch)))
	mux.HandleFunc("POST /v1/batches/{id}/cancel", s.openAI(s.openAIBatch(s.handleCancelBatch)))

	mux.HandleFunc("POST /v1/messages/batches", s.anthropic(s.handlePostMessageBatch))
	mux.HandleFunc("GET /v1/messages/batches", s.anthropic(s.handleListMessageBatches))
	mux.HandleFunc("GET /v1/messages/batches/{id}", s.anthropic(s.anthropicBatch(s.handleGetMessageBatch)))
	mux.HandleFunc("GET /v1/messages/batches/{id}/results", s.anthropic(s.anthropicBatch(s.handleGetMessageBatchResults)))
	mux.HandleFunc("POST /v1/messages/batches/{id}/cancel", s.anthropic(s.anthropicBatch(s.handleCancelMessageBatch)))
	mux.HandleFunc("DELETE /v1/messages/batches/{id}", s.anthropic(s.anthropicBatch(s.handleDeleteMessageBatch)))
	return mux
}

// batchHandler serves a request on one batch, with s.mu held.
type batchHandler func(w http.ResponseWriter, r *http.Request, b *simBatch)

// batchRoute is the shape of every route on one batch: it holds s.mu for
// the whole request, finds provider's batch {id} (a batch of the other
// provider is not found, as it would not be at the real API) and answers
// notFound when there is none.
func (s *Server) batchRoute(provider string, notFound func(w http.ResponseWriter, id string), h batchHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		id := r.PathValue("id")
		b := s.batches[id]
		if b == nil || b.provider != provider {
			notFound(w, id)
			return
		}
		h(w, r, b)
	}
}

// addBatch schedules a new batch's processing and records it, last in its
// provider's order. Call with s.mu held.
func (s *Server) addBatch(b *simBatch) {
	b.schedule(s.cfg.ProcessFor)
	for _, r := range b.reqs {
		if r.req.Schema != nil {
			s.stats.Structured++
		}
	}
	s.batches[b.id] = b
	s.order[b.provider] = append(s.order[b.provider], b.id)
}

// nextID returns prefix followed by a fresh, sortable sequence number.
// Call with s.mu held.
func (s *Server) nextID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s%012d", prefix, s.seq)
}

// takeRejection consumes one pending 429 for provider. Call with s.mu held.
func (s *Server) takeRejection(provider string) (time.Duration, bool) {
	r := s.reject[provider]
	if r.n <= 0 {
		return 0, false
	}
	r.n--
	s.reject[provider] = r
	s.stats.Rejected++
	return r.retryAfter, true
}

// setRetryAfter writes Retry-After in whole seconds (rounded up, so no
// client retries early) and retry-after-ms.
func setRetryAfter(h http.Header, d time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10))
	h.Set("retry-after-ms", strconv.FormatInt(d.Milliseconds(), 10))
}

// attempt counts one more submission of customID to provider and returns
// the count. Call with s.mu held.
func (s *Server) attempt(provider, customID string) int {
	k := provider + "\x00" + customID
	s.attempts[k]++
	return s.attempts[k]
}

// keyOK checks a presented key against Config.APIKey.
func (s *Server) keyOK(key string) bool {
	if s.cfg.APIKey != "" {
		return key == s.cfg.APIKey
	}
	return key != ""
}

// unix is t in Unix seconds, or nil for the zero time (OpenAI sends null).
func unix(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.Unix()
	return &v
}

// rfc3339 is t as RFC 3339, or nil for the zero time (Anthropic sends null).
func rfc3339(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	v := t.UTC().Format(time.RFC3339Nano)
	return &v
}

// listLimit reads a list endpoint's limit: default 20, 1..100 (both
// providers document that range for batch lists).
func listLimit(q string) (int, bool) {
	if q == "" {
		return 20, true
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > 100 {
		return 0, false
	}
	return n, true
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) string {
	v := r.Header.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}
