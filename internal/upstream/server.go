package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a running upstream simulator. Create it with [New] and stop it
// with [Server.Close]; all methods are safe for concurrent use.
type Server struct {
	*Listener // URL, Close

	cfg  Config
	rand *lockedRand
	seq  atomic.Uint64 // response and request ids

	routesMu sync.RWMutex
	byName   map[string]*route
	epoch    time.Time // schedule epoch set by StartSchedule; zero until then
}

// New validates cfg, listens on cfg.Addr (default 127.0.0.1 on a free port)
// and serves until [Server.Close]. Unlike httptest.Server it has no
// dependency on package testing, so the demo and benchmarks can use it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("upstream config: %w", err)
	}
	l, err := listen(cfg)
	if err != nil {
		return nil, fmt.Errorf("upstream listen %s: %w", cfg.Addr, err)
	}
	s := &Server{
		Listener: l,
		cfg:      cfg,
		rand:     newLockedRand(cfg.Seed),
		byName:   make(map[string]*route, len(cfg.Routes)),
	}
	now := cfg.Now()
	for name, rc := range cfg.Routes {
		keys, _ := decodeSecrets(rc.Secrets) // validated above
		s.byName[name] = s.newRoute(rc, keys, now)
	}
	l.Serve(s.routes())
	return s, nil
}

// listen listens on cfg.Addr unless cfg names its own listener.
func listen(cfg Config) (*Listener, error) {
	if cfg.Listener != nil {
		return ListenOn(cfg.Listener), nil
	}
	return Listen(cfg.Addr)
}

// RouteURL returns the webhook receiver URL of route name, URL()+"/hooks/"+name.
func (s *Server) RouteURL(name string) string { return s.URL() + "/hooks/" + url.PathEscape(name) }

// LLMBaseURL returns the base under which route name serves the LLM
// endpoints: append "/v1/chat/completions" or "/v1/messages". It is the
// base URL for the Anthropic SDK; the OpenAI SDK wants LLMBaseURL+"/v1".
func (s *Server) LLMBaseURL(name string) string { return s.URL() + "/r/" + url.PathEscape(name) }

// SetLimit makes route name a token bucket of rate requests per second and
// capacity burst (0 means max(1, ceil(rate))), atomically, keeping the
// tokens it holds (capped at the new burst). A rate of 0 removes the limit.
// It fails for an unknown route or an invalid limit.
func (s *Server) SetLimit(name string, rate float64, burst int) error {
	return s.UpdateRoute(name, func(rc *RouteConfig) {
		rc.Algorithm, rc.Rate, rc.Burst, rc.Window, rc.Limit = AlgorithmTokenBucket, rate, burst, 0, 0
		if rate == 0 {
			rc.Algorithm = AlgorithmNone
		}
	})
}

// UpdateRoute changes route name's configuration atomically: fn edits a
// copy (with Algorithm already resolved), which is validated and then
// replaces the old one; requests see either the old or the new
// configuration. Limiter state carries over when the algorithm stays the
// same. fn runs under the route's lock and must not call the Server. Most
// callers want [Server.SetLimit]; use UpdateRoute to rotate Secrets or to
// switch faults on and off.
func (s *Server) UpdateRoute(name string, fn func(*RouteConfig)) error {
	rt := s.route(name)
	if rt == nil {
		return fmt.Errorf("upstream: unknown route %q", name)
	}
	if err := rt.update(fn, s.cfg.Now()); err != nil {
		return fmt.Errorf("upstream route %q: %w", name, err)
	}
	return nil
}

// AddRoute adds route name, or replaces its configuration if it exists
// (keeping its counters). Use it for routes created during a run, e.g. one
// per webhook subscriber.
func (s *Server) AddRoute(name string, rc RouteConfig) error {
	if err := validRouteName(name); err != nil {
		return err
	}
	rc = rc.WithDefaults()
	if err := rc.validate(); err != nil {
		return fmt.Errorf("upstream route %q: %w", name, err)
	}
	keys, _ := decodeSecrets(rc.Secrets)
	now := s.cfg.Now()
	s.routesMu.Lock()
	defer s.routesMu.Unlock()
	if rt, ok := s.byName[name]; ok {
		rt.reconfigure(rc, keys, now)
		return nil
	}
	s.byName[name] = s.newRoute(rc, keys, now)
	return nil
}

