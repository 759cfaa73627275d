package diff

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

func mustParseFile(t testing.TB, name string) *Diff {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return d
}

func TestParseFiles(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"mixed.diff", "mixed_nobinpatch.diff"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := mustParseFile(t, name)
			type want struct {
				old, new                        string
				isNew, deleted, renamed, binary bool
				hunks                           int
			}
			wants := []want{
				{"", "app.js", true, false, false, false, 1},
				{"legacy.py", "", false, true, false, false, 1},
				{"logo.png", "logo.png", false, false, false, true, 0},
				{"pkg/moved.txt", "pkg/moved2.txt", false, false, true, false, 0},
				{"pkg/old_name.go", "pkg/new_name.go", false, false, true, false, 1},
				{"pkg/server.go", "pkg/server.go", false, false, false, false, 3},
			}
			if len(d.Files) != len(wants) {
				t.Fatalf("got %d files, want %d", len(d.Files), len(wants))
			}
			for i, w := range wants {
				f := d.Files[i]
				got := want{f.OldPath, f.NewPath, f.IsNew, f.IsDeleted, f.IsRenamed, f.IsBinary, len(f.Hunks)}
				if got != w {
					t.Errorf("file %d = %+v, want %+v", i, got, w)
				}
			}
		})
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	d := mustParseFile(t, "mixed.diff")
	tests := []struct {
		path     string
		line     int
		wantKind LineKind
		wantText string
	}{
		{"app.js", 1, Added, `const key = "AKIAQWERTYUIOPASDFGH";`},
		{"app.js", 4, Added, `const q = "SELECT * FROM users WHERE id = " + id;`},
		{"app.js", 5, Absent, ""},
		{"app.js", 0, Absent, ""},
		{"pkg/server.go", 2, Context, "// line 2"},
		{"pkg/server.go", 5, Added, "\tInsecureSkipVerify: true,"},
		{"pkg/server.go", 6, Added, "\t// TODO: remove this before release"},
		{"pkg/server.go", 7, Context, "// line 6"},
		{"pkg/server.go", 9, Context, "// line 8"},
		{"pkg/server.go", 10, Absent, ""},
		{"pkg/server.go", 20, Context, "// line 19"},
		{"pkg/server.go", 21, Context, "// line 21"}, // line 20 was deleted
		{"pkg/server.go", 46, Added, "\tfmt.Println(\"debug\", x)"},
		{"pkg/server.go", 48, Added, "\t_ = conn.Close()"},
		{"pkg/new_name.go", 8, Added, "\treturn 3"},
		{"pkg/new_name.go", 5, Context, "}"},
		{"pkg/old_name.go", 8, Absent, ""}, // renamed: only the new path is known
		{"legacy.py", 1, Absent, ""},
		{"logo.png", 1, Absent, ""},
		{"pkg/moved2.txt", 1, Absent, ""},
		{"nope.go", 1, Absent, ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			kind, text := d.Lookup(tt.path, tt.line)
			if kind != tt.wantKind || text != tt.wantText {
				t.Errorf("Lookup(%q, %d) = %v %q, want %v %q", tt.path, tt.line, kind, text, tt.wantKind, tt.wantText)
			}
		})
	}
}

func TestFileLookupByPath(t *testing.T) {
	t.Parallel()
	d := mustParseFile(t, "mixed.diff")
	if f, ok := d.File("legacy.py"); !ok || !f.IsDeleted || f.Path() != "legacy.py" {
		t.Errorf("deleted file not found by old path: %v %v", f, ok)
	}
	if _, ok := d.File("pkg/old_name.go"); ok {
		t.Error("renamed file found by its old path")
	}
	f, _ := d.File("pkg/server.go")
	if h, ok := f.HunkOf(46); !ok || h != 2 {
		t.Errorf("HunkOf(46) = %d %v, want 2 true", h, ok)
	}
	if _, ok := f.HunkOf(30); ok {
		t.Error("HunkOf(30) found a hunk for a line outside the diff")
	}
}

