package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/trace"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
)

// TestExecTraceBoundedAndAnnotated: the capture stops by itself at its
// bound (a sweep outlasting it does not grow the file without end), and
// holds the interactive spans and reviews logged while it ran, not the
// batch lane's.
func TestExecTraceBoundedAndAnnotated(t *testing.T) {
	if trace.IsEnabled() {
		t.Skip("a runtime/trace is already running (go test -trace)")
	}
	path := filepath.Join(t.TempDir(), "x.trace")
	x := &execTrace{path: path, bound: 200 * time.Millisecond}
	if err := x.start(); err != nil {
		t.Fatal(err)
	}
	defer x.finish()
	now := time.Now()
	x.span(engine.StageSpan{ID: "job-i", Parent: "rev-i", Lane: "interactive", Stage: engine.StageRun, Start: now, End: now})
	x.span(engine.StageSpan{ID: "job-b", Lane: "batch", Stage: engine.StageRun, Start: now, End: now})
	x.phase("sweep")
	x.review(context.Background(), "sweep", "rev-i", now, now, now)
	deadline := time.Now().Add(10 * time.Second)
	for trace.IsEnabled() {
		if time.Now().After(deadline) {
			t.Fatal("the capture still runs 10 s after its 200 ms bound")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := x.finish(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rl.sync", "rl.phase", "interactive run job-i rev-i", "sweep rev-i"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the trace lacks %q", want)
		}
	}
	if bytes.Contains(b, []byte("job-b")) {
		t.Error("the trace holds a batch-lane span")
	}
}
