// Package dashboard serves ratelane's operator web UI under /ui/: server
// rendered html/template pages with embedded plain JavaScript that gets
// live data from the HTTP API over a server-sent event stream (/ui/stream,
// text/event-stream), falling back to polling when the stream cannot be
// held.
//
// The dashboard holds no data path of its own. A person signs in with an
// API key; the key stays on the server, in memory, behind a random session
// cookie. Every piece of data the pages show comes from the API's own
// handler, called in-process through /ui/api/v1/... with that key as the
// bearer token, so the key's role, tenant and region scope apply exactly
// as they do to a curl call, and no payload or secret reaches a page the
// key could not read over the API. State-changing calls (redrive, purge,
// rotate a secret, sign out) need the session's CSRF token as well as the
// SameSite=Strict cookie.
//
// Sessions live in this process's memory only: a restart signs everyone
// out. They are bounded in number (MaxSessions), end after SessionTTL
// whatever happens and after IdleTimeout without a page or API request,
// and sign-out deletes the session on the server, ending its streams.
package dashboard

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi"
	"github.com/ratelane/ratelane/internal/job"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Cookie names. The session cookie is scoped to /ui/ so the API never sees
// it; the API itself authenticates only bearer tokens.
const (
	sessionCookie = "ratelane_session"
	loginCookie   = "ratelane_login_csrf"
	csrfHeader    = "X-CSRF-Token"
)

// Authenticator resolves an API key to its principal; httpapi.Authenticator
// satisfies it.
type Authenticator interface {
	Authenticate(ctx context.Context, bearer string) (auth.Principal, error)
}

// Config configures a Dashboard.
type Config struct {
	// API is the HTTP API's handler (required). Every data request of the
	// pages is served by it, with the session's key as bearer token.
	API http.Handler
	// Auth checks the key a person signs in with (required).
	Auth Authenticator
	// SessionTTL is how long a sign-in lasts at most, however active;
	// default 12h.
	SessionTTL time.Duration
	// IdleTimeout ends a session that made no page or API request for
	// this long; default 1h. An open event stream alone does not keep a
	// session alive: a dashboard left unattended signs out.
	IdleTimeout time.Duration
	// SignInRate is how many sign-in attempts one client address may make
	// per minute, sustained; default 10. SignInBurst attempts may come at
	// once; default 10. Past them the form answers 429 with Retry-After.
	SignInRate  float64
	SignInBurst int
	// StreamInterval is how often an event stream reads the API; default
	// 1s. It is the resolution of the pages' live charts and rates.
	StreamInterval time.Duration
	// MaxStreamsPerSession bounds one session's open event streams;
	// default 4. Past it, /ui/stream answers 429 and the page polls.
	MaxStreamsPerSession int
	// MaxStreams bounds every session's open event streams together;
	// default 256.
	MaxStreams int
	// MaxSessions bounds the sessions held in memory; default 1000. Past
	// it, the oldest is signed out.
	MaxSessions int
	// Secure marks cookies Secure even on plain HTTP (behind a TLS
	// proxy). Requests that arrive over TLS always get Secure cookies.
	Secure bool
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives sign-ins by key id, never keys; default slog.Default().
	Logger *slog.Logger
	// Version is shown in the footer.
	Version string
}

// Dashboard is the web UI. It is safe for concurrent use.
type Dashboard struct {
	cfg     Config
	tmpl    *template.Template
	mux     *http.ServeMux
	signIns *addrLimiter

	closed    chan struct{} // closed by Close: every stream ends
	closeOnce sync.Once

	mu      sync.Mutex
	byID    map[string]*session
	order   []string
	streams int // open event streams, every session's
}

// session is one sign-in. key is the API key itself: it never leaves the
// server. Fields after p are guarded by Dashboard.mu.
type session struct {
	id      string
	key     string
	csrf    string
	p       auth.Principal
	expires time.Time // absolute: SessionTTL after sign-in
	seen    time.Time // last page or API request, for IdleTimeout
	streams int
	// done is closed when the session ends (sign-out, expiry, eviction),
	// which ends its event streams.
	done chan struct{}
}

