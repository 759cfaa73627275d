package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/engine"
)

// Server serves ratelane's HTTP API over the stores of its regions. It is
// safe for concurrent use; Handler is what an http.Server serves.
type Server struct {
	cfg      Config
	regions  []string
	log      *slog.Logger
	mux      *http.ServeMux
	handler  http.Handler
	table    []route
	limiter  *keyLimiter
	backlog  *backlogCache
	leased   *leasedJobs
	limits   *limitCache
	ready    readyCache
	requests *prometheus.CounterVec
	wakers   map[string]*waker
	jobs     map[string]*engine.Jobs // each region's one writer of job state
	closed   chan struct{}
	once     sync.Once
	// vars documents the examples' shell variables, the core's and the
	// mounted routes'.
	vars map[string]string
	// results re-render the results of a plug-in's kinds before a route
	// shows them (mount.Host.ShowResult); written only while mounting.
	results map[string]func(json.RawMessage) json.RawMessage
	// discovery and openapi are the documents, rendered once in New.
	discovery, openapi []byte
}

// handlerFunc is the shape of every endpoint: it writes a success response
// or returns an error, which the server turns into a problem+json answer.
// p is the zero Principal on public routes.
type handlerFunc func(w http.ResponseWriter, r *http.Request, p auth.Principal) error

// New validates cfg (after WithDefaults) and returns a server ready to
// serve. It registers the request counter on cfg.Registerer, if set.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, regions: cfg.regionNames(), log: cfg.Logger.With("component", "httpapi"),
		mux: http.NewServeMux(), limiter: newKeyLimiter(cfg.RequestRate, cfg.RequestBurst),
		wakers: map[string]*waker{}, closed: make(chan struct{}), backlog: newBacklogCache(),
		leased: newLeasedJobs(), limits: newLimitCache(),
	}
	s.jobs = map[string]*engine.Jobs{}
	for _, r := range s.regions {
		s.wakers[r] = newWaker()
		s.jobs[r] = cfg.Jobs[r] // validate checked that every region has one
	}
	if err := s.registerMetrics(); err != nil {
		return nil, err
	}
	table, err := s.mountRoutes(s.routes())
	if err != nil {
		return nil, err
	}
	s.table = table
	for _, rt := range s.table {
		s.mux.Handle(rt.pattern(), s.wrap(rt))
	}
	if s.discovery, err = json.Marshal(s.discoveryDoc()); err != nil {
		return nil, fmt.Errorf("httpapi: render discovery document: %w", err)
	}
	if s.openapi, err = json.Marshal(s.openAPI()); err != nil {
		return nil, fmt.Errorf("httpapi: render OpenAPI document: %w", err)
	}
	s.handler = s.observe()
	return s, nil
}

// Handler returns the http.Handler that serves every route.
func (s *Server) Handler() http.Handler { return s.handler }

// Close ends the long polls of POST /v1/leases at once (they answer with
// no jobs), so that http.Server.Shutdown need not wait up to 30 s for them.
// It is idempotent; the server keeps serving other requests.
func (s *Server) Close() { s.once.Do(func() { close(s.closed) }) }

func (s *Server) registerMetrics() error {
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelane_api_requests_total",
		Help: "HTTP API requests by route (the ServeMux pattern, never the raw path) and status code.",
	}, []string{"route", "status"})
	if s.cfg.Registerer == nil {
		return nil
	}
	err := s.cfg.Registerer.Register(s.requests)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		// A second server on the same registry (tests, a restart in
		// process) shares the counter rather than failing.
		if cv, ok := already.ExistingCollector.(*prometheus.CounterVec); ok {
			s.requests = cv
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("httpapi: register metrics: %w", err)
	}
	return nil
}

// wrap turns a route into an http.Handler: it authenticates and authorizes
// the key for non-public routes, applies the key's request rate, then runs
// the handler and answers its error as a problem.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p auth.Principal
		if rt.role != "" {
			var err error
			if p, err = s.authenticate(r); err == nil {
				err = s.authorize(w, r, p, rt.role)
			}
			if err != nil {
				s.fail(w, r, err)
				return
			}
			if sw, ok := w.(*StatusWriter); ok {
				sw.keyID = p.KeyID
			}
		}
		if err := rt.handle(w, r, p); err != nil {
			s.fail(w, r, storeError(err, rt.what(r)))
		}
	})
}

// maxTokenLen bounds the bearer token read from a request.
const maxTokenLen = 512

func (s *Server) authenticate(r *http.Request) (auth.Principal, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > maxTokenLen {
		return auth.Principal{}, unauthenticated("send your API key as Authorization: Bearer <key>")
	}
	p, err := s.cfg.Auth.Authenticate(r.Context(), token)
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, ErrRevokedKey):
		return auth.Principal{}, unauthenticated("this API key was revoked; ask an admin for a new one")
	case errors.Is(err, ErrUnknownKey):
		return auth.Principal{}, unauthenticated("this API key is not known; check RATELANE_API_KEY")
	case errors.Is(err, context.Canceled):
		return auth.Principal{}, clientClosed(err)
	default:
		e := problemf(http.StatusServiceUnavailable, "unavailable", "API keys cannot be verified right now; retry shortly")
		e.cause = fmt.Errorf("authenticate: %w", err)
		return auth.Principal{}, e.withHeader("Retry-After", "1")
	}
}

