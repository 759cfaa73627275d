package chunk

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/review/diff"
)

// manyHunks returns a diff of one file with n small hunks.
func manyHunks(n int) string {
	var b strings.Builder
	b.WriteString("diff --git a/m.go b/m.go\n--- a/m.go\n+++ b/m.go\n")
	for i := range n {
		start := 1 + i*10
		fmt.Fprintf(&b, "@@ -%d,2 +%d,2 @@\n ctx %d\n-old %d\n+new %d\n", start, start, i, i, i)
	}
	return b.String()
}

func mustParse(t *testing.T, s string) *diff.Diff {
	t.Helper()
	d, err := diff.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSplitKeepsHunksWhole(t *testing.T) {
	t.Parallel()
	d := mustParse(t, manyHunks(40))
	parts, err := Split(d, Options{MaxTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 5 {
		t.Fatalf("got %d parts, want several", len(parts))
	}
	orig := map[string]bool{}
	for _, h := range d.Files[0].Hunks {
		orig[h.String()] = true
	}
	var total int
	for _, p := range parts {
		if p.Tokens > 64 {
			t.Errorf("part %d has %d tokens, budget 64", p.Index, p.Tokens)
		}
		pd := mustParse(t, p.Text)
		for _, h := range pd.Files[0].Hunks {
			if !orig[h.String()] {
				t.Errorf("part %d has a hunk that is not an original hunk:\n%s", p.Index, h.String())
			}
			total++
		}
	}
	if total != 40 {
		t.Errorf("parts hold %d hunks, want 40", total)
	}
}

func TestSplitOversizedHunk(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("diff --git a/big.txt b/big.txt\n--- a/big.txt\n+++ b/big.txt\n@@ -1,400 +1,400 @@ section\n")
	for i := range 400 {
		fmt.Fprintf(&b, "-old line number %d\n+new line number %d\n", i, i)
	}
	d := mustParse(t, b.String())
	parts, err := Split(d, Options{MaxTokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 10 {
		t.Fatalf("got %d parts, want the hunk split into many", len(parts))
	}
	next := 1
	for _, p := range parts {
		if p.Tokens > 200 {
			t.Errorf("part %d has %d tokens, budget 200", p.Index, p.Tokens)
		}
		if !strings.HasPrefix(p.Text, "diff --git a/big.txt b/big.txt\n") || !strings.Contains(p.Text, "@@ section\n") {
			t.Errorf("part %d lacks the file or hunk header:\n%s", p.Index, p.Text)
		}
		r := p.Files[0].Ranges
		if len(r) != 1 || r[0].Start != next {
			t.Fatalf("part %d covers %v, want a range starting at %d", p.Index, r, next)
		}
		next = r[0].End + 1
	}
	if next != 401 {
		t.Errorf("parts cover new lines up to %d, want 400", next-1)
	}
}

func TestSplitFastMode(t *testing.T) {
	t.Parallel()
	in := "diff --git a/f.go b/f.go\n--- a/f.go\n+++ b/f.go\n@@ -1,11 +1,11 @@\n" +
		" c1\n c2\n c3\n-d4\n+a4\n c5\n c6\n+a7\n-d7\n c8\n c9\n c10\n c11\n"
	d := mustParse(t, in)
	parts, err := Split(d, Options{Mode: ModeFast})
	if err != nil {
		t.Fatal(err)
	}
	want := "diff --git a/f.go b/f.go\n--- a/f.go\n+++ b/f.go\n" +
		"@@ -3,6 +3,6 @@\n c3\n-d4\n+a4\n c5\n c6\n+a7\n-d7\n c8\n"
	if len(parts) != 1 || parts[0].Text != want {
		t.Fatalf("fast part =\n%s\nwant\n%s", parts[0].Text, want)
	}
	if r := parts[0].Files[0].Ranges; len(r) != 1 || r[0] != (LineRange{3, 8}) {
		t.Errorf("ranges = %v", r)
	}
}

func TestSplitFastModeSeparatesDistantChanges(t *testing.T) {
	t.Parallel()
	in := "--- a/f\n+++ b/f\n@@ -1,7 +1,7 @@\n-a\n+A\n c2\n c3\n c4\n c5\n-f\n+F\n c7\n"
	parts, err := Split(mustParse(t, in), Options{Mode: ModeFast})
	if err != nil {
		t.Fatal(err)
	}
	got := parts[0].Files[0].Ranges
	want := []LineRange{{1, 2}, {5, 7}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ranges = %v, want %v", got, want)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	d := mustParse(t, manyHunks(1))
	tests := []struct {
		opts    Options
		wantErr bool
	}{
		{Options{}, false},
		{Options{MaxTokens: 64, Mode: ModeFast}, false},
		{Options{MaxTokens: 10}, true},
		{Options{MaxTokens: -1}, true},
		{Options{Mode: "turbo"}, true},
	}
	for _, tt := range tests {
		_, err := Split(d, tt.opts)
		if (err != nil) != tt.wantErr {
			t.Errorf("Split(%+v) err = %v, wantErr %v", tt.opts, err, tt.wantErr)
		}
	}
	if o := (Options{}).WithDefaults(); o.MaxTokens != DefaultMaxTokens || o.Mode != ModeFull {
		t.Errorf("WithDefaults() = %+v", o)
	}
	if _, err := Split(nil, Options{}); err != ErrEmpty {
		t.Errorf("Split(nil) err = %v", err)
	}
}

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"": 0, "a": 1, "abcd": 1, "abcde": 2, strings.Repeat("x", 400): 100} {
		if got := EstimateTokens(in); got != want {
			t.Errorf("EstimateTokens(len %d) = %d, want %d", len(in), got, want)
		}
	}
}

func TestSplitHeaderOnlyFiles(t *testing.T) {
	t.Parallel()
	in := "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-secret1\n-secret2\n" +
		"diff --git a/img.png b/img.png\nindex 1111111..2222222 100644\nBinary files a/img.png and b/img.png differ\n"
	parts, err := Split(mustParse(t, in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1 || strings.Contains(parts[0].Text, "secret1") {
		t.Fatalf("parts = %+v", parts)
	}
	if len(parts[0].Files) != 2 || len(parts[0].Files[0].Ranges) != 0 || parts[0].Files[1].Path != "img.png" {
		t.Errorf("files = %+v", parts[0].Files)
	}
}
