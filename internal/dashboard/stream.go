package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxStreamPaths bounds the API paths one event stream reads per tick.
const maxStreamPaths = 4

// streamHeartbeat is how often a stream that sent nothing sends a comment,
// so proxies and the browser see it alive.
const streamHeartbeat = 15 * time.Second

// streamRetry is the reconnect delay the stream asks the browser's
// EventSource to use after a dropped connection.
const streamRetry = 2 * time.Second

// streamEvent is one "data" event: the answer of one API path.
type streamEvent struct {
	Path   string          `json:"path"`
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// handleStream serves GET /ui/stream?path=/v1/...&path=...: a
// text/event-stream that reads each path from the API every
// StreamInterval with the session's key, exactly as /ui/api would, and
// sends an answer when it differs from the last one sent on the stream.
// Only GET reads are made, so the stream needs no CSRF token. It ends when
// the session ends (sign-out, expiry) or the API answers 401 (the key was
// revoked), with an "end" event saying why, after which the page goes to
// sign-in rather than reconnecting. A session may hold
// MaxStreamsPerSession streams and the process MaxStreams; past either the
// answer is 429 and the page polls instead.
func (d *Dashboard) handleStream(w http.ResponseWriter, r *http.Request) {
	s := d.session(r, true)
	if s == nil {
		problem(w, http.StatusUnauthorized, "unauthenticated", "sign in again: the dashboard session ended")
		return
	}
	paths := r.URL.Query()["path"]
	if len(paths) == 0 || len(paths) > maxStreamPaths {
		problem(w, http.StatusBadRequest, "invalid-request", fmt.Sprintf("name 1 to %d API paths to stream with path=/v1/...", maxStreamPaths))
		return
	}
	for _, p := range paths {
		u, err := url.Parse(p)
		if err != nil || !strings.HasPrefix(u.Path, "/v1/") || u.Host != "" || u.Scheme != "" {
			problem(w, http.StatusBadRequest, "invalid-request", "stream paths are API paths under /v1/, got "+strconvQuote(p))
			return
		}
	}
	if !d.openStream(s) {
		w.Header().Set("Retry-After", "30")
		problem(w, http.StatusTooManyRequests, "too-many-streams",
			fmt.Sprintf("this session holds its %d live streams (or the server its %d); the page polls instead", d.cfg.MaxStreamsPerSession, d.cfg.MaxStreams))
		return
	}
	defer d.closeStream(s)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's WriteTimeout; each write is small
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", streamRetry.Milliseconds())
	if rc.Flush() != nil {
		return
	}
	last := make([][]byte, len(paths))
	tick := time.NewTicker(d.cfg.StreamInterval)
	defer tick.Stop()
	quiet := time.Now()
	for {
		if !d.live(s) {
			d.sendEnd(w, rc, "the dashboard session ended; sign in again")
			return
		}
		for i, p := range paths {
			status, body := d.read(r, s, p)
			if status == http.StatusUnauthorized {
				d.revoked(s)
				d.sendEnd(w, rc, "the API no longer accepts this session's key")
				return
			}
			if bytes.Equal(body, last[i]) {
				continue
			}
			last[i] = body
			ev, _ := json.Marshal(streamEvent{Path: p, Status: status, Body: jsonOrNull(body)})
			fmt.Fprintf(w, "event: data\ndata: %s\n\n", ev)
			quiet = time.Now()
		}
		if time.Since(quiet) >= streamHeartbeat {
			fmt.Fprint(w, ": alive\n\n")
			quiet = time.Now()
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.closed:
			return
		case <-s.done:
		case <-tick.C:
		}
	}
}

func (d *Dashboard) sendEnd(w http.ResponseWriter, rc *http.ResponseController, why string) {
	msg, _ := json.Marshal(map[string]string{"detail": why})
	fmt.Fprintf(w, "event: end\ndata: %s\n\n", msg)
	_ = rc.Flush()
}

// read makes one GET of the API in process with the session's key.
func (d *Dashboard) read(r *http.Request, s *session, path string) (int, []byte) {
	u, _ := url.Parse(path) // checked by handleStream
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.RequestURI(), nil)
	if err != nil {
		return http.StatusBadRequest, nil
	}
	req.RemoteAddr = r.RemoteAddr
	req.Host = r.Host
	req.Header.Set("Authorization", "Bearer "+s.key)
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	d.cfg.API.ServeHTTP(rec, req)
	return rec.status, rec.body.Bytes()
}

// openStream counts a new stream of s, if both bounds allow it.
func (d *Dashboard) openStream(s *session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.streams >= d.cfg.MaxStreamsPerSession || d.streams >= d.cfg.MaxStreams {
		return false
	}
	s.streams++
	d.streams++
	return true
}

func (d *Dashboard) closeStream(s *session) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s.streams--
	d.streams--
}

// recorder is the in-process http.ResponseWriter of a stream's API read.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	return r.body.Write(p)
}

func jsonOrNull(b []byte) json.RawMessage {
	if json.Valid(b) {
		return bytes.TrimSpace(b)
	}
	return json.RawMessage("null")
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
