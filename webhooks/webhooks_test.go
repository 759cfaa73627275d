package webhooks_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/webhooks"
)

// newClient opens a client on a temporary SQLite store with plugins.
func newClient(t *testing.T, plugins ...ratelane.Plugin) *ratelane.Client {
	t.Helper()
	c, err := ratelane.NewClient(context.Background(), ratelane.Config{
		DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us", Synchronous: "NORMAL"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Plugins: plugins,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// probe is a plug-in that keeps its region, to reach the core's
// subscriber lookup the way the review plug-in does.
type probe struct{ r *ratelane.PluginRegion }

func (p *probe) Name() string { return "probe" }

func (p *probe) Bind(_ context.Context, r *ratelane.PluginRegion) error { p.r = r; return nil }

// TestPluginSubscriberLookup: the plug-in provides the region's subscriber
// lookup, which another plug-in bound before it reaches through the core
// without importing this package; without the plug-in the lookup knows
// no subscriber.
func TestPluginSubscriberLookup(t *testing.T) {
	ctx := context.Background()
	pr := &probe{}
	hooks := webhooks.New(webhooks.Config{})
	newClient(t, pr, hooks)
	if _, _, _, err := hooks.PutSubscriber(ctx, "us", webhooks.SubscriberSpec{ID: "s1", Tenant: "acme",
		URL: "https://hooks.example.com/h", Topics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	if tenant, err := pr.r.Subscribers().SubscriberTenant(ctx, "s1"); err != nil || tenant != "acme" {
		t.Fatalf("lookup of s1 = %q, %v; want acme", tenant, err)
	}
	if _, err := pr.r.Subscribers().SubscriberTenant(ctx, "nobody"); !errors.Is(err, ratelane.ErrNotFound) {
		t.Fatalf("lookup of an unknown subscriber: %v, want ErrNotFound", err)
	}
	if _, err := hooks.Subscriber(ctx, "eu", "s1"); err == nil || !strings.Contains(err.Error(), "not bound") {
		t.Fatalf("a region the plug-in is not bound to: %v", err)
	}

	alone := &probe{}
	newClient(t, alone)
	if _, err := alone.r.Subscribers().SubscriberTenant(ctx, "s1"); !errors.Is(err, ratelane.ErrNotFound) {
		t.Fatalf("lookup without the webhooks plug-in: %v, want ErrNotFound", err)
	}
}

// TestPluginKindAndRebind: Deliver registers the built-in kind, which the
// core then refuses to Insert; one Plugin serves one client.
func TestPluginKindAndRebind(t *testing.T) {
	hooks := webhooks.New(webhooks.Config{Deliver: true})
	c := newClient(t, hooks)
	_, err := c.Insert(context.Background(), ratelane.InsertParams{Kind: webhooks.Kind, Region: "us"})
	if !errors.As(err, new(*ratelane.ReservedKindError)) {
		t.Fatalf("Insert of the webhook kind: %v, want a ReservedKindError", err)
	}
	//lint:ignore SA1019 the deprecated constant must keep naming the plug-in's kind
	if ratelane.WebhookKind != webhooks.Kind {
		t.Fatalf("ratelane.WebhookKind != webhooks.Kind %q", webhooks.Kind)
	}
	_, err = ratelane.NewClient(context.Background(), ratelane.Config{DataDir: t.TempDir(),
		Regions: []ratelane.Region{{Name: "us"}}, Plugins: []ratelane.Plugin{hooks}})
	if err == nil || !strings.Contains(err.Error(), "already bound") {
		t.Fatalf("binding one plug-in to a second client: %v", err)
	}
}

// TestWebhookCommand signs a body with the plug-in's command and verifies
// it back; a changed body, a stale timestamp and a bad secret fail.
func TestWebhookCommand(t *testing.T) {
	var cmd ratelane.Command
	for _, c := range webhooks.New(webhooks.Config{}).Commands() {
		if c.Name == "webhook" {
			cmd = c
		}
	}
	if cmd.Run == nil {
		t.Fatal("no webhook command")
	}
	run := func(body string, args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := cmd.Run(context.Background(), args, strings.NewReader(body), &out, &errOut)
		return out.String(), err
	}
	secret, err := run("", "secret")
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret: %q, %v", secret, err)
	}
	secret = strings.TrimSpace(secret)
	out, err := run(`{"n":1}`, "sign", "--secret", secret, "--id", "msg_1")
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		headers[k] = v
	}
	verify := func(body, secret, ts string) error {
		_, err := run(body, "verify", "--secret", secret, "--id", headers["webhook-id"], "--timestamp", ts,
			"--signature", headers["webhook-signature"])
		return err
	}
	ts := headers["webhook-timestamp"]
	if err := verify(`{"n":1}`, secret, ts); err != nil {
		t.Fatalf("verify of the signed body: %v (sign printed %q)", err, out)
	}
	if err := verify(`{"n":2}`, secret, ts); err == nil {
		t.Fatal("a changed body verified")
	}
	unix, _ := strconv.ParseInt(ts, 10, 64)
	if err := verify(`{"n":1}`, secret, strconv.FormatInt(unix-3600, 10)); err == nil {
		t.Fatal("a timestamp an hour old verified")
	}
	if _, err := run(`{}`, "sign", "--secret", "whsec_short"); err == nil || strings.Contains(err.Error(), "whsec_short") {
		t.Fatalf("a bad secret: %v (must fail without quoting the secret)", err)
	}
	if _, err := run("", "frobnicate"); !errors.Is(err, ratelane.ErrUsage) {
		t.Fatalf("an unknown subcommand: %v, want ErrUsage", err)
	}
}