// New returns a dashboard serving under /ui/.
func New(cfg Config) (*Dashboard, error) {
	if cfg.API == nil || cfg.Auth == nil {
		return nil, errors.New("dashboard: API and Auth are required")
	}
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, 12*time.Hour)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, time.Hour)
	cfg.SignInRate = cmp.Or(cfg.SignInRate, 10)
	cfg.SignInBurst = cmp.Or(cfg.SignInBurst, 10)
	cfg.StreamInterval = cmp.Or(cfg.StreamInterval, time.Second)
	cfg.MaxStreamsPerSession = cmp.Or(cfg.MaxStreamsPerSession, 4)
	cfg.MaxStreams = cmp.Or(cfg.MaxStreams, 256)
	cfg.MaxSessions = cmp.Or(cfg.MaxSessions, 1000)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{"states": func() []job.State { return job.States }}).
		ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: cfg, tmpl: tmpl, mux: http.NewServeMux(), byID: map[string]*session{},
		signIns: newAddrLimiter(cfg.SignInRate/60, cfg.SignInBurst), closed: make(chan struct{})}
	static, _ := fs.Sub(assets, "static")
	d.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	d.mux.HandleFunc("GET /ui/login", d.handleGetLogin)
	d.mux.HandleFunc("POST /ui/login", d.handlePostLogin)
	d.mux.HandleFunc("POST /ui/logout", d.handleLogout)
	d.mux.HandleFunc("/ui/api/", d.handleAPI)
	d.mux.HandleFunc("GET /ui/stream", d.handleStream)
	d.mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/overview", http.StatusSeeOther)
	})
	d.mux.HandleFunc("GET /ui/{page}", d.handlePage)
	return d, nil
}

// Close ends every open event stream (sessions stay signed in), so an
// http.Server's Shutdown need not wait for them; the pages reconnect to
// whichever server answers next. It is idempotent.
func (d *Dashboard) Close() { d.closeOnce.Do(func() { close(d.closed) }) }

// Handler serves /ui/ and everything below it.
func (d *Dashboard) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		d.mux.ServeHTTP(w, r)
	})
}

// pages are the dashboard's pages and whether they need an admin key (the
// API would refuse their data anyway; the nav just hides them).
var pages = []struct {
	Name, Title string
	Admin       bool
}{
	{"overview", "Overview", true},
	{"limits", "Limit keys", true},
	{"jobs", "Jobs", false},
	{"dead-letters", "Dead letters", false},
	{"subscribers", "Subscribers", true},
	{"schedules", "Schedules", false},
	{"reviews", "Reviews", false},
}

// pageData is what the templates render.
type pageData struct {
	Page, Title, CSRF, Version, Error string
	Principal                         auth.Principal
	Nav                               []navItem
}

type navItem struct {
	Name, Title string
	Current     bool
}

func (d *Dashboard) handlePage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("page")
	title := ""
	if name == "job" {
		title = "Job"
	}
	for _, p := range pages {
		if p.Name == name {
			title = p.Title
		}
	}
	if title == "" {
		http.NotFound(w, r)
		return
	}
	s := d.session(r, true)
	if s == nil {
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
		return
	}
	data := pageData{Page: name, Title: title, CSRF: s.csrf, Version: d.cfg.Version, Principal: s.p}
	for _, p := range pages {
		if !p.Admin || s.p.Role == auth.RoleAdmin {
			data.Nav = append(data.Nav, navItem{p.Name, p.Title, p.Name == name})
		}
	}
	d.render(w, "page.html", data)
}

func (d *Dashboard) render(w http.ResponseWriter, name string, data pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := d.tmpl.ExecuteTemplate(w, name, data); err != nil {
		d.cfg.Logger.Error("render dashboard page", "page", data.Page, "err", err)
	}
}

func (d *Dashboard) handleGetLogin(w http.ResponseWriter, r *http.Request) {
	d.loginForm(w, r, "")
}

// loginForm renders the sign-in form with a fresh double-submit token, so
// another site cannot sign a browser in with the attacker's key.
func (d *Dashboard) loginForm(w http.ResponseWriter, r *http.Request, msg string) {
	token := randomToken()
	http.SetCookie(w, d.cookie(r, loginCookie, token, 10*time.Minute))
	if msg != "" {
		w.WriteHeader(http.StatusUnauthorized)
	}
	d.render(w, "login.html", pageData{Page: "login", Title: "Sign in", CSRF: token, Version: d.cfg.Version, Error: msg})
}

