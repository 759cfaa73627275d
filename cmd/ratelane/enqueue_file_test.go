package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLiveEnqueueFile enqueues an NDJSON file against the real API: good
// lines are enqueued in one batch, a refused line is reported by its line
// number and fails the command (exit 1), and a second run replays the
// lines with idempotency keys.
func TestLiveEnqueueFile(t *testing.T) {
	t.Parallel()
	a := newLiveAPI(t)
	file := filepath.Join(t.TempDir(), "jobs.ndjson")
	lines := `{"kind":"email.send","limit_keys":["smtp:default"],"payload":{"to":"ada@example.com"},"idempotency_key":"f-1"}

{"kind":"webhook","limit_keys":["smtp:default"]}
{"kind":"email.send","region":"eu","limit_keys":["smtp:default"],"idempotency_key":"f-2","priority":3}
`
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := a.cli(t, "enqueue", "--file", file)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (one line refused)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) != 3 || !strings.HasPrefix(got[0], file+":1\t") || !strings.HasSuffix(got[0], " waiting") ||
		!strings.HasPrefix(got[1], file+":3\trefused 422: jobs[1]: ") || !strings.HasPrefix(got[2], file+":4\t") {
		t.Fatalf("stdout:\n%s", out)
	}
	if !strings.Contains(errOut, "1 jobs of "+file+" were refused") {
		t.Errorf("stderr lacks the refusal count:\n%s", errOut)
	}
	id := strings.Fields(strings.TrimPrefix(got[0], file+":1\t"))[0]
	if show := a.ok(t, "jobs", "get", id); !strings.Contains(show, "email.send") {
		t.Errorf("jobs get %s:\n%s", id, show)
	}

	// Only the replayable lines again: both replayed, exit 0.
	if err := os.WriteFile(file, []byte(strings.Replace(lines, `{"kind":"webhook","limit_keys":["smtp:default"]}`, "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out = a.ok(t, "enqueue", "--file", file)
	if strings.Count(out, "(replayed") != 2 || !strings.Contains(out, id) {
		t.Errorf("second run:\n%s", out)
	}
	a.fails(t, 2, []string{"drop --kind"}, "enqueue", "--file", file, "--kind", "x")
	bad := filepath.Join(t.TempDir(), "bad.ndjson")
	if err := os.WriteFile(bad, []byte("{\"kind\":\"a\"}\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.fails(t, 2, []string{bad + ":2: not a JSON object"}, "enqueue", "--file", bad)
}
