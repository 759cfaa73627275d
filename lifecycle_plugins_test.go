package ratelane_test

import (
	"context"
	"testing"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/review"
	"github.com/ratelane/ratelane/webhooks"
)

// Stop tolerates stop-before-start and a second stop with both plug-ins
// bound, and an API's Close a second call: the plug-ins' kinds, sweeps
// and routes add nothing that must be started first.
func TestClientWithPluginsStopBeforeStartAndTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, start := range []bool{false, true} {
		cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Logger: quiet()}
		rules, err := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: "us"})
		if err != nil {
			t.Fatal(err)
		}
		withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{rules}})
		cfg.Plugins = append(cfg.Plugins, webhooks.New(webhooks.Config{Deliver: true}))
		c, err := ratelane.NewClient(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		api, err := c.NewAPI(ctx, ratelane.APIConfig{AdminKey: "rl_admin000_0123456789abcdef0123456789abcdef0123456789abcdef"})
		if err != nil {
			t.Fatal(err)
		}
		if start {
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 {
			if err := api.Close(); err != nil {
				t.Fatalf("started %v: API close %d: %v", start, i+1, err)
			}
			if err := c.Stop(ctx); err != nil {
				t.Fatalf("started %v: stop %d: %v", start, i+1, err)
			}
		}
	}
}
