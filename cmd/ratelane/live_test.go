package main

// Tests of the client verbs against the real HTTP API: a real engine over
// a real SQLite store in t.TempDir(), served on loopback, with webhook
// deliveries and server-side reviews on, as ratelane serve wires them.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// liveAdminKey is the admin key of the live test servers.
const liveAdminKey = "rl_live0001_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"

// liveAPI is one running server.
type liveAPI struct{ url string }

// newLiveAPI starts the engine and the API for one region, eu, with
// webhook targets on loopback allowed (the tests' receivers).
func newLiveAPI(t *testing.T) *liveAPI {
	t.Helper()
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "eu", Synchronous: "NORMAL"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := registerBuiltins(&cfg, &serverFlags{allowPrivate: true}); err != nil {
		t.Fatal(err)
	}
	_, url := serveAPI(t, cfg, liveAdminKey, true)
	return &liveAPI{url: url}
}

// serveAPI opens a client on cfg, serves its HTTP API with the admin key
// adminKey on loopback and, with start, runs its engine; the test's
// cleanup stops and closes it all. Per-key request limiting is off: the
// callers share one admin key, and the API's own 100/s per key would
// throttle (or, in a benchmark, be measured instead of) the API.
func serveAPI(tb testing.TB, cfg ratelane.Config, adminKey string, start bool) (*ratelane.Client, string) {
	tb.Helper()
	ctx := context.Background()
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	api, err := c.NewAPI(ctx, ratelane.APIConfig{AdminKey: adminKey, RequestRate: -1})
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	if start {
		if err := c.Start(ctx); err != nil {
			api.Close()
			c.Close()
			tb.Fatal(err)
		}
	}
	srv := httptest.NewServer(api.Handler)
	tb.Cleanup(func() {
		srv.Close()
		if start {
			stop, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.Stop(stop)
		}
		api.Close()
		c.Close()
	})
	return c, srv.URL
}

// cli runs "ratelane args... --server URL --api-key KEY" as main does.
func (a *liveAPI) cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return a.cliKey(t, liveAdminKey, args...)
}

func (a *liveAPI) cliKey(t *testing.T, key string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "--server", a.url, "--api-key", key)
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// ok runs a verb that must succeed and returns its stdout.
func (a *liveAPI) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := a.cli(t, args...)
	if code != 0 {
		t.Fatalf("ratelane %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
	}
	return out
}

// fails runs a verb that must fail with exit code want and a message on
// stderr containing every one of msgs.
func (a *liveAPI) fails(t *testing.T, want int, msgs []string, args ...string) {
	t.Helper()
	code, out, errOut := a.cli(t, args...)
	if code != want {
		t.Errorf("ratelane %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, want, out, errOut)
		return
	}
	for _, m := range msgs {
		if !strings.Contains(errOut, m) {
			t.Errorf("ratelane %q: stderr lacks %q:\n%s", args, m, errOut)
		}
	}
}

// okJSON runs a verb with -o json and decodes its stdout.
func (a *liveAPI) okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := a.ok(t, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("ratelane %q -o json: %v\n%s", args, err, out)
	}
}

func secretLine(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, prefix) {
			return s
		}
	}
	t.Fatalf("no %s secret in:\n%s", prefix, out)
	return ""
}

