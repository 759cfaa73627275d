package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
)

const testKey = "rl_abcd1234_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"

// canned is one response of the fake API.
type canned struct {
	status int
	ctype  string
	body   string
	header map[string]string
}

// recorded is one request the fake API received.
type recorded struct {
	method, path string
	query        url.Values
	header       http.Header
	body         []byte
}

// fakeAPI serves canned JSON per "METHOD /path" (the path as received,
// still escaped) and records every request, so tests check what the CLI
// sent: method, path, query, headers and body.
type fakeAPI struct {
	srv    *httptest.Server
	routes map[string]canned

	mu  sync.Mutex
	got []recorded
}

func newFakeAPI(t *testing.T, routes map[string]canned) *fakeAPI {
	t.Helper()
	f := &fakeAPI{routes: routes}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.got = append(f.got, recorded{r.Method, r.URL.EscapedPath(), r.URL.Query(), r.Header.Clone(), body})
		f.mu.Unlock()
		c, ok := f.routes[r.Method+" "+r.URL.EscapedPath()]
		if !ok {
			c = canned{status: 404, ctype: "application/problem+json", body: `{"title":"Not Found","status":404,"detail":"no route ` + r.Method + " " + r.URL.EscapedPath() + `"}`}
		}
		for k, v := range c.header {
			w.Header().Set(k, v)
		}
		if c.ctype == "" {
			c.ctype = "application/json"
		}
		w.Header().Set("Content-Type", c.ctype)
		if c.status == 0 {
			c.status = 200
		}
		w.WriteHeader(c.status)
		io.WriteString(w, c.body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// only returns the single request the API received, besides reads of the
// discovery document (GET /v1, which enqueue reads for the server's
// regions), checking its method, path and Authorization header.
func (f *fakeAPI) only(t *testing.T, method, path string) recorded {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []recorded
	for _, r := range f.got {
		if r.method != "GET" || r.path != "/v1" {
			got = append(got, r)
		}
	}
	if len(got) != 1 {
		t.Fatalf("API received %d requests, want 1: %+v", len(got), got)
	}
	r := got[0]
	if r.method != method || r.path != path {
		t.Fatalf("request = %s %s, want %s %s", r.method, r.path, method, path)
	}
	if got := r.header.Get("Authorization"); got != "Bearer "+testKey {
		t.Fatalf("Authorization = %q, want the bearer key", got)
	}
	if len(r.body) > 0 && r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("Content-Type = %q for a JSON body", r.header.Get("Content-Type"))
	}
	return r
}

// cli runs "ratelane args... --server URL --api-key KEY" the way main
// does and returns the exit code and output.
func (f *fakeAPI) cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "--server", f.srv.URL, "--api-key", testKey)
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// ok runs the CLI as cli does and fails the test unless it exits 0.
func (f *fakeAPI) ok(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := f.cli(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	return stdout, stderr
}

// jsonBody decodes a request body into a generic map.
func jsonBody(t *testing.T, r recorded) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("request body %q: %v", r.body, err)
	}
	return m
}

// wantJSONBody checks that a request's JSON body decodes to want.
func wantJSONBody(t *testing.T, r recorded, want map[string]any) {
	t.Helper()
	if got := jsonBody(t, r); !reflect.DeepEqual(got, want) {
		t.Errorf("body = %v\nwant %v", got, want)
	}
}

// wantColumns checks that the first line of a table holds the columns, in
// order, and that there are rows lines after it.
func wantColumns(t *testing.T, out string, rows int, columns ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != strings.Join(columns, " ") {
		t.Fatalf("header = %q, want columns %q\n%s", lines[0], columns, out)
	}
	if len(lines)-1 != rows {
		t.Fatalf("%d rows, want %d:\n%s", len(lines)-1, rows, out)
	}
	// Aligned: every column starts at the same offset on every line.
	second := strings.Index(lines[0], columns[1])
	for _, l := range lines[1:] {
		if len(l) <= second || l[second-1] != ' ' || l[second] == ' ' {
			t.Fatalf("columns are not aligned:\n%s", out)
		}
	}
}

func TestProblemJSONError(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"POST /v1/jobs": {
		status: 422, ctype: "application/problem+json",
		body: `{"type":"about:blank","title":"Invalid job","status":422,"detail":"2 fields are invalid",
			"errors":[{"field":"limit_keys","detail":"a job names 1 to 4 limit keys, got 5"},{"pointer":"/lane","detail":"lane must be interactive or batch"}]}`,
	}})
	code, out, errOut := api.cli(t, "enqueue", "--kind", "webhook", "--key", "a:b")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if out != "" {
		t.Fatalf("stdout = %q on error", out)
	}
	for _, want := range []string{
		"error: Invalid job: 2 fields are invalid\n",
		"  limit_keys: a job names 1 to 4 limit keys, got 5\n",
		"  /lane: lane must be interactive or batch\n",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, testKey) {
		t.Fatal("the API key was printed")
	}
}

