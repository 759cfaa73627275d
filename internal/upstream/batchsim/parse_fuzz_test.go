package batchsim

import (
	"strings"
	"testing"
)

// FuzzParseInput: any input file is either refused with at least one
// error or accepted with unique custom_ids, never both, and never panics.
func FuzzParseInput(f *testing.F) {
	f.Add(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"q"}]}}` + "\n")
	f.Add(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q"}]}]}}`)
	f.Add("not json\n\n{}\n")
	f.Add(`{"custom_id":"a","method":"GET","url":"/v1/embeddings","body":null}`)
	f.Fuzz(func(t *testing.T, data string) {
		s := &Server{cfg: Config{Limits: Limits{OpenAIMaxRequests: 5, OpenAIMaxInputBytes: 1 << 16}}.WithDefaults(), attempts: map[string]int{}}
		reqs, errs := s.parseInput([]byte(data), batchEndpoint)
		if (len(reqs) == 0) == (len(errs) == 0) {
			t.Fatalf("%d requests and %d errors", len(reqs), len(errs))
		}
		seen := map[string]bool{}
		for _, r := range reqs {
			if r.customID == "" || seen[r.customID] {
				t.Fatalf("custom_id %q empty or repeated", r.customID)
			}
			seen[r.customID] = true
		}
		for _, e := range errs {
			if e.Code == "" || strings.TrimSpace(e.Message) == "" {
				t.Fatalf("error without code or message: %+v", e)
			}
		}
	})
}