func TestLiveSubscribersEventsDeliveries(t *testing.T) {
	t.Parallel()
	api := newLiveAPI(t)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "receiver is down")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	// subscribers create: the generated secret once, on stdout.
	out := api.ok(t, "subscribers", "create", "s1", "--url", receiver.URL+"/ok", "--topic", "shipment.updated", "--rate", "50", "--region", "eu")
	if !strings.Contains(out, "created subscriber s1 (region eu, limit key subscriber:s1)") {
		t.Errorf("create:\n%s", out)
	}
	secret := secretLine(t, out, "whsec_")
	api.fails(t, 2, []string{"--url is required"}, "subscribers", "create", "s9", "--topic", "x", "--region", "eu")
	api.fails(t, 1, []string{"error: ", "url"}, "subscribers", "create", "s9", "--url", "ftp://example.com", "--topic", "x", "--region", "eu")

	// ls, get: never the secret.
	out = api.ok(t, "subscribers", "ls")
	wantColumns(t, out, 1, "ID", "REGION", "TENANT", "URL", "TOPICS", "RATE", "ENABLED")
	if !strings.Contains(out, "s1") || !strings.Contains(out, "50/1s") {
		t.Errorf("ls:\n%s", out)
	}
	var list struct {
		Subscribers []map[string]any `json:"subscribers"`
	}
	api.okJSON(t, &list, "subscribers", "ls")
	if len(list.Subscribers) != 1 {
		t.Errorf("ls -o json: %v", list)
	}
	api.fails(t, 2, []string{"--limit must be from 1 to 500"}, "subscribers", "ls", "--limit", "-1")
	out = api.ok(t, "subscribers", "get", "s1", "--region", "eu")
	if !strings.Contains(out, "limit key:") || !strings.Contains(out, "subscriber:s1") || strings.Contains(out, secret) {
		t.Errorf("get:\n%s", out)
	}
	api.fails(t, 1, []string{"Not Found", "subscriber nope"}, "subscribers", "get", "nope", "--region", "eu")

	// update keeps the secret and prints none; rotate prints a new one.
	out = api.ok(t, "subscribers", "update", "s1", "--url", receiver.URL+"/ok", "--topic", "shipment.updated", "--region", "eu")
	if !strings.Contains(out, "updated subscriber s1") || strings.Contains(out, "whsec_") {
		t.Errorf("update:\n%s", out)
	}
	api.fails(t, 2, []string{"--topic is required"}, "subscribers", "update", "s1", "--url", receiver.URL, "--region", "eu")
	out = api.ok(t, "subscribers", "rotate", "s1", "--region", "eu", "--window", "1h")
	if rotated := secretLine(t, out, "whsec_"); rotated == secret {
		t.Errorf("rotate printed the old secret")
	}
	api.fails(t, 1, []string{"window"}, "subscribers", "rotate", "s1", "--region", "eu", "--window", "1s")

	// events publish fans out; deliveries are listed by event and subscriber.
	out = api.ok(t, "events", "publish", "--topic", "shipment.updated", "--id", "shp_1", "--region", "eu", "--payload", `{"status":"in_transit"}`)
	if !strings.Contains(out, "published shp_1 version 0: 1 deliveries") {
		t.Errorf("publish:\n%s", out)
	}
	api.fails(t, 2, []string{"--payload is not valid JSON"}, "events", "publish", "--topic", "t", "--id", "e", "--region", "eu", "--payload", "{nope")
	api.fails(t, 1, []string{"region"}, "events", "publish", "--topic", "t", "--id", "e", "--region", "mars", "--payload", "{}")
	var dl struct {
		Deliveries []deliveryView `json:"deliveries"`
	}
	api.okJSON(t, &dl, "events", "deliveries", "shp_1", "--region", "eu")
	if len(dl.Deliveries) != 1 || dl.Deliveries[0].SubscriberID != "s1" {
		t.Fatalf("event deliveries: %+v", dl)
	}
	id := dl.Deliveries[0].ID
	api.fails(t, 2, []string{"needs EVENT_ID"}, "events", "deliveries")
	out = api.ok(t, "deliveries", "ls", "--subscriber", "s1", "--region", "eu")
	wantColumns(t, out, 1, "ID", "SUBSCRIBER", "EVENT", "VERSION", "STATE", "REASON", "ATTEMPTS", "LAST STATUS", "NEXT ATTEMPT", "CREATED")
	api.fails(t, 2, []string{"exactly one of --subscriber and --event"}, "deliveries", "ls")
	out = api.ok(t, "subscribers", "deliveries", "s1", "--region", "eu")
	if !strings.Contains(out, id) {
		t.Errorf("subscribers deliveries:\n%s", out)
	}
	out = api.ok(t, "deliveries", "get", id)
	if !strings.Contains(out, "id:") || !strings.Contains(out, id) {
		t.Errorf("deliveries get:\n%s", out)
	}
	api.fails(t, 1, []string{"Not Found"}, "deliveries", "get", "nope")

	// redeliver a published delivery: a copy with the same webhook-id.
	testkit.WaitFor(t, testkit.Timeout, "the delivery to be published", func() bool {
		var dl struct {
			Deliveries []deliveryView `json:"deliveries"`
		}
		api.okJSON(t, &dl, "events", "deliveries", "shp_1", "--region", "eu")
		return len(dl.Deliveries) == 1 && dl.Deliveries[0].State == "published"
	})
	out = api.ok(t, "deliveries", "redeliver", id)
	if !strings.HasPrefix(out, "redelivering "+id+" as ") {
		t.Errorf("redeliver:\n%s", out)
	}
	api.fails(t, 1, []string{"Not Found"}, "deliveries", "redeliver", "nope")

	// response: the last failed answer, to admins only.
	api.ok(t, "subscribers", "create", "s2", "--url", receiver.URL+"/fail", "--topic", "fail.topic", "--region", "eu")
	api.ok(t, "events", "publish", "--topic", "fail.topic", "--id", "f1", "--region", "eu", "--payload", "{}")
	api.okJSON(t, &dl, "events", "deliveries", "f1", "--region", "eu")
	failID := dl.Deliveries[0].ID
	testkit.WaitFor(t, testkit.Timeout, "a failed answer to be recorded", func() bool {
		code, _, _ := api.cli(t, "deliveries", "response", failID)
		return code == 0
	})
	out = api.ok(t, "deliveries", "response", failID)
	if !strings.Contains(out, "500") || !strings.Contains(out, "receiver is down") {
		t.Errorf("response:\n%s", out)
	}
	api.fails(t, 2, []string{"needs ID"}, "deliveries", "response")

	// rm and delete.
	if out := api.ok(t, "subscribers", "rm", "s2", "--region", "eu"); out != "deleted subscriber s2\n" {
		t.Errorf("rm: %q", out)
	}
	api.fails(t, 1, []string{"Not Found"}, "subscribers", "delete", "s2", "--region", "eu")
	var empty map[string]any
	api.okJSON(t, &empty, "subscribers", "delete", "s1", "--region", "eu")
}

