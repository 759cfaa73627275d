package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// providerKeyCanary is the key material the provider tests hand out; no
// message may contain it.
const providerKeyCanary = "sk-canary-provider-key-3f9a1c"

// TestProviderConfigRefusals: every mistake in the providers section fails
// at start-up with a message naming the field (and the variable or file),
// and none quotes the key.
func TestProviderConfigRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "openai.key")
	if err := os.WriteFile(keyFile, []byte(providerKeyCanary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.key")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	twoLines := filepath.Join(dir, "two.key")
	if err := os.WriteFile(twoLines, []byte(providerKeyCanary+"\n"+providerKeyCanary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := keySource{
		getenv: func(k string) (string, bool) {
			switch k {
			case "SET_KEY":
				return providerKeyCanary, true
			case "EMPTY_KEY":
				return "", true
			}
			return "", false
		},
		readFile: os.ReadFile,
	}
	good := `"name":"eu-openai","kind":"openai","region":"eu","model":"gpt-4o-mini","api_key_env":"SET_KEY"`
	for _, tc := range []struct {
		name, entry string
		want        []string
	}{
		{"unknown kind", `"name":"x","kind":"gemini","region":"eu","model":"m","api_key_env":"SET_KEY"`,
			[]string{"providers.eu[0]", "kind must be rules, openai, openai-compatible or anthropic", `"gemini"`}},
		{"no kind", `"name":"x","region":"eu"`, []string{"providers.eu[0]", "kind is required"}},
		{"no name", `"kind":"rules","region":"eu"`, []string{"providers.eu[0]", "name is required"}},
		{"wrong region", `"name":"us-openai","kind":"openai","region":"us","model":"m","api_key_env":"SET_KEY"`,
			[]string{`providers.eu[0] ("us-openai")`, `declares region "us" but is configured for region "eu"`}},
		{"no region", `"name":"x","kind":"rules"`, []string{"region is required"}},
		{"env unset", `"name":"x","kind":"anthropic","region":"eu","model":"m","api_key_env":"UNSET_KEY"`,
			[]string{"api_key_env", "UNSET_KEY is not set"}},
		{"env empty", `"name":"x","kind":"openai","region":"eu","model":"m","api_key_env":"EMPTY_KEY"`,
			[]string{"api_key_env", "EMPTY_KEY is empty"}},
		{"no key", `"name":"x","kind":"openai","region":"eu","model":"m"`, []string{"api_key_env or api_key_file is required for kind openai"}},
		{"missing key file", `"name":"x","kind":"openai","region":"eu","model":"m","api_key_file":"` + filepath.Join(dir, "nope.key") + `"`,
			[]string{"api_key_file", "nope.key does not exist"}},
		{"empty key file", `"name":"x","kind":"openai","region":"eu","model":"m","api_key_file":"` + empty + `"`,
			[]string{"api_key_file", "is empty"}},
		{"two-line key file", `"name":"x","kind":"openai","region":"eu","model":"m","api_key_file":"` + twoLines + `"`,
			[]string{"api_key_file", "more than one line"}},
		{"inline key", `"name":"x","kind":"openai","region":"eu","model":"m","api_key":"` + providerKeyCanary + `"`,
			[]string{"api_key: a key inline in the config file is refused", "api_key_env", "api_key_file"}},
		{"both key sources", good + `,"api_key_file":"` + keyFile + `"`, []string{"api_key_env and api_key_file: give one"}},
		{"bad URL scheme", good + `,"base_url":"ftp://api.example.com/v1"`, []string{"base_url", "http:// or https://"}},
		{"URL with a password", good + `,"base_url":"https://u:` + providerKeyCanary + `@api.example.com/v1"`,
			[]string{"base_url", "must not carry credentials"}},
		{"URL without host", good + `,"base_url":"https:///v1"`, []string{"base_url", "has no host"}},
		{"no model", `"name":"x","kind":"anthropic","region":"eu","api_key_file":"` + keyFile + `"`, []string{"model is required"}},
		{"compatible without URL", `"name":"x","kind":"openai-compatible","region":"eu","model":"m"`, []string{"base_url is required"}},
		{"bad timeout", good + `,"timeout":"soon"`, []string{"timeout", `"soon"`}},
		{"negative rpm", good + `,"rpm":-1`, []string{"rpm must be between"}},
		{"one key for both", good + `,"tpm":200000,"requests_key":"k","tokens_key":"k"`, []string{"tokens_key and requests_key must differ"}},
		{"key for rules", `"name":"x","kind":"rules","region":"eu","api_key_env":"SET_KEY"`, []string{"the rules provider needs no key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var section map[string][]providerConfig
			if err := json.Unmarshal([]byte(`{"eu":[{`+tc.entry+`}]}`), &section); err != nil {
				t.Fatal(err)
			}
			_, err := buildProviders(section, []string{"us", "eu"}, keys)
			if err == nil {
				t.Fatalf("accepted %s", tc.entry)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, providerKeyCanary) {
				t.Errorf("error quotes the key:\n%s", msg)
			}
		})
	}

	// Region-level mistakes.
	for _, tc := range []struct {
		section string
		want    string
	}{
		{`{"mars":[{"name":"r","kind":"rules","region":"mars"}]}`, `providers.mars: region "mars" is not served by this node`},
		{`{"eu":[]}`, "providers.eu: lists no provider"},
		{`{"eu":[{"name":"r","kind":"rules","region":"eu"},{"name":"r","kind":"rules","region":"eu"}]}`, `name "r" is used twice`},
	} {
		var section map[string][]providerConfig
		if err := json.Unmarshal([]byte(tc.section), &section); err != nil {
			t.Fatal(err)
		}
		if _, err := buildProviders(section, []string{"us", "eu"}, keys); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.section, err, tc.want)
		}
	}

	// A good section: both key sources, the region's providers in order.
	var section map[string][]providerConfig
	if err := json.Unmarshal([]byte(`{"eu":[{`+good+`,"rpm":500,"timeout":"30s"},`+
		`{"name":"eu-claude","kind":"anthropic","region":"eu","model":"claude-sonnet-4-5","api_key_file":"`+keyFile+`","tpm":40000,"rpm":50},`+
		`{"name":"eu-ollama","kind":"openai-compatible","region":"eu","model":"llama3","endpoint":"http://127.0.0.1:11434/v1"}]}`), &section); err != nil {
		t.Fatal(err)
	}
	got, err := buildProviders(section, []string{"us", "eu"}, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got["eu"]) != 3 || len(got["us"]) != 0 {
		t.Fatalf("providers = %v", got)
	}
	oa, claude, ollama := got["eu"][0].Profile(), got["eu"][1].Profile(), got["eu"][2].Profile()
	if oa.APIKey != providerKeyCanary || oa.RequestsPerMinute != 500 || oa.RequestsKey != "openai:gpt-4o-mini" || oa.TokensKey != "" ||
		oa.Timeout.Seconds() != 30 {
		t.Errorf("openai profile = %v rpm %v key %q/%q timeout %v", oa, oa.RequestsPerMinute, oa.RequestsKey, oa.TokensKey, oa.Timeout)
	}
	if claude.APIKey != providerKeyCanary || claude.TokensKey != "anthropic:claude-sonnet-4-5:tokens" || claude.TokensPerMinute != 40000 ||
		strings.Join(claude.LimitKeys(), ",") != "anthropic:claude-sonnet-4-5:tokens,anthropic:claude-sonnet-4-5" {
		t.Errorf("anthropic profile: key read %v, tokens key %q, tpm %v, keys %v", claude.APIKey == providerKeyCanary, claude.TokensKey,
			claude.TokensPerMinute, claude.LimitKeys())
	}
	if ollama.APIKey != "" || ollama.BaseURL != "http://127.0.0.1:11434/v1" {
		t.Errorf("ollama profile: %v base %q", ollama, ollama.BaseURL)
	}
	// A profile printed by mistake shows whether a key is set, never it.
	for _, s := range []string{oa.String(), oa.GoString(), fmt.Sprintf("%+v", oa)} {
		if strings.Contains(s, providerKeyCanary) || !strings.Contains(s, "api key set") {
			t.Errorf("profile prints as %q", s)
		}
	}
}
