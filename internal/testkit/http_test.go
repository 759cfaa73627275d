package testkit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

// TestCall sends requests to a real server on loopback that echoes what it
// received: the bearer key, the body as sent (JSON for a value, as is for
// a string), the Content-Type (a header pair replaces it), and no body or
// key when none is given; CallWant decodes and refuses a wrong status.
func TestCall(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusOK
		if r.URL.Path == "/teapot" {
			status = http.StatusTeapot
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"method": r.Method, "auth": r.Header.Get("Authorization"),
			"type": r.Header.Get("Content-Type"), "body": string(b)})
	}))
	t.Cleanup(srv.Close)
	type echo struct{ Method, Auth, Type, Body string }
	decode := func(raw []byte) (e echo) {
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		return e
	}

	resp, raw := testkit.Call(t, nil, "POST", srv.URL+"/x", "k1", map[string]int{"n": 1})
	if e := decode(raw); resp.StatusCode != 200 || e != (echo{"POST", "Bearer k1", "application/json", `{"n":1}`}) {
		t.Fatalf("JSON call: %d %+v", resp.StatusCode, e)
	}
	if again, _ := io.ReadAll(resp.Body); string(again) != string(raw) {
		t.Fatalf("resp.Body reads %q, want the body again", again)
	}
	_, raw = testkit.Call(t, srv.Client(), "PUT", srv.URL+"/x", "", "raw text", "Content-Type", "text/plain")
	if e := decode(raw); e != (echo{"PUT", "", "text/plain", "raw text"}) {
		t.Fatalf("raw call: %+v", e)
	}
	_, raw = testkit.Call(t, nil, "GET", srv.URL+"/x", "", nil)
	if e := decode(raw); e != (echo{Method: "GET"}) {
		t.Fatalf("bare call: %+v", e)
	}

	var e echo
	testkit.CallWant(t, nil, "DELETE", srv.URL+"/teapot", "k2", []byte("b"), http.StatusTeapot, &e)
	if e != (echo{"DELETE", "Bearer k2", "application/json", "b"}) {
		t.Fatalf("CallWant decoded %+v", e)
	}
	msg := failure(t, func(tb testing.TB) { testkit.CallWant(tb, nil, "GET", srv.URL+"/teapot", "", nil, 200, nil) })
	if !strings.HasPrefix(msg, "GET "+srv.URL+"/teapot: status 418, want 200: ") {
		t.Fatalf("message = %q", msg)
	}
}

// closeRecorder is an io.Closer that notes when it is closed and fails
// with err.
type closeRecorder struct {
	closed bool
	err    error
}

func (c *closeRecorder) Close() error {
	c.closed = true
	return c.err
}

// errorRecorder is a testing.TB whose Errorf records the message without
// failing the real test; Cleanup, Helper and the rest are the real test's.
type errorRecorder struct {
	testing.TB
	msg string
}

func (r *errorRecorder) Errorf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

// TestServerClient: the client carries the timeout and a transport of its
// own (not http.DefaultTransport), and the server is closed at the test's
// cleanup, not before; a failed Close is reported with the server's type.
func TestServerClient(t *testing.T) {
	t.Parallel()
	srv := &closeRecorder{}
	var c *http.Client
	t.Run("uses", func(t *testing.T) {
		c = testkit.ServerClient(t, srv, 7*time.Second)
		if srv.closed {
			t.Fatal("the server was closed before the test's cleanup")
		}
	})
	if !srv.closed {
		t.Fatal("the server was not closed at the test's cleanup")
	}
	if c.Timeout != 7*time.Second || c.Transport == nil || c.Transport == http.DefaultTransport {
		t.Fatalf("client timeout %v, transport %p: want 7s and a transport of its own", c.Timeout, c.Transport)
	}

	failing := &closeRecorder{err: errors.New("handlers still running")}
	var rec *errorRecorder
	t.Run("fails", func(t *testing.T) {
		rec = &errorRecorder{TB: t}
		testkit.ServerClient(rec, failing, time.Second)
	})
	if want := "close *testkit_test.closeRecorder: handlers still running"; rec.msg != want {
		t.Fatalf("a failed Close reported %q, want %q", rec.msg, want)
	}
}