// reviewDiff adds a TODO, which the built-in rules provider reports.
const reviewDiff = "diff --git a/app.go b/app.go\n--- a/app.go\n+++ b/app.go\n@@ -1,3 +1,4 @@\n package app\n \n+// TODO: handle retries\n func Run() {}\n"

func TestLiveReviews(t *testing.T) {
	t.Parallel()
	api := newLiveAPI(t)
	diff := filepath.Join(t.TempDir(), "change.diff")
	if err := os.WriteFile(diff, []byte(reviewDiff), 0o600); err != nil {
		t.Fatal(err)
	}
	// The region is the server's only one when not given.
	out := api.ok(t, "reviews", "create", "--diff", diff, "--repo", "acme/app", "--change", "42")
	if !strings.HasPrefix(out, "submitted review ") || !strings.Contains(out, "region eu") {
		t.Fatalf("create:\n%s", out)
	}
	id := strings.Fields(out)[2]
	out = api.ok(t, "reviews", "get", id, "--wait", "30s")
	if !strings.Contains(out, "validated") && !strings.Contains(out, "published") {
		t.Errorf("get --wait:\n%s", out)
	}
	out = api.ok(t, "reviews", "findings", id)
	wantColumns(t, out, 1, "PATH", "LINE", "SEVERITY", "CATEGORY", "MESSAGE")
	if !strings.Contains(out, "app.go") {
		t.Errorf("findings:\n%s", out)
	}
	out = api.ok(t, "reviews", "sarif", id)
	if !strings.Contains(out, `"2.1.0"`) {
		t.Errorf("sarif:\n%s", out)
	}
	var rv map[string]any
	api.okJSON(t, &rv, "reviews", "create", "--diff", diff, "--region", "eu", "--wait", "30s")
	if rv["result"] == nil {
		t.Errorf("create --wait -o json: no result: %v", rv)
	}
	// Both reviews are listed, newest first; a page of one points at the next.
	out = api.ok(t, "reviews", "ls")
	wantColumns(t, out, 2, "ID", "REGION", "STATE", "REASON", "REPO", "CHANGE", "DEPTH", "PROVIDER", "PARTS", "FINDINGS", "CREATED")
	// Both are published with their one part done and the finding counted.
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[1], rv["id"].(string)) ||
		!strings.HasPrefix(lines[2], id) || !strings.Contains(lines[2], "acme/app") || !slices.Equal(strings.Fields(lines[2])[8:10], []string{"1/1", "1"}) {
		t.Errorf("reviews ls:\n%s", out)
	}
	var page struct {
		Reviews    []map[string]any `json:"reviews"`
		NextCursor string           `json:"next_cursor"`
	}
	api.okJSON(t, &page, "reviews", "ls", "--limit", "1")
	if len(page.Reviews) != 1 || page.NextCursor != rv["id"] {
		t.Errorf("reviews ls --limit 1: %+v", page)
	}

	// serve's default: the offline rules provider in every region.
	out = api.ok(t, "reviews", "providers")
	wantColumns(t, out, 1, "REGION", "NAME", "KIND", "MODEL", "DEFAULT", "REQUESTS KEY", "RPM", "TOKENS KEY", "TPM")
	if !strings.Contains(out, "eu      rules  rules") || !strings.Contains(out, "rules:local") {
		t.Errorf("reviews providers:\n%s", out)
	}
	api.fails(t, 1, []string{"unknown region \"us\""}, "reviews", "providers", "--region", "us")

	api.fails(t, 2, []string{"--diff FILE or - is required"}, "reviews", "create")
	api.fails(t, 1, []string{"depth"}, "reviews", "create", "--diff", diff, "--depth", "deep")
	api.fails(t, 1, []string{"Not Found"}, "reviews", "get", "nope")
	api.fails(t, 1, []string{"Not Found"}, "reviews", "findings", "nope")
	api.fails(t, 1, []string{"Not Found"}, "reviews", "sarif", "nope")
}

