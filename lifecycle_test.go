package ratelane_test

import (
	"context"
	"testing"

	"github.com/ratelane/ratelane"
)

// Client.Stop tolerates a client that was never started and a second
// call: before, Stop before Start panicked inside the engine.
func TestClientStopBeforeStartAndTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Logger: quiet()}
	cfg.Handle("noop", ratelane.WorkFunc(func(context.Context, *ratelane.Job, struct{}) (any, error) { return nil, nil }))
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}
