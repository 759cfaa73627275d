package diff

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts is
// self-consistent: every entry agrees with Lookup, and rendering the files
// back to text re-parses to the same new-side entries.
func FuzzParse(f *testing.F) {
	names, _ := filepath.Glob(filepath.Join("testdata", "*.diff"))
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"))
	f.Add([]byte("diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+a\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			if d != nil {
				t.Fatal("non-nil diff with error")
			}
			return
		}
		entries := d.Entries()
		for _, e := range entries {
			if k, txt := d.Lookup(e.Path, e.Line); k != e.Kind || txt != e.Text {
				t.Fatalf("entry %+v disagrees with Lookup", e)
			}
		}
		var b strings.Builder
		for _, f := range d.Files {
			b.WriteString(f.Render(f.Hunks))
		}
		d2, err := Parse([]byte(b.String()))
		if err != nil {
			t.Fatalf("rendered diff does not parse: %v", err)
		}
		if !reflect.DeepEqual(entries, d2.Entries()) {
			t.Fatal("render changed the entries")
		}
	})
}
