package main

import (
	"maps"
	"slices"
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
			// The hint runs the verb again with every flag given but the
			// cursor and the key (flag.Visit's order: by name), so that the
			// next page keeps this page's filters, --limit and --server.
			given := map[string]string{"limit": "7", "server": api.srv.URL}
			for _, f := range tc.filters {
				given[f] = f + "-value"
			}
			names := slices.Sorted(maps.Keys(given))
			want := "more: ratelane " + tc.verb
			for _, n := range names {
				want += " --" + n + " " + given[n]
			}
			if want += " --after C2\n"; errOut != want {
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

// TestNextPageHintKeepsTheCommand checks the hint of a list verb with a
// positional argument (subscribers deliveries ID): it keeps the ID and
// the flags, quotes what a shell would split, and never prints the API
// key given as a flag.
func TestNextPageHintKeepsTheCommand(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]canned{"GET /v1/subscribers/sub%201/deliveries": {body: `{"deliveries":[{"id":"d1","subscriber_id":"sub 1","event_id":"e1","version":1,"state":"waiting"}],"next":"C 2"}`}})
	out, errOut := api.ok(t, "subscribers", "deliveries", "sub 1", "--region", "eu", "--limit", "5", "--after", "C1", "-o", "table")
	if !strings.Contains(out, "d1") || strings.Contains(out, "more:") {
		t.Errorf("stdout = %q, want the table and no hint", out)
	}
	want := "more: ratelane subscribers deliveries 'sub 1' --limit 5 --region eu --server " + api.srv.URL + " --after 'C 2'\n"
	if errOut != want {
		t.Errorf("stderr = %q, want %q", errOut, want)
	}
	if strings.Contains(errOut, testKey) {
		t.Errorf("the hint prints the API key: %q", errOut)
	}
}

// TestShellQuote pins shellQuote: plain words as they are, anything else
// in single quotes with an embedded quote closed, escaped and reopened.
func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"eu": "eu", "http://127.0.0.1:8080": "http://127.0.0.1:8080", "a,b": "a,b",
		"": "''", "a b": "'a b'", "it's": `'it'\''s'`, "$HOME": "'$HOME'", "x;rm": "'x;rm'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