func TestLiveLimitsDLQKeysWatch(t *testing.T) {
	t.Parallel()
	api := newLiveAPI(t)

	// limits get.
	api.ok(t, "limits", "set", "smtp:default", "--rate", "5", "--burst", "5", "--region", "eu")
	out := api.ok(t, "limits", "get", "smtp:default", "--region", "eu")
	if !strings.Contains(out, "name:") || !strings.Contains(out, "smtp:default") || !strings.Contains(out, "waiting cost:") {
		t.Errorf("limits get:\n%s", out)
	}
	api.fails(t, 2, []string{"needs KEY"}, "limits", "get")

	// --watch, bounded by --count.
	out = api.ok(t, "limits", "ls", "--watch", "100ms", "--count", "2")
	if n := strings.Count(out, "Every 100ms: ratelane limits ls"); n != 2 || strings.Count(out, "smtp:default") != 2 {
		t.Errorf("limits ls --watch: %d redraws:\n%s", n, out)
	}
	api.fails(t, 2, []string{"--count needs --watch"}, "limits", "ls", "--count", "2")
	api.fails(t, 2, []string{"at least 100ms"}, "jobs", "ls", "--watch", "1ms")

	// A dead letter: a job cancelled before anything handles its kind.
	var j jobView
	api.okJSON(t, &j, "enqueue", "--kind", "nobody.handles", "--key", "smtp:default", "--payload", `{"to":"ada"}`)
	out = api.ok(t, "jobs", "ls", "--watch", "100ms", "--count", "2")
	if strings.Count(out, j.ID) != 2 {
		t.Errorf("jobs ls --watch:\n%s", out)
	}
	api.fails(t, 1, []string{"is not a dead letter (state waiting)"}, "dlq", "get", j.ID)
	api.ok(t, "jobs", "cancel", j.ID)
	out = api.ok(t, "dlq", "get", j.ID)
	if !strings.Contains(out, "cancelled") {
		t.Errorf("dlq get:\n%s", out)
	}
	api.fails(t, 1, []string{"Not Found"}, "dlq", "get", "nope")
	if out := api.ok(t, "dlq", "purge"); out != "would purge 1 dead letters; run again with --yes to delete them\n" {
		t.Errorf("purge without --yes: %q", out)
	}
	api.fails(t, 1, []string{"reason"}, "dlq", "purge", "--yes", "--reason", "bogus")
	if out := api.ok(t, "dlq", "purge", "--yes"); out != "purged 1 dead letters\n" {
		t.Errorf("purge: %q", out)
	}
	api.fails(t, 1, []string{"Not Found"}, "dlq", "get", j.ID)

	// keys: the secret once, at create, never in ls.
	out = api.ok(t, "keys", "create", "--tenant", "acme", "--role", "producer", "--name", "billing")
	secret := secretLine(t, out, "rl_")
	out = api.ok(t, "keys", "ls")
	if !strings.Contains(out, "billing") || strings.Contains(out, secret) {
		t.Errorf("keys ls:\n%s", out)
	}
	// The new key works, and may not read limits (admin only): exit 1.
	if code, _, errOut := api.cliKey(t, secret, "limits", "ls"); code != 1 || !strings.Contains(errOut, "error: ") {
		t.Errorf("producer limits ls: exit %d: %s", code, errOut)
	}
	id := strings.Fields(out)[0]
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "billing") {
			id = strings.Fields(l)[0]
		}
	}
	if out := api.ok(t, "keys", "revoke", id); out != "revoked "+id+"\n" {
		t.Errorf("revoke: %q", out)
	}
	api.fails(t, 2, []string{"--role must be producer, worker or admin"}, "keys", "create", "--tenant", "acme", "--role", "boss")
	api.fails(t, 1, []string{"Not Found"}, "keys", "revoke", "nope")
}

