package main

import (
	"strings"
	"testing"
)

// TestListVerbsPage pins the one shape of the paged ls verbs: each sends
// its filters, --after and --limit as the query, prints the page as a
// table on stdout and the next page's command on stderr only, refuses a
// --limit the server would refuse before asking it, and says 1 to 500 in
// its help.
func TestListVerbsPage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		verb, path, items, item string
		filters                 []string
	}{
		{"batches ls", "/v1/batches", "batches", `{"id":"b1","region":"eu","state":"running","provider":"openai"}`,
			[]string{"state", "region", "tenant"}},
		{"dlq ls", "/v1/dead-letters", "dead_letters", `{"id":"b1","kind":"k","region":"eu","state":"terminal"}`,
			[]string{"kind", "region", "reason"}},
		{"reviews ls", "/v1/reviews", "reviews", `{"id":"b1","region":"eu","state":"published"}`,
			[]string{"state", "region", "lane", "tenant"}},
		{"schedules ls", "/v1/schedules", "schedules", `{"id":"b1","name":"n","region":"eu","every":"1m","job":{"kind":"k"}}`,
			[]string{"region", "tenant"}},
		{"subscribers ls", "/v1/subscribers", "subscribers", `{"id":"b1","region":"eu","url":"https://x.invalid","topics":["t"]}`,
			[]string{"region"}},
	} {
		t.Run(strings.ReplaceAll(tc.verb, " ", "_"), func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, map[string]canned{"GET " + tc.path: {body: `{"` + tc.items + `":[` + tc.item + `],"next":"C2"}`}})
			args := append(strings.Fields(tc.verb), "--after", "C1", "--limit", "7")
			for _, f := range tc.filters {
				args = append(args, "--"+f, f+"-value")
			}
			out, errOut := api.ok(t, args...)
			r := api.only(t, "GET", tc.path)
			if r.query.Get("after") != "C1" || r.query.Get("limit") != "7" {
				t.Errorf("query = %v, want after=C1 limit=7", r.query)
			}
			for _, f := range tc.filters {
				if got := r.query.Get(f); got != f+"-value" {
					t.Errorf("query %s = %q, want %q", f, got, f+"-value")
				}
			}
			if len(r.query) != len(tc.filters)+2 {
				t.Errorf("query = %v, want only the filters, after and limit", r.query)
			}
			if !strings.Contains(out, "b1") || strings.Contains(out, "more:") {
				t.Errorf("stdout = %q, want the table and no hint", out)
			}
			if want := "more: ratelane " + tc.verb + " --after C2\n"; errOut != want {
				t.Errorf("stderr = %q, want %q", errOut, want)
			}
			for _, limit := range []string{"-1", "501"} {
				code, _, errOut := api.cli(t, append(strings.Fields(tc.verb), "--limit", limit)...)
				if code != 2 || !strings.Contains(errOut, "--limit must be from 1 to 500") {
					t.Errorf("--limit %s: exit %d, stderr %q; want 2 and the range", limit, code, errOut)
				}
			}
			if _, help := api.ok(t, append(strings.Fields(tc.verb), "-h")...); !strings.Contains(help, "page size, 1 to 500") {
				t.Errorf("help does not give --limit's range:\n%s", help)
			}
			api.only(t, "GET", tc.path) // neither the refused --limit nor -h asked the server
		})
	}
}
