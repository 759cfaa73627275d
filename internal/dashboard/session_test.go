package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi"
	"github.com/ratelane/ratelane/internal/testkit"
)

// These tests exercise the dashboard's own session logic with a controlled
// clock: the API behind it is a small handler that answers for the bearer
// key (the real API is behind the dashboard in stack_test.go and the
// browser test). The dashboard runs on a loopback HTTP server.

const goodKey = "rl_good_key"

type keyAuth struct{}

func (keyAuth) Authenticate(_ context.Context, bearer string) (auth.Principal, error) {
	if bearer != goodKey {
		return auth.Principal{}, httpapi.ErrUnknownKey
	}
	return auth.Principal{KeyID: "k1", Tenant: "acme", Role: auth.RoleAdmin}, nil
}

// echoAPI answers GET /v1/echo with the bearer's key id and a counter, so a
// stream sees a new answer on every read.
func echoAPI() http.Handler {
	var mu sync.Mutex
	n := 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+goodKey {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		n++
		v := n
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "n": v})
	})
}

type uiEnv struct {
	t     *testing.T
	d     *Dashboard
	url   string
	clock *testkit.Clock
}

func newUI(t *testing.T, cfg Config) *uiEnv {
	t.Helper()
	c := testkit.NewClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	cfg.API, cfg.Auth, cfg.Now = echoAPI(), keyAuth{}, c.Now
	if cfg.StreamInterval == 0 {
		cfg.StreamInterval = 20 * time.Millisecond
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(func() { d.Close(); srv.Close() })
	return &uiEnv{t: t, d: d, url: srv.URL, clock: c}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs a fresh cookie jar in and returns its client and the
// session's CSRF token.
func (e *uiEnv) signIn() (*http.Client, string) {
	e.t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp := e.post(c, "/ui/login", nil)
	if resp.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("sign-in: status %d", resp.StatusCode)
	}
	page := e.get(c, "/ui/jobs")
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		e.t.Fatalf("no CSRF token on the page: %s", page)
	}
	return c, m[1]
}

