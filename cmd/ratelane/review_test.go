package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/pipeline"
)

// gitDiff builds a small repository in a temp dir, commits a clean file,
// changes it the way a careless patch would and returns `git diff`.
func gitDiff(t *testing.T) []byte {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	git := func(args ...string) []byte {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return out
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("main.go", "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n")
	write("old.txt", "gone\n")
	git("add", ".")
	git("commit", "-qm", "init")
	write("main.go", "package main\n\nimport (\n\t\"crypto/tls\"\n\t\"fmt\"\n)\n\n"+
		"// TODO: remove before release\nconst key = \"AKIAIOSFODNN7EXAMPLE\"\n\n"+
		"func main() {\n\tfmt.Println(\"hi\")\n\tcfg := &tls.Config{InsecureSkipVerify: true}\n\t_ = cfg\n"+
		"\tq := \"SELECT * FROM users WHERE name = '\" + name + \"'\"\n\t_ = q\n}\n")
	os.Remove(filepath.Join(dir, "old.txt"))
	return git("diff")
}

func TestReviewInlineFindingsOnAddedLines(t *testing.T) {
	t.Parallel()
	text := gitDiff(t)
	path := filepath.Join(t.TempDir(), "change.diff")
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"review", "--diff", path, "--format", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var res pipeline.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not a result: %v\n%s", err, out.String())
	}
	d, err := diff.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) < 3 {
		t.Fatalf("want findings for the key, TLS and SQL lines, got %d", len(res.Findings))
	}
	for _, f := range res.Findings {
		if kind, _ := d.Lookup(f.Path, f.Line); kind != diff.Added {
			t.Errorf("finding %s:%d (%s) is on a %v line, want an added one", f.Path, f.Line, f.Category, kind)
		}
	}
	if len(res.Quarantined) != 0 || res.Partial {
		t.Errorf("quarantined %d, partial %v; the rules reviewer anchors on real lines", len(res.Quarantined), res.Partial)
	}
}

func TestReviewInlineStdinFormats(t *testing.T) {
	text := gitDiff(t) // not parallel: it sets stdinReader
	for _, format := range []string{"table", "rdjsonl", "sarif"} {
		stdinReader = bytes.NewReader(text)
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"review", "--format", format, "-"}, &out, &errOut); code != 0 {
			t.Fatalf("%s: exit %d: %s", format, code, errOut.String())
		}
		if !strings.Contains(out.String(), "main.go") {
			t.Errorf("%s output names no file:\n%s", format, out.String())
		}
	}
	stdinReader = os.Stdin
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"review", "--format", "xml", "--diff", "/dev/null"}, &out, &errOut); code == 0 {
		t.Error("an empty diff and an unknown format should fail")
	}
}

// TestReviewAllPartsFailedExitsNonZero: a review whose provider cannot be
// reached prints what it has (nothing) and exits 1, saying why, so that a CI
// gate does not pass an unreviewed diff. --json is --format json.
func TestReviewAllPartsFailedExitsNonZero(t *testing.T) {
	t.Parallel()
	closed := freeAddr(t) // nothing listens there
	path := filepath.Join(t.TempDir(), "d.diff")
	if err := os.WriteFile(path, []byte("diff --git a/a.go b/a.go\n--- a/a.go\n+++ b/a.go\n@@ -1,1 +1,2 @@\n package a\n+// TODO x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"review", "--provider", "openai-compatible", "--model", "m",
		"--base-url", "http://" + closed + "/v1", "--diff", path, "--json"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "all 1 parts failed") {
		t.Fatalf("exit %d, want 1 and the reason; stderr:\n%s", code, errOut.String())
	}
	var res pipeline.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Parts.Failed != 1 {
		t.Fatalf("--json output %q: %v, parts %+v", out.String(), err, res.Parts)
	}
}
