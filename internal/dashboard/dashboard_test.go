package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestSignInCookie checks the session cookie's flags over plain HTTP and
// TLS, and that a sign-in form posted without its double-submit cookie (a
// cross-site login) and a wrong key are both refused.
func TestSignInCookie(t *testing.T) {
	t.Parallel()
	for _, tls := range []bool{false, true} {
		s := newStack(t, tls)
		_, resp := s.signIn(adminKey)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-in status %d, want 303", resp.StatusCode)
		}
		var sess *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "ratelane_session" {
				sess = c
			}
		}
		if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/ui/" || sess.Secure != tls {
			t.Fatalf("tls=%v: session cookie %+v, want HttpOnly, SameSite=Strict, Path=/ui/, Secure=%v", tls, sess, tls)
		}
		if strings.Contains(sess.Value, adminKey) {
			t.Fatal("the session cookie carries the API key")
		}
		if _, resp := s.signIn("rl_unknown_key"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unknown key: status %d, want 401", resp.StatusCode)
		}
		// A refused sign-in never echoes the key back into the page.
		b, _ := s.signIn("rl_wrong_x")
		form := b.get("/ui/login")
		m := csrfField.FindStringSubmatch(form)
		resp2, err := b.client.PostForm(s.url+"/ui/login", url.Values{"csrf": {m[1]}, "key": {"rl_typo_" + adminKey}})
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp2.Body)
		resp2.Body.Close()
		if resp2.StatusCode != http.StatusUnauthorized || strings.Contains(string(page), adminKey) || !strings.Contains(string(page), "not accepted") {
			t.Fatalf("refused sign-in: %d %s", resp2.StatusCode, page)
		}
		// A form posted from elsewhere has no login cookie.
		resp, err = insecureClient(nil).PostForm(s.url+"/ui/login", url.Values{"csrf": {"forged"}, "key": {adminKey}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) > 0 && resp.Cookies()[0].Name == "ratelane_session" {
			t.Fatalf("cross-site login: status %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
	}
}

// TestScopeAndCSRF checks the dashboard applies the API's own rules: a
// producer sees only its tenant's jobs, cannot read admin data, cannot
// borrow another key by sending a bearer token, and changes nothing
// without the session's CSRF token.
func TestScopeAndCSRF(t *testing.T) {
	t.Parallel()
	s := newStack(t, false)
	mine := s.enqueue(s.acme, "email.send", "smtp:acme")
	theirs := s.enqueue(s.globex, "email.send", "smtp:globex")
	b, _ := s.signIn(s.acme)
	if b.csrf == "" {
		t.Fatal("no CSRF token on the page")
	}

	if st, body := b.do("GET", "/ui/api/v1/jobs/"+theirs.ID, false); st != 404 {
		t.Fatalf("another tenant's job: %d %s, want 404", st, body)
	}
	st, body := b.do("GET", "/ui/api/v1/jobs/"+mine.ID, false)
	if st != 200 || !strings.Contains(body, "payload-email.send") {
		t.Fatalf("own job: %d %s", st, body)
	}
	if st, body := b.do("GET", "/ui/api/v1/jobs", false); st != 200 || strings.Contains(body, theirs.ID) || !strings.Contains(body, mine.ID) {
		t.Fatalf("job list: %d %s", st, body)
	}
	if st, _ := b.do("GET", "/ui/api/v1/limits", false); st != 403 {
		t.Fatalf("producer reading limits: %d, want 403 as from the API", st)
	}
	// The session's key wins over a bearer token sent along.
	if st, _ := b.do("GET", "/ui/api/v1/limits", false, "Authorization", "Bearer "+adminKey); st != 403 {
		t.Fatalf("producer session with an admin bearer: %d, want 403", st)
	}
	if st, _ := b.do("GET", "/ui/api/metrics", false); st != 404 {
		t.Fatalf("non-/v1 path forwarded: %d", st)
	}

	if st, body := b.do("POST", "/ui/api/v1/jobs/"+mine.ID+"/cancel", false); st != 403 || !strings.Contains(body, "X-CSRF-Token") {
		t.Fatalf("cancel without CSRF: %d %s, want 403", st, body)
	}
	var got job
	s.call("GET", "/v1/jobs/"+mine.ID, s.acme, nil, 200, &got)
	if got.State != "waiting" {
		t.Fatalf("a refused request changed the job: %s", got.State)
	}
	if st, body := b.do("POST", "/ui/api/v1/jobs/"+mine.ID+"/cancel", true); st != 200 || !strings.Contains(body, `"terminal"`) {
		t.Fatalf("cancel with CSRF: %d %s", st, body)
	}

	// Without a session nothing is forwarded, and pages send to sign-in.
	anon := insecureClient(nil)
	resp, err := anon.Get(s.url + "/ui/api/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no session: %d, want 401", resp.StatusCode)
	}
	resp, err = anon.Get(s.url + "/ui/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login" {
		t.Fatalf("page without a session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The admin pages are left out of a producer's navigation.
	if page := b.get("/ui/jobs"); strings.Contains(page, `href="/ui/limits"`) || !strings.Contains(page, "tenant acme") {
		t.Fatalf("producer page navigation: %s", page)
	}
}

// TestCanceledReadIsNotAnError: when the browser goes away (a page closed
// or navigated while its reads and its stream were in flight), the API
// reads the dashboard made are answered 499 client-closed-request and
// logged at debug, never as "request failed" 500 errors.
func TestCanceledReadIsNotAnError(t *testing.T) {
	t.Parallel()
	s := newStack(t, false)
	s.enqueue(s.acme, "email.send", "smtp:acme")
	b, _ := s.signIn(adminKey)
	u, _ := url.Parse(s.url + "/ui/")
	cookies := b.client.Jar.Cookies(u)
	if len(cookies) == 0 {
		t.Fatal("signed in without a session cookie")
	}
	send := func(path string) *httptest.ResponseRecorder {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the browser is gone before the API reads the store
		req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, req)
		return rec
	}
	for _, path := range []string{"/ui/api/v1/stats", "/ui/api/v1/jobs?region=us", "/ui/api/v1/dead-letters"} {
		rec := send(path)
		if rec.Code != 499 || !strings.Contains(rec.Body.String(), "client-closed-request") {
			t.Errorf("GET %s canceled: %d %s, want 499 client-closed-request", path, rec.Code, rec.Body)
		}
	}
	rec := send("/ui/stream?path=/v1/stats")
	if !strings.Contains(rec.Body.String(), `"status":499`) {
		t.Errorf("canceled stream read: %q, want its data event to carry 499", rec.Body)
	}
	logs := s.logs.String()
	if strings.Contains(logs, "request failed") || strings.Contains(logs, "status=500") || strings.Contains(logs, "level=ERROR") {
		t.Errorf("a canceled dashboard read was logged as an error:\n%s", logs)
	}
	if n := strings.Count(logs, "request canceled by the client"); n != 4 {
		t.Errorf("%d debug lines for 4 canceled reads:\n%s", n, logs)
	}
}
