package main

import (
	"strings"
	"testing"
)

func TestDLQList(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"GET /v1/dead-letters": {body: `{"dead_letters":[{"id":"j9","kind":"webhook","region":"us","tenant":"acme",
		"state":"terminal","reason":"subscriber_gone","attempt":3,"finished_at":"2026-03-01T10:00:00Z","payload":{"secret":"x"}}]}`}})
	out, _ := api.ok(t, "dlq", "ls", "--region", "us", "--reason", "subscriber_gone")
	r := api.only(t, "GET", "/v1/dead-letters")
	if r.query.Get("region") != "us" || r.query.Get("reason") != "subscriber_gone" {
		t.Errorf("query = %v", r.query)
	}
	wantColumns(t, out, 1, "ID", "KIND", "REGION", "TENANT", "REASON", "ATTEMPT", "FINISHED")
	if !strings.Contains(out, "subscriber_gone") || !strings.Contains(out, "2026-03-01 10:00:00Z") {
		t.Errorf("table:\n%s", out)
	}
}

func TestDLQRedrive(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"POST /v1/dead-letters/j9/redrive": {body: `{"id":"j9","state":"waiting"}`}})
	out, _ := api.ok(t, "dlq", "redrive", "j9", "--region", "us")
	if r := api.only(t, "POST", "/v1/dead-letters/j9/redrive"); r.query.Get("region") != "us" {
		t.Errorf("query = %v", r.query)
	}
	if out != "redriven j9 (state waiting)\n" {
		t.Errorf("stdout = %q", out)
	}
}

func TestDLQRedriveNotFound(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, nil) // every route 404s with a problem
	code, _, errOut := api.cli(t, "dlq", "redrive", "nope")
	if code != 1 || !strings.HasPrefix(errOut, "error: Not Found:") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}