// TestCompletion checks that every shell's script is generated from the
// command table (every command and verb is in it), and that the bash one
// parses.
func TestCompletion(t *testing.T) {
	t.Parallel()
	scripts := map[string]string{}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out := runCLI("completion", sh)
		if code != 0 {
			t.Fatalf("completion %s: exit %d:\n%s", sh, code, out)
		}
		scripts[sh] = out
	}
	for name := range commands {
		for sh, s := range scripts {
			if !strings.Contains(s, name) {
				t.Errorf("the %s script lacks command %s", sh, name)
			}
		}
	}
	for _, want := range []string{"'ls get update", "rotate", "redeliver response", "--watch", "--subscriber", " -o "} {
		if !strings.Contains(scripts["bash"], want) && !strings.Contains(scripts["bash"], strings.TrimPrefix(want, "'")) {
			t.Errorf("the bash script lacks %q", want)
		}
	}
	if !strings.Contains(scripts["fish"], "__fish_seen_subcommand_from subscribers; and __fish_seen_subcommand_from rotate' -l window") {
		t.Errorf("the fish script lacks subscribers rotate --window:\n%s", scripts["fish"])
	}
	for sh, s := range scripts {
		path, err := exec.LookPath(sh)
		if err != nil {
			if sh == "bash" {
				t.Fatalf("bash is needed to check the bash script: %v", err)
			}
			continue // zsh and fish are checked where installed
		}
		f := filepath.Join(t.TempDir(), "ratelane."+sh)
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(path, "-n", f).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", sh, err, out)
		}
	}
	if code, out := runCLI("completion", "powershell"); code != 2 || !strings.Contains(out, `unknown shell "powershell"`) {
		t.Errorf("completion powershell: exit %d:\n%s", code, out)
	}
}

// TestYAMLOutput checks -o yaml against the real API, and that the
// re-encoding keeps the server's field order, big numbers' digits and
// strings that would read as other YAML types.
func TestYAMLOutput(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := printYAML(&b, []byte(`{"b":1,"a":"x: y","n":12345678901234567890,"l":[1,{"k":"true"}]}`)); err != nil {
		t.Fatal(err)
	}
	const want = "b: 1\na: 'x: y'\nn: 12345678901234567890\nl:\n  - 1\n  - k: \"true\"\n"
	if b.String() != want {
		t.Errorf("yaml:\n%s\nwant:\n%s", b.String(), want)
	}
	api := newLiveAPI(t)
	api.ok(t, "limits", "set", "smtp:default", "--rate", "5", "--region", "eu")
	out := api.ok(t, "limits", "get", "smtp:default", "--region", "eu", "-o", "yaml")
	if !strings.Contains(out, "region: eu\n") || !strings.Contains(out, "name: smtp:default\n") {
		t.Errorf("limits get -o yaml:\n%s", out)
	}
	out = api.ok(t, "limits", "ls", "-o", "yaml")
	if !strings.Contains(out, "\nlimits:\n  - region: eu\n") {
		t.Errorf("limits ls -o yaml:\n%s", out)
	}
	api.fails(t, 2, []string{`want table, json or yaml, not "xml"`}, "limits", "ls", "-o", "xml")
}

