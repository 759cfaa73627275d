package ratelane_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// TestInsertPartsChecks: InsertParts refuses parts outside the parent's
// region or tenant and a scheduled parent, writing nothing; a replay with
// the parent's idempotency key returns the first parent and parts; a
// parent with no parts is aggregated at once; a built-in kind is refused
// as a parent as it is by Insert.
func TestInsertPartsChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := ratelane.Config{DataDir: t.TempDir(), Logger: quiet()} // regions us and eu
	aggregated := make(chan int, 4)
	cfg.HandleParts("tally", ratelane.Parts{Aggregator: ratelane.AggregateFunc(func(_ context.Context, _ *ratelane.Job, parts []*ratelane.Job) ratelane.Outcome {
		aggregated <- len(parts)
		return ratelane.Outcome{Class: ratelane.ClassSuccess, Result: []byte(`{"ok":true}`)}
	})})
	c := startClient(t, cfg)
	parent := ratelane.InsertParams{Kind: "tally", Region: "us", Tenant: "acme"}
	part := ratelane.InsertParams{Kind: "count", LimitKeys: []string{"counter"}}

	for name, bad := range map[string]struct {
		parent ratelane.InsertParams
		part   ratelane.InsertParams
	}{
		"part in another region": {parent, ratelane.InsertParams{Kind: "count", Region: "eu", LimitKeys: []string{"counter"}}},
		"part of another tenant": {parent, ratelane.InsertParams{Kind: "count", Tenant: "globex", LimitKeys: []string{"counter"}}},
		"scheduled parent":       {ratelane.InsertParams{Kind: "tally", Region: "us", Delay: time.Minute}, part},
		"part with no key":       {parent, ratelane.InsertParams{Kind: "count"}},
	} {
		if _, err := c.InsertParts(ctx, bad.parent, []ratelane.InsertParams{bad.part}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := c.InsertParts(ctx, ratelane.InsertParams{Kind: ratelane.WebhookKind, Region: "us"}, nil); !errors.As(err, new(*ratelane.ReservedKindError)) {
		t.Errorf("a built-in kind as a parent: %v, want a ReservedKindError", err)
	}
	if js, err := c.List(ctx, "us", ratelane.ListParams{}); err != nil || len(js) != 0 {
		t.Fatalf("refused inserts wrote %d jobs (%v)", len(js), err)
	}

	parent.IdempotencyKey = "tally-1"
	first, err := c.InsertParts(ctx, parent, []ratelane.InsertParams{part, part})
	if err != nil {
		t.Fatal(err)
	}
	if first.Parent.Job.State != ratelane.StateAccepted || first.Parent.Job.LimitKeys[0] != "parts:tally" {
		t.Fatalf("parent %s with keys %v, want accepted with the default key parts:tally", first.Parent.Job.State, first.Parent.Job.LimitKeys)
	}
	for _, p := range first.Parts {
		if p.Job.ParentID != first.Parent.Job.ID || p.Job.Tenant != "acme" || p.Job.Region != "us" {
			t.Fatalf("part %+v is not the parent's", p.Job)
		}
	}
	again, err := c.InsertParts(ctx, parent, []ratelane.InsertParams{part, part})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Parent.Existing || again.Parent.Job.ID != first.Parent.Job.ID {
		t.Fatalf("replay made parent %s (existing %v), want %s", again.Parent.Job.ID, again.Parent.Existing, first.Parent.Job.ID)
	}
	for i, p := range again.Parts {
		if !p.Existing || p.Job.ID != first.Parts[i].Job.ID {
			t.Fatalf("replay part %d is %s (existing %v), want %s", i, p.Job.ID, p.Existing, first.Parts[i].Job.ID)
		}
	}

	empty, err := c.InsertParts(ctx, ratelane.InsertParams{Kind: "tally", Region: "us"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := testkit.Recv(t, aggregated, time.Minute, "the empty parent's aggregation"); n != 0 {
		t.Fatalf("aggregated with %d parts, want 0", n)
	}
	testkit.Eventually(t, time.Minute, "the empty parent to publish", func() error {
		j, err := c.Job(ctx, "us", empty.Parent.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != ratelane.StatePublished {
			return errors.New("parent is " + string(j.State))
		}
		return nil
	})
}
