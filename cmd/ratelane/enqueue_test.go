package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const jobJSON = `{"id":"01JQ8Z7K3M2N4P5Q6R7S8T9V0W","kind":"webhook","region":"eu","lane":"interactive","tenant":"acme",
	"limit_keys":["subscriber:store_17","tenant:acme"],"cost":1,"priority":5,"payload":{"event":"order.paid"},
	"budgets":{"congestion":20,"transient":5,"schema":2},"state":"waiting","eligible_at":"2026-03-01T12:00:10Z",
	"attempt":0,"attempts":{"congestion":0,"transient":0,"schema":0},"created_at":"2026-03-01T12:00:00.123Z","updated_at":"2026-03-01T12:00:00.123Z"}`

func TestEnqueue(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"POST /v1/jobs": {status: 201, body: jobJSON}})
	payload := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(payload, []byte(`{"event":"order.paid","n":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := api.ok(t, "enqueue", "--kind", "webhook", "--region", "eu", "--lane", "interactive",
		"--key", "subscriber:store_17", "--key", "tenant:acme", "--payload", "@"+payload,
		"--idempotency-key", "order-42", "--delay", "10s", "--priority", "5")
	r := api.only(t, "POST", "/v1/jobs")
	if got := r.header.Get("Idempotency-Key"); got != "order-42" {
		t.Errorf("Idempotency-Key = %q", got)
	}
	want := map[string]any{
		"kind": "webhook", "region": "eu", "lane": "interactive",
		"limit_keys":    []any{"subscriber:store_17", "tenant:acme"},
		"payload":       map[string]any{"event": "order.paid", "n": 1.0},
		"delay_seconds": 10.0, "priority": 5.0,
	}
	wantJSONBody(t, r, want)
	if !strings.HasPrefix(out, "01JQ8Z7K3M2N4P5Q6R7S8T9V0W\twebhook waiting in eu, interactive lane\n") {
		t.Errorf("stdout = %q", out)
	}
}

// TestEnqueueUnservedKind: a create response that says nothing handles the
// kind is shown as a warning on stderr, after the job's line.
func TestEnqueueUnservedKind(t *testing.T) {
	t.Parallel()
	body := strings.TrimSuffix(jobJSON, "}") + `,"predicted_wait_seconds":0,"unserved":{"detail":"nothing handles kind \"webhook\" in region eu"}}`
	api := newFakeAPI(t, map[string]canned{"POST /v1/jobs": {status: 201, body: body}})
	out, errOut := api.ok(t, "enqueue", "--kind", "webhook", "--region", "eu", "--key", "tenant:acme")
	if !strings.HasPrefix(out, "01JQ8Z7K3M2N4P5Q6R7S8T9V0W\twebhook waiting in eu") || strings.Contains(out, "warning") {
		t.Errorf("stdout = %q", out)
	}
	if errOut != "warning: nothing handles kind \"webhook\" in region eu\n" {
		t.Errorf("stderr = %q", errOut)
	}
}

func TestEnqueueMinimalAndReplay(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"POST /v1/jobs": {body: `{"job":` + jobJSON + `}`, header: map[string]string{"Idempotent-Replayed": "true"}}})
	out, _ := api.ok(t, "enqueue", "--kind", "webhook", "--key", "tenant:acme", "--payload", `{"a":1}`)
	r := api.only(t, "POST", "/v1/jobs")
	// Unset flags are not sent, so the server's defaults apply; a priority
	// of 0 or a delay of 0 would not be the same as "unset".
	want := map[string]any{"kind": "webhook", "limit_keys": []any{"tenant:acme"}, "payload": map[string]any{"a": 1.0}}
	wantJSONBody(t, r, want)
	if r.header.Get("Idempotency-Key") != "" {
		t.Error("Idempotency-Key sent without --idempotency-key")
	}
	if !strings.Contains(out, "replayed") {
		t.Errorf("stdout does not mention the replay: %q", out)
	}
}

func TestEnqueueJSON(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"POST /v1/jobs": {status: 201, body: jobJSON}})
	for _, flags := range [][]string{{"--json"}, {"-o", "json"}} {
		code, out, _ := api.cli(t, append(append([]string{"enqueue"}, flags...), "--kind", "webhook", "--key", "a:b")...)
		if code != 0 || out != jobJSON+"\n" {
			t.Fatalf("%q: exit %d, stdout %q", flags, code, out)
		}
	}
}

// TestEnqueueRegion: without --region, enqueue uses the server's region
// when it serves only one (from GET /v1), refuses with the list when it
// serves several, and leaves the choice to the server when the discovery
// document cannot be read.
func TestEnqueueRegion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, discovery string
		code            int
		region          any // nil: not sent
		stderr          string
	}{
		{"one region", `{"regions":["eu"]}`, 0, "eu", ""},
		{"two regions", `{"regions":["us","eu"]}`, 2, nil, "--region is required: the server serves us, eu"},
		{"no discovery", "", 0, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			routes := map[string]canned{"POST /v1/jobs": {status: 201, body: jobJSON}}
			if tc.discovery != "" {
				routes["GET /v1"] = canned{body: tc.discovery}
			}
			api := newFakeAPI(t, routes)
			code, _, errOut := api.cli(t, "enqueue", "--kind", "webhook", "--key", "tenant:acme")
			if code != tc.code || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, errOut)
			}
			if tc.code != 0 {
				api.mu.Lock()
				defer api.mu.Unlock()
				for _, r := range api.got {
					if r.method == "POST" {
						t.Fatalf("a usage error sent %s %s", r.method, r.path)
					}
				}
				return
			}
			if got := jsonBody(t, api.only(t, "POST", "/v1/jobs"))["region"]; got != tc.region {
				t.Errorf("region sent = %v, want %v", got, tc.region)
			}
		})
	}
}
