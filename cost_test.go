package ratelane_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/job"
)

// costClient makes a client on cfg with the two keys the cost tests
// insert on: tpm, a bucket of burst 5000, and partner, a window of 20 a
// second. It is never started (the tests only insert); t.Cleanup closes it.
func costClient(t *testing.T, cfg ratelane.Config) *ratelane.Client {
	t.Helper()
	cfg.Limits = []ratelane.Limit{
		{Name: "tpm", Rate: 1000, Burst: 5000},
		{Name: "partner", Windows: []ratelane.Window{{Limit: 20, Period: time.Second}}},
	}
	c, err := ratelane.NewClient(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // never started: Close, not Stop
	return c
}

// TestInsertRefusesUnadmittableCost checks issue 10's cost bound on the
// library path: a cost above a key's burst or window limit is refused by
// Client.Insert with a validation error naming the field, before anything
// is written; a cost the key can admit is accepted.
func TestInsertRefusesUnadmittableCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := costClient(t, ratelane.Config{DataDir: t.TempDir(), Logger: quiet()})
	for _, tc := range []struct {
		key  string
		cost int64
	}{{"tpm", 5001}, {"tpm", 1e12}, {"tpm", 9_300_000_000}, {"partner", 21}} {
		_, err := c.Insert(ctx, ratelane.InsertParams{Kind: "llm", Region: "us", LimitKeys: []string{tc.key}, Cost: tc.cost})
		var ve *job.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "cost" || !strings.Contains(err.Error(), tc.key) {
			t.Fatalf("cost %d on %s: err %v, want a validation error naming cost and the key", tc.cost, tc.key, err)
		}
	}
	for _, key := range []string{"tpm", "partner"} {
		if _, err := c.Insert(ctx, ratelane.InsertParams{Kind: "llm", Region: "us", LimitKeys: []string{key}, Cost: 20}); err != nil {
			t.Fatalf("cost 20 on %s: %v", key, err)
		}
	}
}