// newRoute builds a route; routesMu is held or the server is not serving yet.
func (s *Server) newRoute(rc RouteConfig, keys [][]byte, now time.Time) *route {
	rt := newRoute(rc, keys, now, s.cfg.MaxTrackedIDs, s.cfg.TimelineSeconds)
	if !s.epoch.IsZero() {
		rt.epoch = s.epoch
	}
	if s.cfg.RecordArrivals {
		rt.maxArrivals = s.cfg.MaxTrackedIDs
	}
	return rt
}

// StartSchedule restarts every route's schedule of limit changes
// (RouteConfig.Changes) at epoch, also for routes added later: a
// benchmark calls it when its senders start, so that "the limit halves
// 5 s in" means 5 s into the run. Until it is called a route's schedule
// runs from the route's creation.
func (s *Server) StartSchedule(epoch time.Time) {
	s.routesMu.Lock()
	defer s.routesMu.Unlock()
	s.epoch = epoch
	for _, rt := range s.byName {
		rt.startSchedule(epoch)
	}
}

// Arrivals returns the arrival times, in order, of route name's accepted
// requests (2xx answers, stamped when the request was decided, before any
// latency); nil for an unknown route or when Config.RecordArrivals is off.
func (s *Server) Arrivals(name string) []time.Time {
	rt := s.route(name)
	if rt == nil {
		return nil
	}
	return rt.arrivalTimes()
}

// Script queues canned responses for route name. Each request to the
// route, on any endpoint, takes the next one before any other step runs,
// in order, until the queue is empty; then normal behaviour resumes. Tests
// use it to script sequences such as "429, then bad output, then good".
func (s *Server) Script(name string, rs ...Response) error {
	rt := s.route(name)
	if rt == nil {
		return fmt.Errorf("upstream: unknown route %q", name)
	}
	queued := make([]Response, len(rs))
	for i, r := range rs {
		if r.Status < 200 || r.Status > 999 {
			return fmt.Errorf("upstream: Script response %d: status %d not in 200..999", i, r.Status)
		}
		queued[i] = Response{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
	}
	rt.enqueue(queued)
	return nil
}

// Stats returns a snapshot of every route's counters.
func (s *Server) Stats() Report {
	now := s.cfg.Now()
	s.routesMu.RLock()
	routes := maps.Clone(s.byName)
	s.routesMu.RUnlock()
	rep := Report{Now: now, Routes: make(map[string]RouteReport, len(routes))}
	for name, rt := range routes {
		rep.Routes[name] = rt.snapshot(now)
	}
	return rep
}

func (s *Server) route(name string) *route {
	s.routesMu.RLock()
	defer s.routesMu.RUnlock()
	return s.byName[name]
}

// routes is the one table of the simulator's endpoints.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{name}", s.handlePostHook)
	mux.HandleFunc("POST /v1/chat/completions", s.handlePostChatCompletions)
	mux.HandleFunc("POST /r/{name}/v1/chat/completions", s.handlePostChatCompletions)
	mux.HandleFunc("POST /v1/messages", s.handlePostMessages)
	mux.HandleFunc("POST /r/{name}/v1/messages", s.handlePostMessages)
	mux.HandleFunc("GET /_stats", s.handleGetStats)
	mux.HandleFunc("GET /_healthz", s.handleGetHealth)
	mux.HandleFunc("POST /_schedule", s.handlePostSchedule)
	return mux
}

// wait sleeps for d unless the request or the server ends first, and
// reports whether the answer should still be written.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.Done():
		return false
	}
}

func (s *Server) handleGetStats(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, s.Stats())
}