// post posts the login form (with a fresh form's token) or, with form
// set, that form to path.
func (e *uiEnv) post(c *http.Client, path string, form url.Values) *http.Response {
	e.t.Helper()
	if form == nil {
		m := csrfRe.FindStringSubmatch(e.get(c, "/ui/login"))
		form = url.Values{"csrf": {m[1]}, "key": {goodKey}}
	}
	resp, err := c.PostForm(e.url+path, form)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func (e *uiEnv) get(c *http.Client, path string) string {
	e.t.Helper()
	resp, err := c.Get(e.url + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}

func (e *uiEnv) status(c *http.Client, path string) int {
	e.t.Helper()
	resp, err := c.Get(e.url + path)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSessionExpiry: a session ends after IdleTimeout without requests
// (requests push it on) and after SessionTTL however active it is.
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	e := newUI(t, Config{SessionTTL: 3 * time.Hour, IdleTimeout: time.Hour})
	c, _ := e.signIn()
	for i := range 3 { // a request every 50 min: never idle for an hour
		e.clock.Add(50 * time.Minute)
		if st := e.status(c, "/ui/api/v1/echo"); st != 200 {
			t.Fatalf("active session refused %d min after sign-in: %d", 50*(i+1), st)
		}
	}
	e.clock.Add(30 * time.Minute) // 3 h after sign-in
	if st := e.status(c, "/ui/api/v1/echo"); st != 401 {
		t.Fatalf("session past its 3 h TTL: %d, want 401", st)
	}
	idle, _ := e.signIn()
	e.clock.Add(59 * time.Minute)
	if st := e.status(idle, "/ui/api/v1/echo"); st != 200 {
		t.Fatalf("59 min idle: %d", st)
	}
	e.clock.Add(time.Hour)
	if st := e.status(idle, "/ui/api/v1/echo"); st != 401 {
		t.Fatalf("an hour idle: %d, want 401", st)
	}
	if n := e.d.Sessions(); n != 0 {
		t.Fatalf("%d sessions held after both ended", n)
	}
}

// TestSessionsBounded: past MaxSessions the oldest sign-in is signed out.
func TestSessionsBounded(t *testing.T) {
	t.Parallel()
	e := newUI(t, Config{MaxSessions: 3})
	first, _ := e.signIn()
	for range 3 {
		e.signIn()
	}
	if n := e.d.Sessions(); n != 3 {
		t.Fatalf("%d sessions held, want the bound 3", n)
	}
	if st := e.status(first, "/ui/api/v1/echo"); st != 401 {
		t.Fatalf("the oldest session past the bound: %d, want 401", st)
	}
}

// TestLogoutRevokes: sign-out needs the CSRF token, deletes the session on
// the server (the old cookie no longer works, replayed by hand) and ends
// its open event stream with an "end" event.
func TestLogoutRevokes(t *testing.T) {
	t.Parallel()
	e := newUI(t, Config{})
	c, csrf := e.signIn()
	u, _ := url.Parse(e.url + "/ui/")
	cookie := c.Jar.Cookies(u)

	resp, err := c.Get(e.url + "/ui/stream?path=/v1/echo")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, ct)
	}
	events := readEvents(resp)
	if ev := <-events; ev.name != "data" || !strings.Contains(ev.data, `"path":"/v1/echo"`) || !strings.Contains(ev.data, `"status":200`) {
		t.Fatalf("first event %+v", ev)
	}

	if resp := e.post(c, "/ui/logout", url.Values{"csrf": {"wrong"}}); resp.StatusCode != 403 {
		t.Fatalf("logout with a wrong CSRF token: %d, want 403", resp.StatusCode)
	}
	if resp := e.post(c, "/ui/logout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	ended := false
	for ev := range events {
		if ev.name == "end" {
			if !strings.Contains(ev.data, "session ended") {
				t.Fatalf("end event %+v", ev)
			}
			ended = true
			break
		}
	}
	if !ended {
		t.Fatal("the stream closed without an end event")
	}
	replay, _ := http.NewRequest("GET", e.url+"/ui/api/v1/echo", nil)
	for _, ck := range cookie {
		replay.AddCookie(ck)
	}
	r2, err := http.DefaultClient.Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 401 {
		t.Fatalf("the signed-out cookie replayed: %d, want 401", r2.StatusCode)
	}
}

// TestStreamBounds: a session holds MaxStreamsPerSession streams; one more
// is 429 with Retry-After (the page polls); closing one frees its place.
func TestStreamBounds(t *testing.T) {
	t.Parallel()
	e := newUI(t, Config{MaxStreamsPerSession: 2})
	c, _ := e.signIn()
	var open []*http.Response
	for range 2 {
		resp, err := c.Get(e.url + "/ui/stream?path=/v1/echo")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", resp, err)
		}
		// It is counted once it streams: read up to its first event.
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(line, "event: data") {
				break
			}
		}
		open = append(open, resp)
	}
	resp, err := c.Get(e.url + "/ui/stream?path=/v1/echo")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("third stream: %d %v", resp.StatusCode, resp.Header)
	}
	for _, bad := range []string{"/ui/stream", "/ui/stream?path=/metrics", "/ui/stream?path=http://x/v1/a"} {
		if st := e.status(c, bad); st != 400 {
			t.Fatalf("%s: %d, want 400", bad, st)
		}
	}
	open[0].Body.Close()
	testkit.Eventually(t, testkit.Timeout, "a closed stream's place to be freed", func() error {
		resp, err := c.Get(e.url + "/ui/stream?path=/v1/echo")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("a new stream gets %d", resp.StatusCode)
		}
		return nil
	})
	open[1].Body.Close()
}

// TestSignInRateLimit: past SignInBurst attempts from one address the form
// answers 429 problem+json with Retry-After, wrong keys and right ones
// alike, until the allowance refills.
func TestSignInRateLimit(t *testing.T) {
	t.Parallel()
	e := newUI(t, Config{SignInRate: 6, SignInBurst: 3}) // 6 a minute: one per 10 s
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i := range 3 {
		m := csrfRe.FindStringSubmatch(e.get(c, "/ui/login"))
		if resp := e.post(c, "/ui/login", url.Values{"csrf": {m[1]}, "key": {"rl_guess"}}); resp.StatusCode != 401 {
			t.Fatalf("attempt %d: %d, want 401", i, resp.StatusCode)
		}
	}
	m := csrfRe.FindStringSubmatch(e.get(c, "/ui/login"))
	resp, err := c.PostForm(e.url+"/ui/login", url.Values{"csrf": {m[1]}, "key": {goodKey}})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "10" || resp.Header.Get("Content-Type") != "application/problem+json" ||
		p.Status != 429 || !strings.Contains(p.Detail, "too many sign-in attempts") {
		t.Fatalf("fourth attempt: %d %v %+v", resp.StatusCode, resp.Header, p)
	}
	e.clock.Add(10 * time.Second)
	if resp := e.post(c, "/ui/login", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after the refill: %d, want a sign-in", resp.StatusCode)
	}
}

type event struct{ name, data string }

// readEvents parses a text/event-stream into events until it ends.
func readEvents(resp *http.Response) <-chan event {
	ch := make(chan event, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		var ev event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					ch <- ev
				}
				ev = event{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch
}
