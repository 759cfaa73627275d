package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/upstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const partDiff = "diff --git a/a.go b/a.go\n--- a/a.go\n+++ b/a.go\n@@ -1,1 +1,2 @@\n package a\n+var x = 1\n"

func part(t *testing.T) *diff.Diff {
	t.Helper()
	d, err := diff.Parse([]byte(partDiff))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newSim(t *testing.T, routes map[string]upstream.RouteConfig) *upstream.Server {
	t.Helper()
	s, err := upstream.New(upstream.Config{Routes: routes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func anthropicProvider(t *testing.T, s *upstream.Server, route string) Provider {
	t.Helper()
	p, err := New(Profile{Name: "a", Kind: KindAnthropic, Region: "eu", Model: "claude-sonnet-4-5", BaseURL: s.LLMBaseURL(route),
		APIKey: "k", TokensKey: "anthropic:tokens"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAnthropicShapes(t *testing.T) {
	t.Parallel()
	s := newSim(t, map[string]upstream.RouteConfig{"quota": {Quota: 1}})
	reset := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339)
	h := http.Header{"Content-Type": {"application/json"},
		"Anthropic-Ratelimit-Requests-Limit": {"50"}, "Anthropic-Ratelimit-Requests-Remaining": {"0"},
		"Anthropic-Ratelimit-Requests-Reset": {reset},
		"Anthropic-Ratelimit-Tokens-Limit":   {"40000"}, "Anthropic-Ratelimit-Tokens-Remaining": {"12000"},
		"Anthropic-Ratelimit-Tokens-Reset": {reset}}
	s.Script("anthropic",
		upstream.Response{Status: 429, Header: h, Body: []byte(`{"type":"error","error":{"type":"rate_limit_error","message":"rate limited"}}`)},
		upstream.Response{Status: 529, Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)},
	)
	p := anthropicProvider(t, s, "anthropic")
	ctx := context.Background()

	_, err := p.Review(ctx, Request{Part: part(t)})
	o := OutcomeOf(err)
	if o.Class != job.ClassRateLimited || o.RetryAfter < time.Second || o.RetryAfter > 4*time.Second {
		t.Fatalf("429 with RFC 3339 resets: %+v, want rate limited for about 3 s", o)
	}
	if len(o.Hints) != 2 || o.Hints[0].Key != "anthropic:claude-sonnet-4-5" || o.Hints[1].Key != "anthropic:tokens" || o.Hints[1].Remaining != 12000 {
		t.Errorf("hints = %+v, want request and token quotas on their keys", o.Hints)
	}
	if o = OutcomeOf(second(p.Review(ctx, Request{Part: part(t)}))); o.Class != job.ClassTransient || o.Status != 529 {
		t.Errorf("529: %+v, want transient", o)
	}
	// The simulator's default answer is a valid empty review.
	resp, err := p.Review(ctx, Request{Part: part(t), Depth: DepthFast})
	if err != nil || string(resp.Output) != `{"findings":[]}` || resp.Usage.InputTokens == 0 {
		t.Fatalf("success: %+v, %v", resp, err)
	}

	q := anthropicProvider(t, s, "quota")
	q.Review(ctx, Request{Part: part(t)})
	o = OutcomeOf(second(q.Review(ctx, Request{Part: part(t)})))
	if o.Class != job.ClassPermanent || o.Reason != job.ReasonProviderQuotaExhausted || o.PauseKeyFor != DefaultQuotaPause {
		t.Errorf("credit balance too low: %+v, want permanent provider_quota_exhausted with a 1h pause", o)
	}
}

func second(_ Response, err error) error { return err }

func TestOpenAIInsufficientQuotaNeverRetried(t *testing.T) {
	t.Parallel()
	s := newSim(t, map[string]upstream.RouteConfig{"openai": {Quota: 1}})
	p, err := New(Profile{Name: "o", Kind: KindOpenAI, Region: "us", Model: "gpt-4o-mini", BaseURL: s.LLMBaseURL("openai") + "/v1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Review(ctx, Request{Part: part(t)}); err != nil {
		t.Fatal(err)
	}
	o := OutcomeOf(second(p.Review(ctx, Request{Part: part(t)})))
	if o.Class != job.ClassPermanent || o.Reason != job.ReasonProviderQuotaExhausted || o.Status != 429 {
		t.Fatalf("insufficient_quota: %+v", o)
	}
	// The SDK made exactly one request per call: its retries are off.
	if got := s.Stats().Routes["openai"].Attempts; got != 2 {
		t.Errorf("simulator saw %d requests, want 2", got)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	p := Profile{Name: "p", Kind: KindOpenAI, Model: "m"}.WithDefaults()
	for _, tc := range []struct {
		name string
		e    APIError
		want job.Class
	}{
		{"429 retry-after", APIError{Status: 429, Header: http.Header{"Retry-After": {"2"}}}, job.ClassRateLimited},
		{"429 insufficient_quota", APIError{Status: 429, Code: "insufficient_quota"}, job.ClassPermanent},
		{"400 credit balance", APIError{Status: 400, Message: "Your credit balance is too low"}, job.ClassPermanent},
		{"503 with retry-after", APIError{Status: 503, Header: http.Header{"Retry-After": {"5"}}}, job.ClassRateLimited},
		{"503", APIError{Status: 503}, job.ClassTransient},
		{"529", APIError{Status: 529}, job.ClassTransient},
		{"500", APIError{Status: 500}, job.ClassTransient},
		{"400", APIError{Status: 400}, job.ClassPermanent},
		{"401", APIError{Status: 401}, job.ClassPermanent},
		{"403", APIError{Status: 403}, job.ClassPermanent},
	} {
		if got := Classify(p, tc.e, now); got.Class != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got.Class, tc.want)
		}
	}
	// A 503 whose HTTP-date Retry-After counts from the provider's own
	// Date, an hour ahead of ours: 4 s, not an hour and 4 s.
	ahead := now.Add(time.Hour).UTC()
	o := Classify(p, APIError{Status: 503, Header: http.Header{"Date": {ahead.Format(http.TimeFormat)},
		"Retry-After": {ahead.Add(4 * time.Second).Format(http.TimeFormat)}}}, now)
	if o.Class != job.ClassRateLimited || o.RetryAfter != 4*time.Second || o.RetrySource != "retry-after" {
		t.Errorf("503 HTTP-date Retry-After against Date: %+v", o)
	}
	o = Classify(p, APIError{Status: 429, Header: http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Remaining-Requests": {"0"}}}, now)
	if o.RetryAfter != time.Second || o.RetrySource == "" {
		t.Errorf("x-ratelimit-reset-requests: %+v", o)
	}
}

// TestProfileNeverPrintsKey: a profile printed or logged by mistake says
// whether a key is set, never the key.
func TestProfileNeverPrintsKey(t *testing.T) {
	t.Parallel()
	const key = "sk-canary-profile-key-77"
	p := Profile{Name: "a", Kind: KindOpenAI, Region: "eu", Model: "m", APIKey: key}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("wired", "profile", p)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprint(p), fmt.Sprintf("%+v", p), fmt.Sprintf("%#v", p), logged.String(), string(b)} {
		if strings.Contains(s, key) {
			t.Errorf("profile printed its key: %s", s)
		}
	}
	if !strings.Contains(fmt.Sprint(p), "api key set") || !strings.Contains(logged.String(), `"kind":"openai"`) {
		t.Errorf("profile prints as %q, logs as %s", fmt.Sprint(p), logged.String())
	}
}

// TestProfileValidateFields: limits, timeouts and base URLs are checked,
// naming the field and never quoting the URL.
func TestProfileValidateFields(t *testing.T) {
	t.Parallel()
	base := Profile{Name: "a", Kind: KindOpenAI, Region: "eu", Model: "m"}
	for _, tc := range []struct {
		mut  func(*Profile)
		want string
	}{
		{func(p *Profile) { p.BaseURL = "https://user:hunter2@api.example.com/v1" }, "base_url: must not carry credentials"},
		{func(p *Profile) { p.BaseURL = "api.example.com/v1" }, "base_url: must start with http:// or https://"},
		{func(p *Profile) { p.BaseURL = "https://api.example.com/v1?key=hunter2" }, "base_url: must have no query"},
		{func(p *Profile) { p.TokensPerMinute = -5 }, "tpm must be between"},
		{func(p *Profile) { p.TokensKey, p.RequestsKey = "k", "k" }, "tokens_key and requests_key must differ"},
		{func(p *Profile) { p.Timeout = -time.Second }, "timeout must be between"},
	} {
		p := base
		tc.mut(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Validate(%v) = %v, want %q without the URL's secret", p, err, tc.want)
		}
	}
	ok := base
	ok.BaseURL, ok.TokensPerMinute = "http://127.0.0.1:11434/v1", 50000
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%v) = %v", ok, err)
	}
	if d := ok.WithDefaults(); d.TokensKey != "openai:m:tokens" || len(d.LimitKeys()) != 1 || d.LimitKeys()[0] != "openai:m:tokens" {
		t.Errorf("defaults: tokens key %q, keys %v", d.TokensKey, d.LimitKeys())
	}
	// With RPM declared too, parts name both keys: tokens, then requests.
	ok.RequestsPerMinute = 100
	if keys := ok.WithDefaults().LimitKeys(); len(keys) != 2 || keys[0] != "openai:m:tokens" || keys[1] != "openai:m" {
		t.Errorf("rpm and tpm: keys %v", keys)
	}
}
