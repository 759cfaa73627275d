package main

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeList checks that the CLI's loose list decoder never panics on
// whatever a server (or a proxy in front of it) answers, and that every item
// it returns is valid JSON.
func FuzzDecodeList(f *testing.F) {
	for _, s := range []string{`[{"id":"a"}]`, `{"jobs":[{"id":"a"}],"next_cursor":"c"}`, `{"items":null}`,
		`{"next":5,"data":[1,2]}`, `{"x":[` + "\x00" + `]}`, ``, `null`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, _, err := decodeList(body, "jobs")
		if err != nil {
			return
		}
		for _, it := range items {
			if !json.Valid(it) {
				t.Fatalf("decodeList(%q) returned invalid item %q", body, it)
			}
		}
	})
}
