// Package difftest hands the tests of the packages that read diffs
// (chunk, rules, finding) the diff package's testdata, parsed: one loader
// instead of a read-and-parse loop in each.
package difftest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ratelane/ratelane/internal/review/diff"
)

// dir is the diff package's testdata directory, found from this file so
// that any package's test can load it whatever its working directory.
var dir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}()

// Load parses the testdata diff name ("mixed.diff"), failing tb when it
// cannot be read or parsed.
func Load(tb testing.TB, name string) *diff.Diff {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		tb.Fatal(err)
	}
	d, err := diff.Parse(b)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return d
}

// All parses every testdata diff, failing tb when there are fewer than
// three (the testdata moved) or one does not parse.
func All(tb testing.TB) []*diff.Diff {
	tb.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.diff"))
	if len(names) < 3 {
		tb.Fatalf("found %d testdata diffs in %s", len(names), dir)
	}
	out := make([]*diff.Diff, len(names))
	for i, name := range names {
		out[i] = Load(tb, filepath.Base(name))
	}
	return out
}
