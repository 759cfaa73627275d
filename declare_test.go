package ratelane_test

import (
	"context"
	"testing"

	"github.com/ratelane/ratelane"
)

// TestConfigLimitsKeepOperatorChange: Config.Limits are declarations. An
// operator's change to a declared key (SetLimit, PUT /v1/limits) lasts
// across a restart with the same declaration, and a restart with a
// changed declaration applies it. Every start used to set the key back.
func TestConfigLimitsKeepOperatorChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	var c *ratelane.Client
	start := func(declared ratelane.Limit) {
		t.Helper()
		if c != nil {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		c, err = ratelane.NewClient(ctx, ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "eu", Synchronous: "NORMAL"}},
			Limits: []ratelane.Limit{declared}})
		if err != nil {
			t.Fatal(err)
		}
	}
	rate := func() float64 {
		t.Helper()
		ls, err := c.Limits(ctx, "eu")
		if err != nil || len(ls) != 1 {
			t.Fatalf("limits %+v, %v; want the one key", ls, err)
		}
		return ls[0].Rate
	}
	declared := ratelane.Limit{Name: "partner", Rate: 5, Burst: 5}
	start(declared)
	t.Cleanup(func() { c.Close() })
	if _, err := c.SetLimit(ctx, "eu", ratelane.Limit{Name: "partner", Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	start(declared)
	if got := rate(); got != 1 {
		t.Fatalf("after a restart with the same declaration the key's rate is %v, want the operator's 1", got)
	}
	declared.Rate = 8
	start(declared)
	if got := rate(); got != 8 {
		t.Fatalf("after a restart with a changed declaration the key's rate is %v, want 8", got)
	}
}
