package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// secretEnv is every secret the command reads from the environment, each
// set to its own canary by TestNoSecretInOutput.
var secretEnv = map[string]string{
	envAPIKey:                 "canary-api-key-5be1",
	"RATELANE_ADMIN_KEY":      "canary-admin-key-77c2",
	"RATELANE_REVIEW_API_KEY": "canary-review-key-0d93",
	"OPENAI_API_KEY":          "canary-openai-key-a1f4",
	"ANTHROPIC_API_KEY":       "canary-anthropic-key-e6b8",
}

// setSecrets sets every secret variable to its canary (and RATELANE_URL to
// a URL whose password is one) and returns a check that fails the test when
// any canary appears in out.
func setSecrets(t *testing.T, serverURL string) (check func(what, out string)) {
	t.Helper()
	for k, v := range secretEnv {
		t.Setenv(k, v)
	}
	t.Setenv(envServer, serverURL)
	return func(what, out string) {
		t.Helper()
		for k, v := range secretEnv {
			if strings.Contains(out, v) {
				t.Errorf("%s prints the value of %s:\n%s", what, k, out)
			}
		}
		if strings.Contains(out, "canary-url-password") {
			t.Errorf("%s prints the password of %s:\n%s", what, envServer, out)
		}
	}
}

// runCLI runs the command line as main does, returning the exit code and
// stdout and stderr together.
func runCLI(args ...string) (int, string) {
	var out bytes.Buffer
	code := run(context.Background(), args, &out, &out)
	return code, out.String()
}

var verbLine = regexp.MustCompile(`(?m)^  (\S+)\s`)

// TestNoSecretInOutput runs every command, and every verb of a command
// with verbs, with -h and with a mistyped flag while every secret variable
// holds a canary, and checks that no canary is printed: the flag package
// prints each flag's default in usage text, so a default read from the
// environment would leak there. It cannot be parallel (t.Setenv).
func TestNoSecretInOutput(t *testing.T) {
	check := setSecrets(t, "http://ratelane:canary-url-password@127.0.0.1:1")
	var clientUsages int
	for name := range commands {
		for _, flagArg := range []string{"-h", "--no-such-flag"} {
			code, out := runCLI(name, flagArg)
			check(name+" "+flagArg, out)
			if flagArg == "--no-such-flag" && code == 0 {
				t.Errorf("%s --no-such-flag: exit 0", name)
			}
			if flagArg != "-h" || !strings.Contains(out, "Verbs:") {
				continue
			}
			_, verbs, _ := strings.Cut(out, "Verbs:")
			for _, m := range verbLine.FindAllStringSubmatch(verbs, -1) {
				for _, fa := range []string{"-h", "--no-such-flag"} {
					code, out := runCLI(name, m[1], fa)
					check(name+" "+m[1]+" "+fa, out)
					if fa == "--no-such-flag" && code != 2 {
						t.Errorf("%s %s --no-such-flag: exit %d, want 2", name, m[1], code)
					}
					if strings.Contains(out, "$"+envAPIKey) {
						clientUsages++
					}
				}
			}
		}
	}
	// The client verbs were reached (jobs, dlq, limits, keys: at least 10
	// verbs, twice each), so the check above was not vacuous.
	if clientUsages < 20 {
		t.Errorf("only %d client usage texts seen", clientUsages)
	}
	if _, out := runCLI("enqueue", "-h"); !strings.Contains(out, "-api-key KEY") {
		t.Errorf("enqueue -h does not document --api-key:\n%s", out)
	}
}

// TestNoSecretInErrors checks the error paths that mention the key or the
// server: a 401, an unreachable server (whose message names the URL,
// password redacted, and the variable it came from), a malformed server
// URL, a malformed upstream --secret and a malformed RATELANE_ADMIN_KEY at
// serve.
func TestNoSecretInErrors(t *testing.T) {
	api := newFakeAPI(t, map[string]canned{"GET /v1/keys": {status: 401, ctype: "application/problem+json",
		body: `{"title":"Unauthorized","status":401,"detail":"this API key is not known; check RATELANE_API_KEY"}`}})
	check := setSecrets(t, api.srv.URL)

	code, out := runCLI("keys", "ls")
	check("a 401", out)
	if code != 1 || !strings.Contains(out, "from "+envAPIKey) || !strings.Contains(out, api.srv.URL) {
		t.Errorf("401: exit %d, want 1 and a message naming %s and the server:\n%s", code, envAPIKey, out)
	}

	closed := freeAddr(t) // nothing listens there
	t.Setenv(envServer, "http://ratelane:canary-url-password@"+closed)
	code, out = runCLI("jobs", "ls")
	check("an unreachable server", out)
	if code != 1 || !strings.Contains(out, "cannot reach the ratelane server at http://ratelane:xxxxx@"+closed+" (from "+envServer+")") {
		t.Errorf("unreachable: exit %d, want 1 and a message naming the URL and %s:\n%s", code, envServer, out)
	}

	t.Setenv(envServer, "ftp://ratelane:canary-url-password@host")
	code, out = runCLI("jobs", "ls")
	check("a malformed server URL", out)
	if code != 2 || !strings.Contains(out, envServer) {
		t.Errorf("malformed URL: exit %d, want 2 and a message naming %s:\n%s", code, envServer, out)
	}

	code, out = runCLI("upstream", "--addr", "127.0.0.1:0", "--route", "a", "--secret", "whsec_canary-upstream-secret!")
	if code == 0 || strings.Contains(out, "canary-upstream-secret") {
		t.Errorf("upstream with a malformed --secret: exit %d, want non-zero without the secret:\n%s", code, out)
	}

	code, out = runCLI("serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0", "--regions", "eu")
	check("serve with a malformed RATELANE_ADMIN_KEY", out)
	if code == 0 || !strings.Contains(out, "RATELANE_ADMIN_KEY") {
		t.Errorf("serve: exit %d, want an error naming RATELANE_ADMIN_KEY:\n%s", code, out)
	}
}

// TestServerFromOldVariable: RATELANE_SERVER, the name read before
// RATELANE_URL, still works when RATELANE_URL is unset, with a warning;
// RATELANE_URL wins when both are set.
func TestServerFromOldVariable(t *testing.T) {
	api := newFakeAPI(t, map[string]canned{"GET /v1/keys": {body: `{"keys":[]}`}})
	t.Setenv(envAPIKey, testKey)
	t.Setenv(envServer, "")
	t.Setenv(envServerOld, api.srv.URL)
	code, out := runCLI("keys", "ls")
	if code != 0 || !strings.Contains(out, envServerOld+" is deprecated; set "+envServer) {
		t.Fatalf("exit %d, want 0 and a deprecation warning:\n%s", code, out)
	}
	t.Setenv(envServer, api.srv.URL)
	t.Setenv(envServerOld, "http://127.0.0.1:1")
	if code, out := runCLI("keys", "ls"); code != 0 || strings.Contains(out, "deprecated") {
		t.Fatalf("with both set: exit %d:\n%s", code, out)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.got) != 2 {
		t.Fatalf("API received %d requests, want 2", len(api.got))
	}
}