func (d *Dashboard) handlePostLogin(w http.ResponseWriter, r *http.Request) {
	if wait, ok := d.signIns.allow(clientAddr(r), d.cfg.Now()); !ok {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		problem(w, http.StatusTooManyRequests, "too-many-sign-ins",
			fmt.Sprintf("too many sign-in attempts from this address; try again in %d s", secs))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	c, err := r.Cookie(loginCookie)
	if err != nil || !equal(c.Value, r.PostFormValue("csrf")) {
		d.loginForm(w, r, "The sign-in form expired; try again.")
		return
	}
	key := strings.TrimSpace(r.PostFormValue("key"))
	if key == "" || len(key) > 512 {
		d.loginForm(w, r, "Enter an API key.")
		return
	}
	p, err := d.cfg.Auth.Authenticate(r.Context(), key)
	switch {
	case errors.Is(err, httpapi.ErrUnknownKey) || errors.Is(err, httpapi.ErrRevokedKey):
		d.loginForm(w, r, "This API key is not accepted (unknown or revoked).")
		return
	case err != nil:
		d.cfg.Logger.Error("dashboard sign-in: verify key", "err", err)
		d.loginForm(w, r, "API keys cannot be verified right now; try again shortly.")
		return
	}
	now := d.cfg.Now()
	s := &session{id: randomToken(), key: key, csrf: randomToken(), p: p, expires: now.Add(d.cfg.SessionTTL), seen: now,
		done: make(chan struct{})}
	d.store(s)
	d.cfg.Logger.Info("dashboard sign-in", "key_id", p.KeyID, "role", p.Role)
	http.SetCookie(w, d.cookie(r, loginCookie, "", -1))
	http.SetCookie(w, d.cookie(r, sessionCookie, s.id, d.cfg.SessionTTL))
	http.Redirect(w, r, "/ui/overview", http.StatusSeeOther)
}

func (d *Dashboard) handleLogout(w http.ResponseWriter, r *http.Request) {
	s := d.session(r, false)
	if s == nil || !equal(s.csrf, r.PostFormValue("csrf")) {
		http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
		return
	}
	d.mu.Lock()
	d.end(s)
	d.mu.Unlock()
	http.SetCookie(w, d.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// handleAPI forwards /ui/api/v1/... to the API as /v1/... with the
// session's key. Only the API's own checks decide what the key may do.
func (d *Dashboard) handleAPI(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/ui/api")
	if !strings.HasPrefix(path, "/v1/") {
		problem(w, http.StatusNotFound, "not-found", "the dashboard forwards only /ui/api/v1/...")
		return
	}
	s := d.session(r, true)
	if s == nil {
		problem(w, http.StatusUnauthorized, "unauthenticated", "sign in again: the dashboard session ended")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !equal(s.csrf, r.Header.Get(csrfHeader)) {
		problem(w, http.StatusForbidden, "forbidden", "a state-changing dashboard request needs the session's "+csrfHeader+" header")
		return
	}
	fwd := r.Clone(r.Context())
	fwd.URL.Path, fwd.URL.RawPath, fwd.RequestURI = path, "", ""
	fwd.Header.Del("Cookie")
	fwd.Header.Del(csrfHeader)
	fwd.Header.Set("Authorization", "Bearer "+s.key)
	sw := &httpapi.StatusWriter{ResponseWriter: w}
	d.cfg.API.ServeHTTP(sw, fwd)
	if sw.Status == http.StatusUnauthorized {
		d.revoked(s) // the key was revoked: the session holds nothing usable
	}
}

// revoked ends s because the API no longer accepts its key.
func (d *Dashboard) revoked(s *session) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.end(s)
}

func problem(w http.ResponseWriter, status int, slug, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://ratelane.dev/problems/" + slug,
		"title": strings.ReplaceAll(slug, "-", " "), "status": status, "detail": detail})
}

// session returns the request's live session, or nil; active marks the
// request as activity for the idle timeout.
func (d *Dashboard) session(r *http.Request, active bool) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.byID[c.Value]
	if s == nil {
		return nil
	}
	now := d.cfg.Now()
	if !d.alive(s, now) {
		d.end(s)
		return nil
	}
	if active {
		s.seen = now
	}
	return s
}

// alive reports whether s is within both its absolute and idle expiry;
// d.mu is held.
func (d *Dashboard) alive(s *session, now time.Time) bool {
	return now.Before(s.expires) && now.Sub(s.seen) < d.cfg.IdleTimeout
}

// end deletes s and ends its streams; d.mu is held. Ending a session twice
// is harmless.
func (d *Dashboard) end(s *session) {
	if d.byID[s.id] != s {
		return
	}
	delete(d.byID, s.id)
	close(s.done)
}

// live reports whether s is still signed in, ending it when it expired.
func (d *Dashboard) live(s *session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byID[s.id] != s {
		return false
	}
	if !d.alive(s, d.cfg.Now()) {
		d.end(s)
		return false
	}
	return true
}

// store keeps s, first dropping expired sessions and, past MaxSessions,
// the oldest ones.
func (d *Dashboard) store(s *session) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.cfg.Now()
	kept := d.order[:0]
	for _, id := range d.order {
		old := d.byID[id]
		switch {
		case old == nil:
		case d.alive(old, now):
			kept = append(kept, id)
		default:
			d.end(old)
		}
	}
	d.order = kept
	for len(d.order) >= d.cfg.MaxSessions {
		if old := d.byID[d.order[0]]; old != nil {
			d.end(old)
		}
		d.order = d.order[1:]
	}
	d.byID[s.id] = s
	d.order = append(d.order, s.id)
}

// Sessions reports how many sessions are held now (signed in and not yet
// swept), for tests and diagnostics.
func (d *Dashboard) Sessions() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.byID)
}

// cookie builds a dashboard cookie: HttpOnly, SameSite=Strict, scoped to
// /ui/, Secure over TLS. A negative ttl deletes it.
func (d *Dashboard) cookie(r *http.Request, name, value string, ttl time.Duration) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: d.cfg.Secure || r.TLS != nil}
	if ttl < 0 {
		c.MaxAge = -1
	} else {
		c.MaxAge = int(ttl.Seconds())
	}
	return c
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

func equal(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