// TestCLIReferenceComplete keeps docs/cli.md true: every command, and every
// verb of a command with verbs, is named in it.
func TestCLIReferenceComplete(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range completionTable(context.Background()) {
		if !strings.Contains(string(doc), "`"+c.name) {
			t.Errorf("docs/cli.md does not list command %s", c.name)
		}
		for _, v := range c.verbs {
			if c.name != "completion" && !strings.Contains(string(doc), "`"+c.name+" "+v.name) {
				t.Errorf("docs/cli.md does not list %s %s", c.name, v.name)
			}
		}
	}
}

// cliFor maps every capability of the discovery document to the CLI verb
// that uses it; notCLI lists the ones a person does not call from the CLI,
// and why. TestEveryCapabilityHasAVerb fails when the API grows a
// capability neither names, so the CLI keeps up with the API.
var (
	cliFor = map[string]string{
		"createJob": "enqueue", "listJobs": "jobs ls", "getJob": "jobs get", "cancelJob": "jobs cancel",
		"putLimit": "limits set", "listLimits": "limits ls", "getLimit": "limits get", "getStats": "stats",
		"listDeadLetters": "dlq ls", "redriveDeadLetter": "dlq redrive", "deleteDeadLetter": "dlq rm",
		"createKey": "keys create", "listKeys": "keys ls", "revokeKey": "keys revoke",
		"putSubscriber": "subscribers create", "listSubscribers": "subscribers ls", "getSubscriber": "subscribers get",
		"rotateSubscriberSecret": "subscribers rotate", "listSubscriberDeliveries": "subscribers deliveries",
		"deleteSubscriber": "subscribers rm", "createEvent": "events publish", "listEventDeliveries": "events deliveries",
		"redeliverDelivery": "deliveries redeliver", "getDeliveryResponse": "deliveries response",
		"createReview": "reviews create", "listReviews": "reviews ls", "getReview": "reviews get", "getReviewSARIF": "reviews sarif",
		"listReviewProviders": "reviews providers",
		"createBatch":         "batches create", "listBatches": "batches ls", "getBatch": "batches get", "cancelBatch": "batches cancel",
		"createSchedule": "schedules create", "listSchedules": "schedules ls", "getSchedule": "schedules get",
		"putSchedule": "schedules update", "pauseSchedule": "schedules pause", "resumeSchedule": "schedules resume",
		"deleteSchedule": "schedules rm",
	}
	notCLI = map[string]string{
		"getDiscovery": "the API's own index", "getOpenAPI": "the API's own schema",
		"getHealth": "probes", "getReady": "probes", "getMetrics": "Prometheus scrapes it",
		"createLease":  "the worker protocol: programs lease jobs, people do not",
		"heartbeatJob": "the worker protocol", "completeJob": "the worker protocol",
		"failJob": "the worker protocol", "rateLimitedJob": "the worker protocol",
		"completeLeases": "the worker protocol (many successes in one request)",
		"createJobs":     "enqueue --file sends it (1,000 jobs a request); the check maps a capability to a command, not to a flag",
	}
)

func TestEveryCapabilityHasAVerb(t *testing.T) {
	t.Parallel()
	api := newLiveAPI(t)
	resp, err := http.Get(api.url + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Capabilities []struct {
			Name, Method, Path string
		} `json:"capabilities"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	verbs := map[string]bool{}
	for _, c := range completionTable(context.Background()) {
		verbs[c.name] = true
		for _, v := range c.verbs {
			verbs[c.name+" "+v.name] = true
		}
	}
	for _, c := range d.Capabilities {
		verb, ok := cliFor[c.Name]
		if _, skip := notCLI[c.Name]; skip {
			continue
		}
		if !ok {
			t.Errorf("capability %s (%s %s) has no CLI verb: add one and name it in cliFor", c.Name, c.Method, c.Path)
			continue
		}
		if !verbs[verb] {
			t.Errorf("capability %s maps to %q, which is not a command", c.Name, verb)
		}
	}
	if len(d.Capabilities) < len(cliFor) {
		t.Errorf("only %d capabilities served; the live server lacks webhooks, keys or reviews", len(d.Capabilities))
	}

	// stats, the one verb no other test runs.
	out := api.ok(t, "stats")
	if !strings.HasPrefix(out, "REGION  LANE         DEPTH  OLDEST READY  BUDGET  IN FLIGHT\neu      interactive") || !strings.Contains(out, "\nthis node: ") {
		t.Errorf("stats:\n%s", out)
	}
	api.fails(t, 1, []string{"region"}, "stats", "--region", "mars")
}
