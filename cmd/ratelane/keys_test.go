package main

import (
	"strings"
	"testing"
)

func TestKeysCreate(t *testing.T) {
	t.Parallel()
	const secret = "rl_k7x2p9qa_abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnop"
	api := newFakeAPI(t, map[string]canned{"POST /v1/keys": {status: 201,
		body: `{"id":"k7x2p9qa","name":"billing","tenant":"acme","role":"producer","regions":["eu","us"],"created_at":"2026-03-01T12:00:00Z","secret":"` + secret + `"}`}})
	out, errOut := api.ok(t, "keys", "create", "--tenant", "acme", "--role", "producer", "--region", "eu", "--region", "us", "--name", "billing")
	r := api.only(t, "POST", "/v1/keys")
	want := map[string]any{"tenant": "acme", "role": "producer", "regions": []any{"eu", "us"}, "name": "billing"}
	wantJSONBody(t, r, want)
	if !strings.Contains(out, "created key k7x2p9qa (tenant acme, role producer, regions eu,us)") || !strings.Contains(out, "    "+secret+"\n") {
		t.Errorf("stdout:\n%s", out)
	}
	if strings.Contains(errOut, secret) {
		t.Error("the secret went to stderr")
	}
}

func TestKeysCreateWrapped(t *testing.T) {
	t.Parallel()
	// Another plausible envelope: the info under "key", the secret beside it.
	api := newFakeAPI(t, map[string]canned{"POST /v1/keys": {status: 201,
		body: `{"key":{"id":"k7x2p9qa","tenant":"acme","role":"worker","regions":[]},"secret":"rl_k7x2p9qa_zzzz"}`}})
	code, out, _ := api.cli(t, "keys", "create", "--tenant", "acme", "--role", "worker")
	if code != 0 || !strings.Contains(out, "created key k7x2p9qa (tenant acme, role worker, regions all)") || !strings.Contains(out, "rl_k7x2p9qa_zzzz") {
		t.Fatalf("exit %d, stdout:\n%s", code, out)
	}
}

func TestKeysList(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"GET /v1/keys": {body: `{"keys":[
		{"id":"admin001","name":"RATELANE_ADMIN_KEY","tenant":"admin","role":"admin","regions":[],"created_at":"2026-03-01T09:00:00Z"},
		{"id":"k7x2p9qa","name":"","tenant":"acme","role":"producer","regions":["eu"],"created_at":"2026-03-01T12:00:00Z","revoked_at":"2026-03-02T08:00:00Z"}]}`}})
	out, _ := api.ok(t, "keys", "ls")
	api.only(t, "GET", "/v1/keys")
	wantColumns(t, out, 2, "ID", "NAME", "TENANT", "ROLE", "REGIONS", "CREATED", "REVOKED")
	for _, s := range []string{"admin001", "RATELANE_ADMIN_KEY", "all", "2026-03-02 08:00:00Z"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}