func unauthenticated(detail string) *apiError {
	return problemf(http.StatusUnauthorized, "unauthenticated", "%s", detail).
		withHeader("WWW-Authenticate", `Bearer realm="ratelane"`)
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request, p auth.Principal, need auth.Role) error {
	if !p.Can(need) {
		return problemf(http.StatusForbidden, "forbidden", "%s %s needs a %s (or admin) API key; this key's role is %q",
			r.Method, r.URL.Path, need, p.Role)
	}
	return s.limiter.check(w.Header(), p.KeyID, s.cfg.Now())
}

// fail answers err as a problem, logging the cause of server-side errors.
//
// A request whose client went away is answered 499, not 500, and logged
// at debug: the store's "context canceled" (or whatever error a driver
// returns for an interrupted query) then says nothing about the server's
// health. It is recognised by its error or, for a 5xx, by the request's
// own context being canceled.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := toProblem(err)
	if e.p.Status >= 500 && errors.Is(r.Context().Err(), context.Canceled) {
		e = clientClosed(err)
	}
	canceled := e.p.Status == statusClientClosed
	if sw, ok := w.(*StatusWriter); ok && sw.Status != 0 {
		if canceled {
			s.log.Debug("request canceled by the client after the response started", "route", r.Pattern, "err", err)
		} else {
			s.log.Warn("error after the response started", "route", r.Pattern, "err", err)
		}
		return
	}
	switch {
	case canceled:
		s.log.Debug("request canceled by the client", "route", r.Pattern, "err", err)
	case e.p.Status >= 500 && e.p.Status != http.StatusNotImplemented: // 501: a feature the operator did not enable
		s.log.Error("request failed", "route", r.Pattern, "status", e.p.Status, "err", err)
	}
	writeProblem(w, r, e)
}

// observe counts and logs every request by route pattern and status, turns
// the mux's plain-text 404 and 405 into problems, and recovers panics.
func (s *Server) observe() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &StatusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.fail(sw, r, fmt.Errorf("panic: %v", v))
			}
			route := r.Pattern
			route = cmp.Or(route, "unmatched")
			status := sw.Status
			status = cmp.Or(status, http.StatusOK)
			s.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
			s.log.Debug("request", "route", route, "status", status, "key_id", sw.keyID, "duration", time.Since(start))
		}()
		if _, pattern := s.mux.Handler(r); pattern == "" {
			s.unmatched(sw, r)
			return
		}
		s.mux.ServeHTTP(sw, r)
	})
}

// unmatched answers a request no route matches: 405 with Allow when the
// path exists for other methods, else 404, both as problems.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	rec := &headerRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch {
	case rec.status == http.StatusMethodNotAllowed:
		allow := rec.header.Get("Allow")
		writeProblem(w, r, problemf(http.StatusMethodNotAllowed, "method-not-allowed",
			"%s does not accept %s; it accepts %s", r.URL.Path, r.Method, allow).withHeader("Allow", allow))
	case rec.status >= 300 && rec.status < 400:
		w.Header().Set("Location", rec.header.Get("Location"))
		w.WriteHeader(rec.status)
	default:
		writeProblem(w, r, problemf(http.StatusNotFound, "not-found",
			"there is no endpoint at %s %s; GET /v1 lists every endpoint", r.Method, r.URL.Path))
	}
}

// StatusWriter is an http.ResponseWriter that remembers the first status
// written (200 when the body starts without WriteHeader), for a caller that
// must know how a handler answered: the API's metrics and fail, which must
// not write a problem after a response started, and the dashboard's proxy,
// which ends a session whose key the API refused. Unwrap lets
// http.ResponseController reach the connection beneath.
type StatusWriter struct {
	http.ResponseWriter
	// Status is the status written; 0 until the response starts.
	Status int
	// keyID is the authenticated key's id, for the request log line.
	keyID string
}

// WriteHeader records code when it is the first status, then writes it.
func (w *StatusWriter) WriteHeader(code int) {
	w.Status = cmp.Or(w.Status, code)
	w.ResponseWriter.WriteHeader(code)
}

// Write records 200 when the response starts with the body.
func (w *StatusWriter) Write(b []byte) (int, error) {
	w.Status = cmp.Or(w.Status, http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the ResponseWriter beneath, for http.ResponseController.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headerRecorder captures the status and headers of the mux's own 404,
// 405 and redirect handlers, discarding their plain-text bodies.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) Write(b []byte) (int, error) {
	h.status = cmp.Or(h.status, http.StatusOK)
	return len(b), nil
}

func (h *headerRecorder) WriteHeader(code int) {
	h.status = cmp.Or(h.status, code)
}

// waker broadcasts "new work may be ready in this region" to every long
// poll waiting on it: wake closes the current channel and starts another.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
	// onBlock, when a test sets it (under mu, before any poll), is called
	// each time a long poll found nothing and is about to wait: the test
	// signal that lets a test insert a job only once the poll waits.
	onBlock func()
}

func newWaker() *waker { return &waker{ch: make(chan struct{})} }

func (k *waker) wait() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ch
}

// blocking is the point where a long poll, having leased nothing, waits
// for a wake-up; it calls the test hook, if any.
func (k *waker) blocking() {
	k.mu.Lock()
	f := k.onBlock
	k.mu.Unlock()
	if f != nil {
		f()
	}
}

func (k *waker) wake() {
	k.mu.Lock()
	defer k.mu.Unlock()
	close(k.ch)
	k.ch = make(chan struct{})
}

// notify wakes the region's long polls and, when configured, its engine.
func (s *Server) notify(region string) {
	if k := s.wakers[region]; k != nil {
		k.wake()
	}
	if s.cfg.Notify != nil {
		s.cfg.Notify(region)
	}
}
