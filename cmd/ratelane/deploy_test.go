package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
)

// TestExampleConfigLoads loads deploy/ratelane.example.json through the
// config loader serve uses and opens a client with it (paths moved to a
// temporary directory), so the example cannot drift from what the binary
// accepts: an unknown or misspelt field fails here as it would at start-up.
func TestExampleConfigLoads(t *testing.T) {
	f, err := parseServerFlags("serve", []string{"--config", "../../deploy/ratelane.example.json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.clientConfig(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if f.addr != "0.0.0.0:8080" || cfg.DataDir != "/var/lib/ratelane" || cfg.Workers != 16 || len(cfg.Regions) != 2 ||
		len(cfg.Limits) != 2 || cfg.InteractiveBudget != 30*time.Second || cfg.BatchBudget != 24*time.Hour {
		t.Fatalf("example config read as addr %s, %+v", f.addr, cfg)
	}
	dir := t.TempDir()
	cfg.DataDir = dir
	for i := range cfg.Regions {
		cfg.Regions[i].SQLitePath = filepath.Join(dir, cfg.Regions[i].Name+".db")
	}
	c, err := ratelane.NewClient(context.Background(), cfg)
	if err != nil {
		t.Fatalf("the example config does not open: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