func TestOverloadShowsRetryAfter(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"POST /v1/jobs": {
		status: 429, ctype: "application/problem+json", header: map[string]string{"Retry-After": "42"},
		body: `{"title":"Lane over budget","status":429,"detail":"predicted wait 95s exceeds the interactive budget of 30s"}`,
	}})
	code, _, errOut := api.cli(t, "enqueue", "--kind", "k", "--key", "a:b")
	if code != 1 || !strings.Contains(errOut, "error: Lane over budget: predicted wait 95s") || !strings.Contains(errOut, "retry after: 42 s") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
}

func TestNonProblemError(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"GET /v1/keys": {status: 502, ctype: "text/html", body: "<h1>Bad Gateway</h1>"}})
	code, _, errOut := api.cli(t, "keys", "ls")
	if code != 1 || !strings.Contains(errOut, "error: HTTP 502 Bad Gateway: <h1>Bad Gateway</h1>") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, nil)
	for _, args := range [][]string{
		{"enqueue", "--nope"},
		{"enqueue", "--key", "a:b"},                          // no --kind
		{"enqueue", "--kind", "k", "--payload", "{not json"}, // caught before sending
		{"enqueue", "--kind", "k", "--delay", "soon"},        // not a duration
		{"jobs"},                              // no verb
		{"jobs", "frobnicate"},                // unknown verb
		{"jobs", "get"},                       // no id
		{"jobs", "ls", "extra"},               // unexpected argument
		{"jobs", "ls", "--limit", "-1"},       // negative
		{"limits", "set", "k", "--per", "0s"}, // bad period
		{"keys", "create", "--tenant", "t", "--role", "superuser"}, // bad role
	} {
		code, _, errOut := api.cli(t, args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage); stderr:\n%s", args, code, errOut)
		}
	}
	// An explicit empty --api-key overrides the environment.
	for _, args := range [][]string{
		{"keys", "ls", "--server", api.srv.URL, "--api-key", ""},
		{"keys", "ls", "--server", "ftp://x", "--api-key", testKey},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr:\n%s", args, code, errOut.String())
		}
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.got) != 0 {
		t.Fatalf("usage errors sent %d requests", len(api.got))
	}
}

func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"enqueue", "-h"}, {"jobs", "ls", "-h"}, {"keys", "help"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "Usage: ratelane") {
			t.Errorf("%q: exit %d, stderr:\n%s", args, code, errOut.String())
		}
	}
}

// TestEnvironment reads the server and key from the environment. It cannot
// be parallel: t.Setenv changes the whole process.
func TestEnvironment(t *testing.T) {
	api := newFakeAPI(t, map[string]canned{"GET /v1/keys": {body: `{"keys":[]}`}})
	t.Setenv(envServer, api.srv.URL)
	t.Setenv(envAPIKey, testKey)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"keys", "ls"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	api.only(t, "GET", "/v1/keys")
	if os.Getenv(envAPIKey) != testKey {
		t.Fatal("setup")
	}
}

func TestDecodeList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		n    int
		next string
	}{
		{`[{"id":"a"},{"id":"b"}]`, 2, ""},
		{`{"jobs":[{"id":"a"}],"next_cursor":"c1"}`, 1, "c1"},
		{`{"items":[{"id":"a"}],"next":"c2"}`, 1, "c2"},
		{`{"results":[{"id":"a"},{"id":"b"},{"id":"c"}],"count":3}`, 3, ""},
		{`{"jobs":[]}`, 0, ""},
	} {
		items, next, err := decodeList([]byte(tc.body), "jobs")
		if err != nil || len(items) != tc.n || next != tc.next {
			t.Errorf("decodeList(%s) = %d items, next %q, %v", tc.body, len(items), next, err)
		}
	}
}

// TestDeleteVerbs: each verb that deletes sends one DELETE to its
// resource and, on the API's 204, prints one line naming what it removed.
func TestDeleteVerbs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		path, want string
	}{
		{[]string{"dlq", "rm", "j9"}, "/v1/dead-letters/j9", "deleted j9\n"},
		{[]string{"keys", "revoke", "k7x2p9qa"}, "/v1/keys/k7x2p9qa", "revoked k7x2p9qa\n"},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, map[string]canned{"DELETE " + tc.path: {status: 204}})
			out, _ := api.ok(t, tc.args...)
			api.only(t, "DELETE", tc.path)
			if out != tc.want {
				t.Errorf("stdout = %q, want %q", out, tc.want)
			}
		})
	}
}
