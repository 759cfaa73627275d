package testkit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Call sends one HTTP request as the tests of the API do, failing the test
// on a transport error, and returns the response with its body read whole
// (resp.Body reads it again). c nil is http.DefaultClient. key, when not
// empty, is sent as the bearer token. body may be nil (no body), a string
// or []byte (sent as is) or any other value (sent as JSON); a body is
// labelled application/json. hdr holds further headers as name, value
// pairs, set last, so they may replace the Content-Type.
//
// The tests of four packages (the root, httpapi, dashboard, cmd/ratelane)
// had copies of this, differing only in the client and how a header was
// passed; one copy serves them all.
func Call(t testing.TB, c *http.Client, method, url, key string, body any, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("%s %s: encode the body: %v", method, url, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if len(hdr)%2 != 0 {
		t.Fatalf("%s %s: headers %q are not name, value pairs", method, url, hdr)
	}
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, url, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp, raw
}

// CallWant is Call that fails the test unless the answer's status is
// want, and decodes the answer's JSON into out when out is not nil. It
// returns the answer's body.
func CallWant(t testing.TB, c *http.Client, method, url, key string, body any, want int, out any, hdr ...string) []byte {
	t.Helper()
	resp, raw := Call(t, c, method, url, key, body, hdr...)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, url, resp.StatusCode, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, raw, err)
		}
	}
	return raw
}

// ServerClient returns an HTTP client, with a transport of its own and the
// given timeout, for a test that talks to the test server srv, and ties
// the two together at cleanup: the client's idle connections are closed
// first, then srv, and an error from srv.Close fails the test (Errorf,
// naming srv's type). Closing the connections first lets a server whose
// Close waits for its handlers return, and leaves no connection goroutine
// for goleak to find in TestMain.
//
// The simulators' tests (upstream, upstream/batchsim) and llmbatch's each
// had a copy of this in their setup.
func ServerClient(t testing.TB, srv io.Closer, timeout time.Duration) *http.Client {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}, Timeout: timeout}
	t.Cleanup(func() {
		c.CloseIdleConnections()
		if err := srv.Close(); err != nil {
			t.Errorf("close %T: %v", srv, err)
		}
	})
	return c
}