func TestParseNoEOL(t *testing.T) {
	t.Parallel()
	d := mustParseFile(t, "plain_noeol.diff")
	f, ok := d.File("notes.txt")
	if !ok {
		t.Fatal("notes.txt missing")
	}
	last := f.Hunks[0].Lines[len(f.Hunks[0].Lines)-1]
	if last.Text != "four" || !last.NoEOL || last.NewLine != 4 {
		t.Errorf("last line = %+v", last)
	}
	if k, txt := d.Lookup("notes.txt", 2); k != Added || txt != "2" {
		t.Errorf("Lookup(2) = %v %q", k, txt)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	secret := "hunter2-secret-content"
	tests := []struct {
		name  string
		input string
		noFil bool
	}{
		{"empty", "", true},
		{"garbage", "hello\nworld " + secret + "\n", true},
		{"binary junk", "\x00\x01\x02\xff", true},
		{"bad op", "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n one\n*" + secret + "\n", false},
		{"miscount", "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-a\n+" + secret + "\n", false},
		{"no changes", "--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n " + secret + "\n", false},
		{"fragment without header", "@@ -1 +1 @@\n-a\n+" + secret + "\n", false},
		{"overlap", "--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n-a\n+b\n@@ -1,1 +1,1 @@\n-a\n+" + secret + "\n", false},
		{"absolute path", "--- /etc/x\n+++ /etc/x\n@@ -1 +1 @@\n-a\n+b\n", false},
		{"escaping path", "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", false},
		// go-gitdiff cannot read back a quoted name ending in a backslash
		// (found by FuzzParse), so Render could not round-trip it.
		{"trailing backslash", "diff --git \nrename to 0\n--- \\", false},
		// go-gitdiff reads a signed mode and Render wrote it back as an
		// out-of-range unsigned one (found by FuzzParse), in all three
		// places a mode can stand.
		{"negative old mode", "diff --git a/x b/x\nold mode -1\nnew mode 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", false},
		{"negative new file mode", "diff --git a/x b/x\nnew file mode -1\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+a\n", false},
		{"negative index mode", "diff --git a/x b/x\nindex 1..2 -100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", false},
		{"oversized mode", "diff --git a/x b/x\nold mode 100644\nnew mode 17777777777\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", false},
		{"duplicate path", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -5 +5 @@\n-a\n+b\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.input))
			if err == nil {
				t.Fatal("Parse succeeded, want error")
			}
			if tt.noFil != errors.Is(err, ErrNoFiles) {
				t.Errorf("errors.Is(err, ErrNoFiles) = %v, want %v (err %v)", !tt.noFil, tt.noFil, err)
			}
			var pe *ParseError
			if !tt.noFil && !errors.As(err, &pe) {
				t.Errorf("error %T is not a *ParseError", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error message leaks diff content: %q", err.Error())
			}
		})
	}
}

func TestEntriesMatchLookup(t *testing.T) {
	t.Parallel()
	d := mustParseFile(t, "mixed.diff")
	entries := d.Entries()
	if len(entries) == 0 {
		t.Fatal("no entries")
	}
	var added int
	for _, e := range entries {
		kind, text := d.Lookup(e.Path, e.Line)
		if kind != e.Kind || text != e.Text {
			t.Errorf("entry %+v disagrees with Lookup: %v %q", e, kind, text)
		}
		if e.Kind == Added {
			added++
		}
	}
	if added != 4+1+2+2 {
		t.Errorf("added entries = %d, want 9", added)
	}
}

func TestLineKindString(t *testing.T) {
	t.Parallel()
	for k, want := range map[LineKind]string{Absent: "absent", Context: "context", Added: "added", Deleted: "deleted", 9: "LineKind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", k, got, want)
		}
	}
}

// benchDiff is a review-sized diff: 4 files of 3 hunks of 20 lines.
func benchDiff() []byte {
	var b strings.Builder
	for f := range 4 {
		fmt.Fprintf(&b, "diff --git a/pkg/f%d.go b/pkg/f%d.go\n--- a/pkg/f%d.go\n+++ b/pkg/f%d.go\n", f, f, f, f)
		for h := range 3 {
			fmt.Fprintf(&b, "@@ -%d,10 +%d,20 @@ func f()\n", 1+h*100, 1+h*100)
			for l := range 10 {
				fmt.Fprintf(&b, " \tx%d := y(%d)\n+\tz%d := w(x%d, %q)\n", l, l, l, l, "a < b")
			}
		}
	}
	return []byte(b.String())
}

// TestParseAllocations pins what parsing a review-sized diff allocates:
// 532 objects and 76 KB with gitdiff's own bufio.Reader over the text (a
// 4 KB buffer and a string per line), 267 and 72 KB with lineReader.
func TestParseAllocations(t *testing.T) {
	text := benchDiff()
	if n := testing.AllocsPerRun(20, func() {
		if _, err := Parse(text); err != nil {
			t.Fatal(err)
		}
	}); n > 300 {
		t.Fatalf("Parse: %.0f allocations for a 4-file diff, want at most 300", n)
	}
}

func BenchmarkParse(b *testing.B) {
	text := benchDiff()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(text); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLineReaderParsesAsBufio: gitdiff parses the same files, preamble
// and error from lineReader as from its own bufio.Reader over the text,
// for the test diffs and edge cases (no final newline, CRLF, empty,
// malformed).
func TestLineReaderParsesAsBufio(t *testing.T) {
	t.Parallel()
	inputs := [][]byte{benchDiff(), nil, []byte("x"), []byte("no newline at all"), []byte("commit msg\r\n\r\ndiff --git a/a b/a\r\n--- a/a\r\n+++ b/a\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n"),
		[]byte("diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-a\n+b"), []byte("diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,3 +1 @@\n-a\n")}
	for _, name := range []string{"mixed.diff", "mixed_nobinpatch.diff", "plain_noeol.diff"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	for i, in := range inputs {
		wantFiles, wantPre, wantErr := gitdiff.Parse(bytes.NewReader(in))
		gotFiles, gotPre, gotErr := gitdiff.Parse(&lineReader{text: string(in)})
		if !reflect.DeepEqual(gotFiles, wantFiles) || gotPre != wantPre || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("input %d: lineReader gave %v, %q, %v; bufio %v, %q, %v", i, gotFiles, gotPre, gotErr, wantFiles, wantPre, wantErr)
		}
	}
}
