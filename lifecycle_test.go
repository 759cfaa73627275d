package ratelane_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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

// An insert answered from an idempotency key increments
// ratelane_idempotent_replays_total (registered before, never written).
func TestIdempotentReplayCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	c, err := ratelane.NewClient(ctx, ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Logger: quiet(), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := ratelane.InsertParams{Kind: "deliver", Region: "us", LimitKeys: []string{"k"}, IdempotencyKey: "once"}
	if _, err := c.InsertMany(ctx, []ratelane.InsertParams{p, p}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Insert(ctx, p); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "ratelane_idempotent_replays_total" {
			got = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got != 2 {
		t.Fatalf("ratelane_idempotent_replays_total = %v, want 2 (the second job of the batch and the later insert)", got)
	}
}