// handlePostSchedule starts every route's schedule of limit changes now
// (StartSchedule), for a sender in another process that starts its
// workers when it is ready; it answers {"epoch": ...}. With ?phase=250ms
// (a Go duration in [0, 1s)) it first waits until that phase of the
// clock's next second and starts the schedule there (StartScheduleAt), so
// that the sender, starting when the answer arrives, meets the clock-aligned
// windows at the same phase as an in-process sender.
func (s *Server) handlePostSchedule(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Query().Get("phase"); p != "" {
		phase, err := time.ParseDuration(p)
		if err == nil {
			err = CheckPhase(phase)
		}
		if err != nil {
			http.Error(w, fmt.Sprintf("phase: %v", err), http.StatusBadRequest)
			return
		}
		at, err := s.StartScheduleAt(r.Context(), phase)
		if err != nil {
			return // the client or the server went away
		}
		WriteJSON(w, http.StatusOK, map[string]time.Time{"epoch": at})
		return
	}
	now := s.cfg.Now()
	s.StartSchedule(now)
	WriteJSON(w, http.StatusOK, map[string]time.Time{"epoch": now})
}

// ScheduleEpoch returns the epoch of the last StartSchedule (or POST
// /_schedule), zero when the schedule was never started.
func (s *Server) ScheduleEpoch() time.Time {
	s.routesMu.RLock()
	defer s.routesMu.RUnlock()
	return s.epoch
}

func (s *Server) handleGetHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// serve answers one request to route name on endpoint d: it reads the
// body, decides, waits the latency and writes the answer in d's format.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, name string, d dialect) {
	rt := s.route(name)
	if rt == nil {
		d.writeError(w, http.StatusNotFound, stepInvalid, "unknown route")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			d.writeError(w, http.StatusRequestEntityTooLarge, stepInvalid, "request body too large")
		}
		return // the client went away
	}
	req, invalid := d.parse(body, name)
	now := s.cfg.Now()
	v := rt.decide(s, now, incoming{endpoint: d.endpoint(), header: r.Header, body: body, invalid: invalid != ""})
	if v.held {
		defer rt.release()
	}
	if v.step == stepScripted {
		writeScripted(w, v.script)
		return
	}
	if !s.wait(r.Context(), v.delay) {
		// Returning would send an implicit 200; abort the connection instead.
		panic(http.ErrAbortHandler)
	}
	h := w.Header()
	if name := d.requestIDHeader(); name != "" {
		h.Set(name, "req_"+s.nextID())
	}
	// Date is the server's clock when it answers (after the latency), on
	// its own, possibly skewed, clock; net/http would use the real one.
	h.Set("Date", s.cfg.Now().Add(v.cfg.DateSkew).UTC().Format(http.TimeFormat))
	writeLimitHeaders(h, headerStyle(v.cfg.Headers, d), v.dec, now)
	if v.step == stepOverLimit {
		writeRetryAfter(h, v.cfg.OverLimit, v.dec.retryAfter, now.Add(v.cfg.DateSkew))
	}
	s.writeVerdict(w, d, v, req, invalid)
}

func headerStyle(style HeaderStyle, d dialect) HeaderStyle {
	if style == HeaderStyleNative {
		return d.nativeHeaders()
	}
	return style
}

// writeVerdict writes the status and body of a non-scripted answer.
func (s *Server) writeVerdict(w http.ResponseWriter, d dialect, v verdict, req LLMRequest, invalid string) {
	switch {
	case v.status >= 200 && v.status <= 299:
		d.writeSuccess(w, s, v.status, req)
	case v.step == stepInvalid:
		d.writeError(w, v.status, v.step, invalid)
	default:
		d.writeError(w, v.status, v.step, "")
	}
}

// writeScripted writes r exactly: no Date, no sniffed Content-Type.
func writeScripted(w http.ResponseWriter, r Response) {
	h := w.Header()
	maps.Copy(h, r.Header)
	if _, ok := h["Date"]; !ok {
		h["Date"] = nil
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body)
}

// WriteJSON answers status with v as JSON (and a final newline), or 500 if
// v does not encode; both simulators answer this way.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// nextID returns a process-unique, deterministic suffix for response ids.
func (s *Server) nextID() string { return fmt.Sprintf("sim%012d", s.seq.Add(1)) }
