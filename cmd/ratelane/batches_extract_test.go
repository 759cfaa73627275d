package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadExtractions: batches create --extractions reads JSON Lines
// (blank lines skipped) and JSON arrays alike, and refuses a bad line or
// an empty file with the line named.
func TestReadExtractions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		text string
		n    int
		err  bool
	}{
		"jsonl": {text: "{\"id\":\"a\"}\n\n{\"id\":\"b\"}\n", n: 2},
		"array": {text: " [{\"id\":\"a\"},{\"id\":\"b\"},{\"id\":\"c\"}]", n: 3},
		"bad":   {text: "{\"id\":\"a\"}\n{\"id\":\n", err: true},
		"empty": {text: "\n", err: true},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		xs, err := readExtractions(p)
		if (err != nil) != tc.err || len(xs) != tc.n {
			t.Errorf("%s: %d items, err %v; want %d, error %v", name, len(xs), err, tc.n, tc.err)
		}
	}
}
