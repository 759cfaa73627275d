package ratelane_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelane/ratelane"
)

type usProvider struct{}

func (usProvider) Region() string { return "us" }
func (usProvider) Work(context.Context, *ratelane.Job) (any, error) {
	return nil, nil
}

// TestCrossRegionWiringFailsAtStart is invariant 8's start-up half: a
// region-bound resource wired to another region, or a store file of another
// region, stops NewClient with a message naming both regions.
func TestCrossRegionWiringFailsAtStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()

	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "eu"}}}
	cfg.HandleIn("eu", "review", usProvider{}, nil)
	if _, err := ratelane.NewClient(ctx, cfg); err == nil || !strings.Contains(err.Error(), `"eu"`) || !strings.Contains(err.Error(), `"us"`) {
		t.Fatalf("US provider wired to the EU lane: err = %v, want one naming both regions", err)
	}

	eu := filepath.Join(dir, "eu-store.db")
	c, err := ratelane.NewClient(ctx, ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "eu", SQLitePath: eu}}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = ratelane.NewClient(ctx, ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us", SQLitePath: eu}}})
	if err == nil || !strings.Contains(err.Error(), `"eu"`) || !strings.Contains(err.Error(), `"us"`) {
		t.Fatalf("US region opened on the EU store: err = %v, want one naming both regions", err)
	}

	ok := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}}
	ok.HandleIn("us", "review", usProvider{}, nil)
	c, err = ratelane.NewClient(ctx, ok)
	if err != nil {
		t.Fatalf("correct wiring refused: %v", err)
	}
	c.Close()
}
