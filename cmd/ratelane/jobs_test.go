package main

import (
	"net/url"
	"strings"
	"testing"
)

const jobsPage = `{"jobs":[` + jobJSON + `,{"id":"01JQ8Z7K3M2N4P5Q6R7S8T9V0X","kind":"review","region":"eu","lane":"batch",
	"limit_keys":["openai:gpt-4o-mini"],"state":"terminal","reason":"rate_limit_budget_exhausted","attempt":21,
	"created_at":"2026-03-01T11:00:00Z","finished_at":"2026-03-01T11:30:00Z"}],"next_cursor":"01JQ8Z7K3M2N4P5Q6R7S8T9V0X"}`

func TestJobsList(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"GET /v1/jobs": {body: jobsPage}})
	out, errOut := api.ok(t, "jobs", "ls", "--state", "terminal", "--kind", "review", "--region", "eu", "--limit", "2", "--after", "01JQ")
	r := api.only(t, "GET", "/v1/jobs")
	want := url.Values{"state": {"terminal"}, "kind": {"review"}, "region": {"eu"}, "limit": {"2"}, "after": {"01JQ"}}
	if r.query.Encode() != want.Encode() {
		t.Errorf("query = %s, want %s", r.query.Encode(), want.Encode())
	}
	wantColumns(t, out, 2, "ID", "KIND", "REGION", "LANE", "STATE", "REASON", "ATTEMPT", "LIMIT", "KEYS", "CREATED")
	for _, s := range []string{"01JQ8Z7K3M2N4P5Q6R7S8T9V0X", "rate_limit_budget_exhausted", "subscriber:store_17,tenant:acme", "2026-03-01 12:00:00Z"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "order.paid") {
		t.Error("the table shows payloads")
	}
	if !strings.Contains(errOut, "--after 01JQ8Z7K3M2N4P5Q6R7S8T9V0X") {
		t.Errorf("no next-page hint: %q", errOut)
	}
}

func TestJobsListJSON(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"GET /v1/jobs": {body: jobsPage}})
	code, out, _ := api.cli(t, "jobs", "ls", "--json")
	if code != 0 || out != jobsPage+"\n" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if q := api.only(t, "GET", "/v1/jobs").query; len(q) != 0 {
		t.Errorf("unset filters were sent: %v", q)
	}
}

func TestJobsGet(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"GET /v1/jobs/01JQ8Z7K3M2N4P5Q6R7S8T9V0W": {body: jobJSON}})
	// The flag after the id is parsed too.
	out, _ := api.ok(t, "jobs", "get", "01JQ8Z7K3M2N4P5Q6R7S8T9V0W", "--region", "eu")
	r := api.only(t, "GET", "/v1/jobs/01JQ8Z7K3M2N4P5Q6R7S8T9V0W")
	if r.query.Get("region") != "eu" {
		t.Errorf("query = %v", r.query)
	}
	for _, s := range []string{"state:", "waiting", "limit keys:", "subscriber:store_17, tenant:acme", `{"congestion":0,"schema":0,"transient":0}`, "payload:", "bytes"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "order.paid") {
		t.Error("jobs get prints the payload; only its size belongs in the summary")
	}
}

func TestJobsGetEscapesID(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, nil)
	code, _, errOut := api.cli(t, "jobs", "get", "a/b?c")
	if code != 1 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if got := api.got[0].path; got != "/v1/jobs/a%2Fb%3Fc" {
		t.Fatalf("path = %q; the id must stay one path segment", got)
	}
}

func TestJobsCancel(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"POST /v1/jobs/j1/cancel": {body: `{"id":"j1","state":"terminal","reason":"cancelled"}`}})
	out, _ := api.ok(t, "jobs", "cancel", "j1")
	if r := api.only(t, "POST", "/v1/jobs/j1/cancel"); len(r.body) != 0 {
		t.Errorf("cancel sent a body: %q", r.body)
	}
	if out != "cancelled j1 (state terminal, reason cancelled)\n" {
		t.Errorf("stdout = %q", out)
	}
}

func TestJobsCancelConflict(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"POST /v1/jobs/j1/cancel": {status: 409, ctype: "application/problem+json",
		body: `{"title":"Conflict","status":409,"detail":"job j1 is already published"}`}})
	code, _, errOut := api.cli(t, "jobs", "cancel", "j1")
	if code != 1 || !strings.HasPrefix(errOut, "error: Conflict: job j1 is already published\n") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestJobsGetWaitingFor shows the server's waiting_for: what holds the
// job and when it should start, or that nothing handles its kind.
func TestJobsGetWaitingFor(t *testing.T) {
	t.Parallel()
	body := `{"id":"j1","kind":"email.send","region":"us","lane":"batch","limit_keys":["smtp:default"],"state":"waiting",
		"waiting_for":{"blocked":false,"summary":"nothing handles kind \"email.send\"","keys":[],"handler":{"handled":false,"in_process":false}}}`
	api := newFakeAPI(t, map[string]canned{"GET /v1/jobs/j1": {body: body}})
	out, _ := api.ok(t, "jobs", "get", "j1")
	for _, s := range []string{"waiting for:", `nothing handles kind "email.send"`, "predicted start:", "never, until something handles its kind"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

// TestJobsGetHistory shows the attempt history one line per record: a
// folded record (a polled job's consecutive pending passes) as one line
// with its count and span, a long error cut to one line, and the
// history's fields as the API names them (rltype.AttemptRecord).
func TestJobsGetHistory(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	body := `{"id":"j1","kind":"poll","region":"us","lane":"batch","state":"waiting","attempt":1442,"history":[
		{"at":"2026-03-01T12:00:01Z","attempt":1,"outcome":"congestion","status":429,"delay_ns":12000000000,"why":"retry-after","error":"slow down"},
		{"at":"2026-03-02T12:00:00Z","attempt":1441,"outcome":"pending","delay_ns":60000000000,"count":1440,"first_at":"2026-03-01T12:01:00Z"},
		{"at":"2026-03-02T12:01:00Z","attempt":1442,"outcome":"transient","status":503,"error":"` + long + `"}]}`
	api := newFakeAPI(t, map[string]canned{"GET /v1/jobs/j1": {body: body}})
	out, _ := api.ok(t, "jobs", "get", "j1")
	_, hist, ok := strings.Cut(out, "history:\n")
	if !ok {
		t.Fatalf("no history section:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(hist, "\n"), "\n")
	if len(lines) != 4 { // the header and one line per record
		t.Fatalf("history has %d lines, want 4:\n%s", len(lines), hist)
	}
	for i, want := range [][]string{
		{"ATTEMPT", "ENDED", "OUTCOME", "STATUS", "NEXT IN", "WHY / ERROR"},
		{"1", "2026-03-01 12:00:01Z", "congestion", "429", "12s", "retry-after: slow down"},
		{"1441", "2026-03-01 12:01:00Z .. 2026-03-02 12:00:00Z", "pending ×1440", "1m0s"},
		{"1442", "transient", "503", strings.Repeat("x", 120) + "..."},
	} {
		for _, s := range want {
			if !strings.Contains(lines[i], s) {
				t.Errorf("history line %d lacks %q: %q", i, s, lines[i])
			}
		}
	}
	if strings.Contains(hist, strings.Repeat("x", 121)) {
		t.Error("a long error is not cut to one short line")
	}
}
