package main

import (
	"strings"
	"testing"
)

func TestLimitsList(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"GET /v1/limits": {body: `{"limits":[
		{"region":"eu","name":"openai:gpt-4o-mini","rate":8.3333,"burst":20,"concurrency":0,"adaptive":true,"min_rate":0.1,"learned_rate":5.5,
		 "paused_until":"2026-03-01T12:00:02Z","in_flight":3,"waiting_cost":120},
		{"region":"us","name":"subscriber:store_17","rate":10,"burst":10,"concurrency":3,"adaptive":false,"learned_rate":10,"in_flight":0,
		 "strict":true,"strict_until":"2026-03-01T12:00:30Z",
		 "windows":[{"limit":10,"period":"1s","fixed":true,"guard":"30ms"},{"limit":200,"period":"1m0s"}]}]}`}})
	out, _ := api.ok(t, "limits", "ls", "--region", "eu")
	if r := api.only(t, "GET", "/v1/limits"); r.query.Get("region") != "eu" {
		t.Errorf("query = %v", r.query)
	}
	// Without --region the server lists every region's keys, and a key
	// name may be declared in several: each row says its region.
	wantColumns(t, out, 2, "KEY", "REGION", "RATE/S", "BURST", "WINDOWS", "CONCURRENCY", "ADAPTIVE", "LEARNED/S", "IN", "FLIGHT", "WAITING", "PAUSED", "UNTIL", "STRICT", "UNTIL")
	lines := strings.Split(out, "\n")
	for i, want := range []string{"openai:gpt-4o-mini eu", "subscriber:store_17 us"} {
		if f := strings.Fields(lines[i+1]); len(f) < 2 || f[0]+" "+f[1] != want {
			t.Errorf("row %d starts %q, want %q:\n%s", i+1, f, want, out)
		}
	}
	for _, s := range []string{"openai:gpt-4o-mini", "8.3333", "5.5", "120", "2026-03-01 12:00:02Z", "10/1s fixed guard 30ms, 200/1m0s",
		"2026-03-01 12:00:30Z"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

func TestLimitsSet(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"PUT /v1/limits/openai:gpt-4o-mini": {body: `{"name":"openai:gpt-4o-mini","rate":10}`}})
	out, _ := api.ok(t, "limits", "set", "openai:gpt-4o-mini", "--rate", "600", "--per", "1m",
		"--burst", "5", "--concurrency", "3", "--adaptive", "--region", "us")
	r := api.only(t, "PUT", "/v1/limits/openai:gpt-4o-mini")
	if r.query.Get("region") != "us" {
		t.Errorf("query = %v", r.query)
	}
	// 600 per minute is sent as 10 per second: the API's unit.
	want := map[string]any{"rate": 10.0, "burst": 5.0, "concurrency": 3.0, "adaptive": true}
	wantJSONBody(t, r, want)
	if !strings.Contains(out, "rate 10/s") {
		t.Errorf("stdout = %q", out)
	}
}

func TestLimitsSetInvalid(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"PUT /v1/limits/k": {status: 400, ctype: "application/problem+json",
		body: `{"title":"Invalid limit","status":400,"detail":"an adaptive key needs a rate ceiling greater than 0","errors":[{"field":"rate","detail":"must be > 0"}]}`}})
	code, _, errOut := api.cli(t, "limits", "set", "k", "--adaptive")
	if code != 1 || !strings.Contains(errOut, "error: Invalid limit: an adaptive key needs") || !strings.Contains(errOut, "  rate: must be > 0") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
}

func TestLimitsSetWindows(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"PUT /v1/limits/partner": {body: `{"name":"partner","rate":0}`}})
	api.ok(t, "limits", "set", "partner", "--shape", "window", "--rate", "20", "--per", "1s",
		"--window", "200/1m", "--window", "5000/1h")
	r := api.only(t, "PUT", "/v1/limits/partner")
	want := map[string]any{"shape": "window", "rate": 20.0, "period": "1s", "burst": 0.0, "concurrency": 0.0, "adaptive": false,
		"windows": []any{map[string]any{"limit": 200.0, "period": "1m0s"}, map[string]any{"limit": 5000.0, "period": "1h0m0s"}}}
	wantJSONBody(t, r, want)
	if code, _, errOut := api.cli(t, "limits", "set", "partner", "--window", "lots"); code == 0 || !strings.Contains(errOut, "LIMIT/PERIOD") {
		t.Fatalf("a bad --window: exit %d, stderr %s", code, errOut)
	}
}

func TestLimitsSetFixedWindows(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"PUT /v1/limits/github": {body: `{"name":"github","rate":0}`}})
	api.ok(t, "limits", "set", "github", "--shape", "window", "--fixed", "--rate", "5000", "--per", "1h",
		"--window", "100/1s", "--fixed-window", "900/1m/1s")
	r := api.only(t, "PUT", "/v1/limits/github")
	want := map[string]any{"shape": "window", "window": "fixed", "rate": 5000.0, "period": "1h0m0s", "burst": 0.0, "concurrency": 0.0,
		"adaptive": false, "windows": []any{map[string]any{"limit": 100.0, "period": "1s"},
			map[string]any{"limit": 900.0, "period": "1m0s", "fixed": true, "guard": "1s"}}}
	wantJSONBody(t, r, want)
	if code, _, errOut := api.cli(t, "limits", "set", "github", "--fixed", "--rate", "5"); code == 0 || !strings.Contains(errOut, "--shape window") {
		t.Fatalf("--fixed without --shape window: exit %d, stderr %s", code, errOut)
	}
	if code, _, errOut := api.cli(t, "limits", "set", "github", "--fixed-window", "60/1m/soon"); code == 0 || !strings.Contains(errOut, "GUARD") {
		t.Fatalf("a bad --fixed-window: exit %d, stderr %s", code, errOut)
	}
}
