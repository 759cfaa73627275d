package review_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/review"
)

func newClient(t *testing.T, rc review.RegionConfig, limits ...ratelane.Limit) (*ratelane.Client, *review.Plugin, error) {
	t.Helper()
	return newClientIn(t, t.TempDir(), rc, limits...)
}

// newClientIn opens a client on the data directory dir (a restart when
// another client used it before).
func newClientIn(t *testing.T, dir string, rc review.RegionConfig, limits ...ratelane.Limit) (*ratelane.Client, *review.Plugin, error) {
	t.Helper()
	p := review.New(review.Config{Regions: map[string]review.RegionConfig{"eu": rc}})
	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "eu", Synchronous: "NORMAL"}},
		Plugins: []ratelane.Plugin{p}, Limits: limits}
	c, err := ratelane.NewClient(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, p, err
}

func provider(t *testing.T, prof review.Profile) review.Provider {
	t.Helper()
	p, err := review.NewProvider(prof)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDeclaredLimits: a provider's declared RPM and TPM configure its keys
// in its region when the client opens (a window of the allowance per
// minute, paced below it; the tokens key's burst admits the largest part),
// and the listing shows them without a key.
func TestDeclaredLimits(t *testing.T) {
	t.Parallel()
	oa := provider(t, review.Profile{Name: "eu-openai", Kind: "openai", Region: "eu", Model: "gpt-4o-mini", APIKey: "sk-secret-x",
		RequestsPerMinute: 500})
	cl := provider(t, review.Profile{Name: "eu-claude", Kind: "anthropic", Region: "eu", Model: "claude-sonnet-4-5", APIKey: "sk-secret-y",
		TokensPerMinute: 40000, RequestsPerMinute: 50})
	c, p, err := newClient(t, review.RegionConfig{Providers: []review.Provider{oa, cl}})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := c.Limits(context.Background(), "eu")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ratelane.LimitState{}
	for _, l := range ls {
		got[l.Name] = l
	}
	rq, tk, crq := got["openai:gpt-4o-mini"], got["anthropic:claude-sonnet-4-5:tokens"], got["anthropic:claude-sonnet-4-5"]
	if !rq.PerStart || !crq.PerStart || tk.PerStart || len(crq.Windows) != 1 || crq.Windows[0].Limit != 50 {
		t.Errorf("per start: openai requests %v, anthropic requests %+v, anthropic tokens %v; want the requests keys per start",
			rq.PerStart, crq.Config, tk.PerStart)
	}
	if len(rq.Windows) != 1 || rq.Windows[0].Limit != 500 || rq.Windows[0].Period < time.Minute || rq.Rate >= 500.0/60 {
		t.Errorf("requests key = %+v, want a window of 500 per minute and a bucket below 500/60 per second", rq.Config)
	}
	largest := float64(8000 + 400 + 2048)
	if len(tk.Windows) != 1 || tk.Windows[0].Limit != 40000 || tk.Burst != largest {
		t.Errorf("tokens key = %+v, want a window of 40000 per minute and a burst of the largest part, %v", tk.Config, largest)
	}
	infos, err := p.Providers("eu")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || !infos[0].Default || infos[1].Default || infos[0].RPM != 500 || infos[1].TokensKey != "anthropic:claude-sonnet-4-5:tokens" {
		t.Errorf("providers = %+v", infos)
	}
	if _, err := p.Providers("us"); err == nil {
		t.Error("Providers of a region without reviews succeeded")
	}
}

// TestDeclaredLimitsRefused: a TPM below the largest part's estimated
// cost, two providers declaring one key, and a provider declaring a key
// the client's Limits also configure are refused when the client opens,
// naming the provider; so is a provider of another region.
func TestDeclaredLimitsRefused(t *testing.T) {
	t.Parallel()
	small := provider(t, review.Profile{Name: "tiny", Kind: "anthropic", Region: "eu", Model: "m", APIKey: "k", TokensPerMinute: 5000})
	a := provider(t, review.Profile{Name: "a", Kind: "openai", Region: "eu", Model: "m", APIKey: "k", RequestsPerMinute: 60})
	b := provider(t, review.Profile{Name: "b", Kind: "openai", Region: "eu", Model: "m", APIKey: "k", RequestsPerMinute: 120})
	us := provider(t, review.Profile{Name: "us-openai", Kind: "openai", Region: "us", Model: "m", APIKey: "k"})
	for _, tc := range []struct {
		name   string
		rc     review.RegionConfig
		limits []ratelane.Limit
		want   string
	}{
		{"tpm below a part", review.RegionConfig{Providers: []review.Provider{small}}, nil, `provider "tiny" in region "eu": tpm 5000 is below the largest part's estimated cost, 10448 tokens`},
		{"tpm below a smaller part still", review.RegionConfig{Providers: []review.Provider{small}, MaxPartTokens: 4000}, nil, "6448 tokens"},
		{"one key twice", review.RegionConfig{Providers: []review.Provider{a, b}}, nil, `limit key "openai:m" is also configured by provider "a"`},
		{"key in Limits", review.RegionConfig{Providers: []review.Provider{a}}, []ratelane.Limit{{Name: "openai:m", Rate: 1}},
			`limit key "openai:m" is also configured by the client's Limits`},
		{"another region", review.RegionConfig{Providers: []review.Provider{us}}, nil, `provider "us-openai" of region "us"`},
	} {
		_, _, err := newClient(t, tc.rc, tc.limits...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewClient error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestDeclaredLimitsKeepOperatorChange: an operator's change to a
// provider's declared key (PUT /v1/limits, here Client.SetLimit) lasts
// across a restart with the same declaration; a restart whose rpm changed
// applies the new declaration. Every start used to set the key back to
// the declaration.
func TestDeclaredLimitsKeepOperatorChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	withRPM := func(rpm float64) review.RegionConfig {
		return review.RegionConfig{Providers: []review.Provider{provider(t, review.Profile{Name: "eu-openai", Kind: "openai",
			Region: "eu", Model: "gpt-4o-mini", APIKey: "sk-secret-x", RequestsPerMinute: rpm})}}
	}
	key := func(c *ratelane.Client) ratelane.LimitState {
		t.Helper()
		ls, err := c.Limits(ctx, "eu")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Name == "openai:gpt-4o-mini" {
				return l
			}
		}
		t.Fatal("no key openai:gpt-4o-mini")
		return ratelane.LimitState{}
	}
	restart := func(prev *ratelane.Client, rpm float64) *ratelane.Client {
		t.Helper()
		if err := prev.Close(); err != nil {
			t.Fatal(err)
		}
		c, _, err := newClientIn(t, dir, withRPM(rpm))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c, _, err := newClientIn(t, dir, withRPM(500))
	if err != nil {
		t.Fatal(err)
	}
	operator := ratelane.Limit{Name: "openai:gpt-4o-mini", Rate: 1, Burst: 1, PerStart: true}
	if _, err := c.SetLimit(ctx, "eu", operator); err != nil {
		t.Fatal(err)
	}
	c = restart(c, 500)
	if got := key(c); got.Rate != 1 || len(got.Windows) != 0 {
		t.Fatalf("after a restart with the same rpm the key is %+v, want the operator's rate 1 and no window", got.Config)
	}
	c = restart(c, 600)
	if got := key(c); len(got.Windows) != 1 || got.Windows[0].Limit != 600 {
		t.Fatalf("after a restart with rpm 600 the key is %+v, want the new declaration's window of 600", got.Config)
	}
}
