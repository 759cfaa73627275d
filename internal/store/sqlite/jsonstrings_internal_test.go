package sqlite

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/store"
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
// and tokensJSON against json.Marshal's object after decoding, on plain
// strings and on those the hand-written path must hand over.
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
	for _, leased := range [][]store.Leased{
		{}, {{ID: "j1", Token: "t1"}},
		{{ID: "0190a4b2-7c1e-7000-8000-000000000001", Token: "5f2c"}, {ID: "0190a4b2-7c1e-7000-8000-000000000002", Token: "9a0b"}},
		{{ID: "j1", Token: "t1"}, {ID: "j2", Token: "t2"}, {ID: "j1", Token: "t3"}}, // a repeat: the last token, once
		{{ID: "a<b", Token: "t"}}, {{ID: "j", Token: "é"}}, {{ID: "j\"", Token: "t"}},
	} {
		tokens := map[string]string{}
		for _, l := range leased {
			tokens[l.ID] = l.Token
		}
		got := tokensJSON(leased, tokens)
		if strings.Count(got, `":"`) != len(tokens) {
			t.Errorf("tokensJSON(%q) = %s: %d members, want %d", leased, got, strings.Count(got, `":"`), len(tokens))
		}
		var back map[string]string
		if err := json.Unmarshal([]byte(got), &back); err != nil || !maps.Equal(back, tokens) {
			t.Errorf("tokensJSON(%q) = %s: decodes to %q, %v", tokens, got, back, err)
		}
		if want, _ := json.Marshal(tokens); len(tokens) <= 1 && got != string(want) {
			t.Errorf("tokensJSON(%q) = %s; json.Marshal: %s", tokens, got, want)
		}
	}
}
