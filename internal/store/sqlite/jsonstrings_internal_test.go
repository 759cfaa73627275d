package sqlite

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestJSONStrings checks jsonStrings against json.Unmarshal on the forms
// the hand-written path takes and on those it must hand over.
func TestJSONStrings(t *testing.T) {
	for _, in := range []string{
		`[]`, `["a"]`, `["openai:gpt-4o-mini","tenant:acme"]`, `["k0","k1","k2","k3"]`, `[""]`, `["",""]`,
		`["a]","[b"]`, `["é","日本"]`, `["a\"b"]`, `["a\\b"]`, `["\u00e9"]`, "[\"\xff\"]", `[ "a" ]`, `["a", "b"]`,
		`["a",]`, `["a"`, `[`, ``, `null`, `["a""b"]`, `["a",1]`, `[1]`, `{"a":1}`, `["a"]x`, "[\"a\tb\"]",
	} {
		var want []string
		wantErr := json.Unmarshal([]byte(in), &want)
		var got []string
		err := jsonStrings(in, &got)
		if (err != nil) != (wantErr != nil) || !slices.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("jsonStrings(%q) = %q, %v; json.Unmarshal: %q, %v", in, got, err, want, wantErr)
		}
	}
	// The hand-written path is the one taken for stored keys.
	if _, ok := plainStrings(`["openai:gpt-4o-mini","tenant:acme"]`); !ok {
		t.Error("plain keys went to json.Unmarshal")
	}
}

// TestStringsJSON checks stringsJSON and groupKeys against json.Marshal
// (the bytes are stored and compared: a group's keys are a unique column)
// on plain strings and on those the hand-written path must hand over.
func TestStringsJSON(t *testing.T) {
	for _, keys := range [][]string{
		nil, {}, {""}, {"a"}, {"openai:gpt-4o-mini", "tenant:acme"}, {"k1", "k0"}, {"a<b"}, {"a&b", "c"},
		{"é"}, {"日本", "a"}, {"a\"b"}, {"a\\b"}, {"a\tb"}, {"\xff"}, {"\u2028"}, {"a>b"}, {"~", "\x7f"},
	} {
		want, _ := json.Marshal(keys)
		if got := stringsJSON(keys); got != string(want) {
			t.Errorf("stringsJSON(%q) = %s; json.Marshal: %s", keys, got, want)
		}
		sorted := slices.Clone(keys)
		slices.Sort(sorted)
		want, _ = json.Marshal(sorted)
		if got := groupKeys(keys); got != string(want) {
			t.Errorf("groupKeys(%q) = %s; json.Marshal of the sorted keys: %s", keys, got, want)
		}
	}
}
