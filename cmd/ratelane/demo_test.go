package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestDemoJSONProgressOnStderr runs a small demo with --json: stdout holds
// exactly one JSON object with the closing figures, and the live progress
// still reaches the person watching, on stderr.
func TestDemoJSONProgressOnStderr(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real demo (a few seconds); skipped under -short")
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "--events", "4", "--subscribers", "2", "--json"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("demo --json: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	var res map[string]any
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v", err)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value")
	}
	if len(res) == 0 {
		t.Fatalf("empty closing figures")
	}
	if strings.TrimSpace(stderr.String()) == "" {
		t.Fatalf("no progress on stderr under --json")
	}
}
