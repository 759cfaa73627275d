package diff

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRenderRoundTrip(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"mixed.diff", "mixed_nobinpatch.diff", "plain_noeol.diff"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := mustParseFile(t, name)
			var b strings.Builder
			for _, f := range d.Files {
				b.WriteString(f.Render(f.Hunks))
			}
			d2, err := Parse([]byte(b.String()))
			if err != nil {
				t.Fatalf("re-parse: %v\n%s", err, b.String())
			}
			if !reflect.DeepEqual(d.Entries(), d2.Entries()) {
				t.Error("entries changed after render and re-parse")
			}
			for i, f := range d.Files {
				g := d2.Files[i]
				if f.Path() != g.Path() || f.IsDeleted != g.IsDeleted || f.IsRenamed != g.IsRenamed ||
					f.IsBinary != g.IsBinary || f.IsNew != g.IsNew {
					t.Errorf("file %d header changed: %+v -> %+v", i, f, g)
				}
			}
		})
	}
}

func TestRenderDeletedHeaderOnly(t *testing.T) {
	t.Parallel()
	d := mustParseFile(t, "mixed.diff")
	f, _ := d.File("legacy.py")
	out := f.Render(nil)
	if strings.Contains(out, "import os") {
		t.Errorf("header-only render contains content:\n%s", out)
	}
	d2, err := Parse([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if g := d2.Files[0]; !g.IsDeleted || g.Path() != "legacy.py" {
		t.Errorf("re-parsed = %+v, want deleted legacy.py", g)
	}
}

func TestRenderBinaryOmitsPatchData(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("testdata", "mixed.diff"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "GIT binary patch") {
		t.Fatal("testdata lost its binary patch")
	}
	d := mustParseFile(t, "mixed.diff")
	f, _ := d.File("logo.png")
	out := f.Render(f.Hunks)
	if strings.Contains(out, "GIT binary patch") || !strings.Contains(out, "Binary files") {
		t.Errorf("binary render = %q", out)
	}
}

func TestHunkSlice(t *testing.T) {
	t.Parallel()
	d := mustParseFile(t, "mixed.diff")
	f, _ := d.File("pkg/server.go")
	h := f.Hunks[0] // @@ -2,7 +2,8 @@: 3 ctx, 1 del, 2 add, 3 ctx
	tests := []struct {
		i, j                   int
		oldS, oldN, newS, newN int
	}{
		{0, len(h.Lines), 2, 7, 2, 8},
		{3, 4, 5, 1, 4, 0}, // only the deleted line: new side names line 4
		{4, 6, 5, 0, 5, 2}, // only added lines: old side names line 5
		{2, 5, 4, 2, 4, 2},
		{6, 9, 6, 3, 7, 3},
	}
	for _, tt := range tests {
		s := h.Slice(tt.i, tt.j)
		got := [4]int{s.OldStart, s.OldLines, s.NewStart, s.NewLines}
		if want := [4]int{tt.oldS, tt.oldN, tt.newS, tt.newN}; got != want {
			t.Errorf("Slice(%d,%d) header = %v, want %v", tt.i, tt.j, got, want)
		}
	}
}

// TestRenderCreateDeleteNamesOnePath: a deletion whose header also names a
// new path (or a creation that names an old one) parses, and Render must
// still write a header that parses back. It wrote both names into the
// "diff --git" line, and go-gitdiff reads a deletion's path from that line
// only when its two names agree (found by FuzzParse).
func TestRenderCreateDeleteNamesOnePath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, path string
		isNew          bool
	}{
		{"deletion naming a new path", "diff --git \n+++ 0\ndeleted file mode 0\n--- 1", "1", false},
		{"creation naming an old path", "diff --git \n--- 0\nnew file mode 0\n+++ 1", "1", true},
		{"deletion with a hunk", "diff --git \n+++ 0\ndeleted file mode 100644\n--- 1\n@@ -1 +0,0 @@\n-a\n", "1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			f := d.Files[0]
			out := f.Render(f.Hunks)
			d2, err := Parse([]byte(out))
			if err != nil {
				t.Fatalf("re-parse of %q: %v", out, err)
			}
			if g := d2.Files[0]; g.Path() != tt.path || g.IsNew != tt.isNew || g.IsDeleted == tt.isNew || !reflect.DeepEqual(d.Entries(), d2.Entries()) {
				t.Errorf("re-parsed %+v from %q, want %q (new %v)", g, out, tt.path, tt.isNew)
			}
		})
	}
}
