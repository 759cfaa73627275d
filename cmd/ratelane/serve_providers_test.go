package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
)

// The keys the serve test hands its providers: one through a file, one
// through the environment. Neither may appear anywhere ratelane writes.
const (
	serveOpenAIKey    = "sk-canary-openai-file-key-91d2e7"
	serveAnthropicKey = "sk-ant-canary-env-key-4c08b3"
)

// reviewAnswer is the simulator's answer to every review call: one finding
// on the TODO the test diff (reviewDiff) adds on line 3.
const reviewAnswer = `{"findings":[{"path":"app.go","line":3,"end_line":null,"severity":"info","category":"maintainability",` +
	`"message":"A TODO was added.","evidence":"// TODO: handle retries","suggestion":null,"confidence":0.9}]}`

// TestServeConfiguredProviders runs ratelane serve (the command's own
// path: flags, config file, plug-in wiring, HTTP API) with a config naming
// the LLM simulator as an openai and an anthropic provider of region us,
// and reviews a diff with each through POST /v1/reviews: both are reviewed
// with the model's finding and published. The first OpenAI call meets a
// 429 with Retry-After: the provider's requests key pauses (the limits
// API shows it), the part is rescheduled on the congestion budget and
// then succeeds. The anthropic provider declares RPM and TPM: its part
// names both keys, takes one start from the requests key and its
// estimated tokens from the tokens key, reconciled from the usage the
// answer reported. The
// provider listing names both without a key, and no key appears in the
// logs, any API answer, the metrics, the dashboard or serve --help.
// Not parallel: it sets environment variables.
func TestServeConfiguredProviders(t *testing.T) {
	sim, err := upstream.New(upstream.Config{Responder: func(upstream.LLMRequest) string { return reviewAnswer }})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	rateHeaders := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"2"}}
	if err := sim.Script("openai", upstream.Response{Status: 429, Header: rateHeaders,
		Body: []byte(`{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	keyFile := serveKeys(t, dir)
	// A large answer cap makes the estimate (part + prompt + cap) far
	// above what the simulator reports, so reconciliation is visible.
	const maxOut, tpm = 50000, 130000
	cfg := map[string]any{
		"data":    filepath.Join(dir, "data"),
		"regions": []map[string]any{{"Name": "us", "Synchronous": "NORMAL"}},
		"workers": 4,
		"providers": map[string]any{"us": []map[string]any{
			{"name": "us-openai", "kind": "openai", "region": "us", "base_url": sim.LLMBaseURL("openai") + "/v1",
				"model": "gpt-4o-mini", "api_key_file": keyFile, "timeout": "20s", "rpm": 600},
			{"name": "us-claude", "kind": "anthropic", "region": "us", "endpoint": sim.LLMBaseURL("anthropic"),
				"model": "claude-sonnet-4-5", "api_key_env": "TEST_ANTHROPIC_KEY", "tpm": tpm, "rpm": 300, "max_output_tokens": maxOut},
		}},
	}
	n := startServe(t, dir, cfg)
	defer n.stop()
	call, decode := n.call, n.decode

	// The listing: both providers, the first the default, no key.
	code, body := call("GET", "/v1/reviews/providers", nil)
	var list struct {
		Providers []map[string]any `json:"providers"`
	}
	decode(body, &list)
	if code != 200 || len(list.Providers) != 2 || list.Providers[0]["name"] != "us-openai" || list.Providers[0]["default"] != true ||
		list.Providers[0]["rpm"] != 600.0 || list.Providers[1]["tokens_key"] != "anthropic:claude-sonnet-4-5:tokens" {
		t.Fatalf("GET /v1/reviews/providers: %d\n%s", code, body)
	}
	// A provider the region lacks is refused, naming the field.
	code, body = call("POST", "/v1/reviews", map[string]any{"region": "us", "provider": "openai", "diff": reviewDiff})
	if code != 400 || !strings.Contains(string(body), "provider") {
		t.Fatalf("unknown provider: %d\n%s", code, body)
	}

	submitted := time.Now()
	ids := map[string]string{}
	for _, p := range []string{"us-openai", "us-claude"} {
		code, body := call("POST", "/v1/reviews", map[string]any{"region": "us", "provider": p, "diff": reviewDiff, "depth": "full",
			"repo": "acme/app", "change": "7"})
		var rv struct{ ID, Provider string }
		decode(body, &rv)
		if code != 202 || rv.Provider != p {
			t.Fatalf("POST /v1/reviews provider %s: %d\n%s", p, code, body)
		}
		ids[p] = rv.ID
	}

	// The 429 pauses the OpenAI requests key: shared queue state, visible
	// in the limits API while it lasts.
	testkit.Eventually(t, 20*time.Second, "the 429 to pause openai:gpt-4o-mini", func() error {
		_, body := call("GET", "/v1/limits/openai:gpt-4o-mini?region=us", nil)
		var l struct {
			PausedUntil *time.Time `json:"paused_until"`
			Windows     []struct {
				Limit float64 `json:"limit"`
			} `json:"windows"`
		}
		decode(body, &l)
		if len(l.Windows) != 1 || l.Windows[0].Limit != 600 {
			t.Fatalf("openai:gpt-4o-mini is not paced at the declared rpm:\n%s", body)
		}
		if l.PausedUntil == nil {
			return fmt.Errorf("not paused: %s", body)
		}
		return nil
	})

	for p, id := range ids {
		n.waitReviewed("review "+id+" by "+p, id)
	}
	readTokens := time.Now()

	// The OpenAI part spent one congestion attempt; the anthropic part none.
	_, body = call("GET", "/v1/jobs?region=us&kind=review.part", nil)
	var parts struct {
		Jobs []struct {
			ID        string   `json:"id"`
			Cost      int64    `json:"cost"`
			LimitKeys []string `json:"limit_keys"`
			Attempts  struct {
				Congestion int `json:"congestion"`
			} `json:"attempts"`
		} `json:"jobs"`
	}
	decode(body, &parts)
	var tokensCost int64
	congestion := map[string]int{}
	for _, j := range parts.Jobs {
		keys := strings.Join(j.LimitKeys, ",")
		if keys != "openai:gpt-4o-mini" && keys != "anthropic:claude-sonnet-4-5:tokens,anthropic:claude-sonnet-4-5" {
			t.Fatalf("part %s names keys %v", j.ID, j.LimitKeys)
		}
		congestion[j.LimitKeys[0]] += j.Attempts.Congestion
		if j.LimitKeys[0] == "anthropic:claude-sonnet-4-5:tokens" {
			tokensCost = j.Cost
		}
	}
	// The anthropic part costs its tokens on the TPM key and one start on
	// the RPM key, whose burst (3) is far below that cost: it counts starts.
	_, body = call("GET", "/v1/limits/anthropic:claude-sonnet-4-5?region=us", nil)
	var rq struct {
		PerStart bool    `json:"per_start"`
		Burst    float64 `json:"burst"`
		Windows  []struct {
			Limit float64 `json:"limit"`
		} `json:"windows"`
	}
	decode(body, &rq)
	if !rq.PerStart || rq.Burst >= maxOut || len(rq.Windows) != 1 || rq.Windows[0].Limit != 300 {
		t.Errorf("the anthropic requests key is not a per-start key of 300 per minute: %s", body)
	}
	if len(parts.Jobs) != 2 || congestion["openai:gpt-4o-mini"] != 1 || congestion["anthropic:claude-sonnet-4-5:tokens"] != 0 {
		t.Errorf("parts: %s", body)
	}

	// Reconciliation: the tokens key's bucket holds more than it would if
	// the part had kept its estimate. Without it, its free room would be
	// at most burst - estimate + refill since the submission.
	_, body = call("GET", "/v1/limits/anthropic:claude-sonnet-4-5:tokens?region=us", nil)
	var tk struct {
		Rate   float64 `json:"rate"`
		Burst  float64 `json:"burst"`
		Tokens float64 `json:"tokens"`
	}
	decode(body, &tk)
	if tokensCost < maxOut || tk.Burst < float64(tokensCost) {
		t.Fatalf("tokens key %s and part cost %d: want a cost of at least the %d answer cap within the burst", body, tokensCost, maxOut)
	}
	unreconciled := tk.Burst - float64(tokensCost) + tk.Rate*time.Since(submitted).Seconds()
	if unreconciled >= tk.Burst {
		t.Logf("reconciliation not observable: %v passed, the bucket refilled the estimate (%s)", readTokens.Sub(submitted), body)
	} else if tk.Tokens <= unreconciled {
		t.Errorf("tokens key holds %.0f units, no more than the %.0f it would without reconciling the reported usage: %s",
			tk.Tokens, unreconciled, body)
	}

	n.checkNoKeys(t, serveOpenAIKey, serveAnthropicKey)
}

// servedNode is ratelane serve run in-process (the command's own path) by
// startServe, with an admin client that records every answer.
type servedNode struct {
	t      *testing.T
	base   string
	logs   *testkit.Buffer
	seen   bytes.Buffer // every answer body, checked for keys by checkNoKeys
	cancel context.CancelFunc
	exited chan error
	done   bool
}

// serveKeys hands a serve test's providers their keys as its config
// names them: serveOpenAIKey in the file it returns (in dir),
// serveAnthropicKey in TEST_ANTHROPIC_KEY; the admin key in
// RATELANE_ADMIN_KEY. The caller must not be parallel (it sets the
// environment).
func serveKeys(t *testing.T, dir string) string {
	t.Helper()
	keyFile := filepath.Join(dir, "openai.key")
	if err := os.WriteFile(keyFile, []byte(serveOpenAIKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_ANTHROPIC_KEY", serveAnthropicKey)
	t.Setenv("RATELANE_ADMIN_KEY", liveAdminKey)
	return keyFile
}

// startServe writes cfg as dir/ratelane.json, runs serve with it (and the
// dashboard) on a free port, and waits until it answers.
func startServe(t *testing.T, dir string, cfg map[string]any) *servedNode {
	t.Helper()
	cfgPath := filepath.Join(dir, "ratelane.json")
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	n := &servedNode{t: t, base: "http://" + freeAddr(t), logs: &testkit.Buffer{}, exited: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		code := run(ctx, []string{"serve", "--config", cfgPath, "--addr", strings.TrimPrefix(n.base, "http://"), "--ui"}, n.logs, n.logs)
		n.exited <- fmt.Errorf("exit %d", code)
	}()
	waitServing(t, n.base, n.exited, n.logs)
	return n
}

// stop shuts the server down and waits for run to return; idempotent.
func (n *servedNode) stop() {
	if !n.done {
		n.done = true
		n.cancel()
		<-n.exited
	}
}

// waitReviewed waits until review id (of region us) is published and
// checks that its result is the model's one finding (reviewAnswer's, on
// app.go:3); what names the review in the messages.
func (n *servedNode) waitReviewed(what, id string) {
	n.t.Helper()
	var rv struct {
		State  string `json:"state"`
		Result *struct {
			Findings []struct {
				Path string `json:"path"`
				Line int    `json:"line"`
			} `json:"findings"`
		} `json:"result"`
	}
	testkit.Eventually(n.t, 30*time.Second, what+" to publish", func() error {
		_, body := n.call("GET", "/v1/reviews/"+id+"?region=us", nil)
		n.decode(body, &rv)
		if rv.State != "published" {
			return fmt.Errorf("state %s: %s", rv.State, body)
		}
		return nil
	})
	if rv.Result == nil || len(rv.Result.Findings) != 1 || rv.Result.Findings[0].Path != "app.go" || rv.Result.Findings[0].Line != 3 {
		n.t.Errorf("%s: result %+v, want the model's one finding on app.go:3", what, rv.Result)
	}
}

// call sends a request with the admin key and returns the status and body.
func (n *servedNode) call(method, path string, body any) (int, []byte) {
	n.t.Helper()
	resp, out := testkit.Call(n.t, nil, method, n.base+path, liveAdminKey, body)
	n.seen.WriteString(method + " " + path + "\n")
	n.seen.Write(out)
	return resp.StatusCode, out
}

// decode unmarshals an answer or fails the test showing it.
func (n *servedNode) decode(b []byte, v any) {
	n.t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		n.t.Fatalf("%v:\n%s", err, b)
	}
}

// checkNoKeys reads the pages a key could leak into (the discovery
// document, the limits, the metrics, the dashboard, the OpenAPI document),
// stops the server, and fails if any key appears in an answer read so
// far, the serve log or serve --help.
func (n *servedNode) checkNoKeys(t *testing.T, keys ...string) {
	t.Helper()
	for _, path := range []string{"/v1", "/v1/limits?region=us", "/metrics", "/ui/", "/v1/openapi.json"} {
		n.call("GET", path, nil)
	}
	n.stop()
	var help bytes.Buffer
	run(context.Background(), []string{"serve", "--help"}, &help, &help)
	for what, text := range map[string]string{"the API answers": n.seen.String(), "the serve log": n.logs.String(), "serve --help": help.String()} {
		for _, key := range keys {
			if strings.Contains(text, key) {
				t.Errorf("%s contain a provider key", what)
			}
		}
	}
	if !strings.Contains(n.logs.String(), "shutting down") || !strings.Contains(n.seen.String(), "ratelane_") {
		t.Errorf("the leak check read no log or no metrics:\nlog:\n%s", n.logs.String())
	}
}
