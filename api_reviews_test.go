package ratelane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/review"
)

// reviewAPI is a client with reviews in us (rules provider) and none in
// eu, served over HTTP, with producer keys for two tenants.
type reviewAPI struct {
	t            *testing.T
	c            *ratelane.Client
	url          string
	acme, globex string
}

// reviewAdminKey is the admin key of newReviewAPI's server.
const reviewAdminKey = "rl_revtest1_AdminKeyForTheReviewEndToEndTestAbcdefghijklmnop"

func newReviewAPI(t *testing.T) *reviewAPI {
	t.Helper()
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}, {Name: "eu"}}}
	p, err := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{p}, SweepEvery: 100 * time.Millisecond})
	c, url := serveAPI(t, cfg, reviewAdminKey)
	a := &reviewAPI{t: t, c: c, url: url}
	key := func(tenant string) string {
		var out struct {
			Secret string `json:"secret"`
		}
		a.call("POST", "/v1/keys", reviewAdminKey, map[string]any{"tenant": tenant, "role": "producer"}, nil, 201, &out)
		return out.Secret
	}
	a.acme, a.globex = key("acme"), key("globex")
	return a
}

// call sends a request and fails unless it answers want; the body is
// decoded into out when out is set, and returned.
func (a *reviewAPI) call(method, path, key string, body any, hdr map[string]string, want int, out any) *http.Response {
	a.t.Helper()
	resp, raw := callJSON(a.t, method, a.url, path, key, body, hdr)
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			a.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp
}

// waitPublished reads review rv until it is published, failing the test
// when it is not within testkit.Timeout; rv holds its last answer.
func (a *reviewAPI) waitPublished(t *testing.T, rv *apiReview) {
	t.Helper()
	testkit.Eventually(t, testkit.Timeout, "review "+rv.ID+" to publish", func() error {
		a.call("GET", "/v1/reviews/"+rv.ID, a.acme, nil, nil, 200, rv)
		if rv.State != "published" {
			return fmt.Errorf("review is %s", rv.State)
		}
		return nil
	})
}

type apiReview struct {
	ID     string `json:"id"`
	Region string `json:"region"`
	Tenant string `json:"tenant"`
	State  string `json:"state"`
	Depth  string `json:"depth"`
	Parts  struct {
		Total, Succeeded, Pending int
	} `json:"parts"`
	Result *struct {
		Findings []struct {
			Path     string `json:"path"`
			Line     int    `json:"line"`
			Severity string `json:"severity"`
			Category string `json:"category"`
			Evidence string `json:"evidence"`
		} `json:"findings"`
		Quarantined []json.RawMessage `json:"quarantined"`
		Usage       map[string]int64  `json:"usage"`
	} `json:"result"`
}

// TestReviewHTTPArrivingReleased: POST /v1/reviews counts an interactive
// review as interactive work in flight from the route's start
// (PluginRegion.InteractiveArriving) and never leaks the count: a request
// refused for its diff or for its provider leaves nothing in flight when
// it is answered, and an accepted one nothing once it is published and
// the engine is idle.
func TestReviewHTTPArrivingReleased(t *testing.T) {
	t.Parallel()
	a := newReviewAPI(t)
	inFlight := func() int { return ratelane.InteractiveInFlight(a.c, "us") }
	idle := func(what string) {
		t.Helper()
		testkit.Eventually(t, testkit.Timeout, what+": nothing in flight", func() error {
			if n := inFlight(); n != 0 {
				return fmt.Errorf("%d in flight", n)
			}
			return nil
		})
	}
	idle("started")
	body := func(diff, provider string) map[string]any {
		return map[string]any{"region": "us", "repo": "acme/app", "change": "8", "diff": diff, "depth": "full",
			"lane": "interactive", "provider": provider, "publish": map[string]any{"kind": "none"}}
	}
	a.call("POST", "/v1/reviews", a.acme, body("not a diff at all", "rules"), nil, 400, nil)
	if n := inFlight(); n != 0 {
		t.Fatalf("after a review refused for its diff: %d in flight, want 0: its arrival leaked", n)
	}
	a.call("POST", "/v1/reviews", a.acme, body(testkit.AWSKeyDiff, "nope"), nil, 400, nil)
	if n := inFlight(); n != 0 {
		t.Fatalf("after a review refused for its provider: %d in flight, want 0: its arrival leaked", n)
	}
	var rv apiReview
	a.call("POST", "/v1/reviews", a.acme, body(testkit.AWSKeyDiff, "rules"), nil, 202, &rv)
	a.waitPublished(t, &rv)
	idle("an accepted review published")
}

// TestReviewHTTPEndToEnd submits a real diff over HTTP, polls the review
// until it is published, and reads its finding and SARIF export; another
// tenant cannot see it, a replay with the same Idempotency-Key creates
// nothing, and a region without reviews answers 501.
func TestReviewHTTPEndToEnd(t *testing.T) {
	t.Parallel()
	a := newReviewAPI(t)
	body := map[string]any{"region": "us", "repo": "acme/app", "change": "7", "base_sha": "aaa", "head_sha": "bbb",
		"diff": testkit.AWSKeyDiff, "depth": "full", "lane": "interactive", "provider": "rules", "publish": map[string]any{"kind": "none"}}
	idem := map[string]string{"Idempotency-Key": "acme/app#7@bbb"}
	var rv apiReview
	resp := a.call("POST", "/v1/reviews", a.acme, body, idem, 202, &rv)
	if rv.ID == "" || rv.Tenant != "acme" || rv.Region != "us" || rv.Depth != "full" {
		t.Fatalf("submitted %+v", rv)
	}
	if loc := resp.Header.Get("Location"); loc != "/v1/reviews/"+rv.ID+"?region=us" {
		t.Fatalf("Location %q", loc)
	}

	a.waitPublished(t, &rv)
	if rv.Result == nil || len(rv.Result.Findings) != 1 || rv.Parts.Total < 1 || rv.Parts.Succeeded != rv.Parts.Total {
		t.Fatalf("published review %+v", rv)
	}
	f := rv.Result.Findings[0]
	if f.Path != "config.go" || f.Line != 4 || f.Severity != "error" || f.Category != "security" || !strings.Contains(f.Evidence, "AKIAQWERTYUIOPASDFGH") {
		t.Fatalf("finding %+v", f)
	}

	var sarif struct {
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name string `json:"name"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				Level     string `json:"level"`
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct {
							URI string `json:"uri"`
						} `json:"artifactLocation"`
						Region struct {
							StartLine int `json:"startLine"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	resp = a.call("GET", "/v1/reviews/"+rv.ID+"/sarif?region=us", a.acme, nil, nil, 200, &sarif)
	if ct := resp.Header.Get("Content-Type"); ct != "application/sarif+json" {
		t.Fatalf("SARIF Content-Type %q", ct)
	}
	if sarif.Version != "2.1.0" || len(sarif.Runs) != 1 || len(sarif.Runs[0].Results) != 1 {
		t.Fatalf("SARIF %+v", sarif)
	}
	res := sarif.Runs[0].Results[0]
	if res.Level != "error" || len(res.Locations) != 1 || res.Locations[0].PhysicalLocation.ArtifactLocation.URI != "config.go" ||
		res.Locations[0].PhysicalLocation.Region.StartLine != 4 {
		t.Fatalf("SARIF result %+v", res)
	}

	// Tenancy: globex gets a 404 for acme's review, as for a missing one.
	a.call("GET", "/v1/reviews/"+rv.ID, a.globex, nil, nil, 404, nil)
	a.call("GET", "/v1/reviews/"+rv.ID+"/sarif", a.globex, nil, nil, 404, nil)
	a.call("GET", "/v1/reviews/"+rv.ID+"?region=us", a.globex, nil, nil, 404, nil)

	// A replay returns the first review and inserts no part jobs.
	ctx := context.Background()
	parts := func() int {
		js, err := a.c.List(ctx, "us", ratelane.ListParams{Kind: "review.part", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(js)
	}
	before := parts()
	var again apiReview
	a.call("POST", "/v1/reviews", a.acme, body, idem, 202, &again)
	if again.ID != rv.ID || again.State != "published" {
		t.Fatalf("replay answered %+v, want review %s", again, rv.ID)
	}
	if after := parts(); after != before {
		t.Fatalf("the replay inserted %d part jobs", after-before)
	}

	// Job payloads carry references, never the diff.
	js, err := a.c.List(ctx, "us", ratelane.ListParams{Tenant: "acme", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		full, err := a.c.Job(ctx, "us", j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(full.Payload, []byte("AKIAQWERTYUIOPASDFGH")) {
			t.Fatalf("job %s (%s) carries the diff in its payload", j.ID, j.Kind)
		}
	}

	// Refusals: a region without reviews, a diff that does not parse, an unknown provider.
	var p problem
	eu := map[string]any{"region": "eu", "diff": testkit.AWSKeyDiff}
	a.call("POST", "/v1/reviews", a.acme, eu, nil, 501, &p)
	if !strings.HasSuffix(p.Type, "/reviews-not-configured") || !strings.Contains(p.Detail, "eu") {
		t.Fatalf("eu problem %+v", p)
	}
	a.call("GET", "/v1/reviews/"+rv.ID+"?region=eu", a.acme, nil, nil, 501, nil)
	a.call("POST", "/v1/reviews", a.acme, map[string]any{"region": "us", "diff": "not a diff"}, nil, 400, &p)
	if len(p.Errors) != 1 || p.Errors[0].Field != "diff" {
		t.Fatalf("bad diff problem %+v", p)
	}
	a.call("POST", "/v1/reviews", a.acme, map[string]any{"region": "us", "diff": testkit.AWSKeyDiff, "provider": "gpt-9"}, nil, 400, &p)
	if len(p.Errors) != 1 || p.Errors[0].Field != "provider" {
		t.Fatalf("unknown provider problem %+v", p)
	}
	a.call("POST", "/v1/reviews", a.acme, map[string]any{"region": "us", "diff": testkit.AWSKeyDiff,
		"publish": map[string]any{"kind": "rdjsonl", "target": "out.jsonl"}}, nil, 400, &p)
	if len(p.Errors) != 1 || p.Errors[0].Field != "publish" {
		t.Fatalf("rdjsonl problem %+v", p)
	}
}

// TestReviewHTTPDocumentedExample sends the createReview example of GET /v1
// to a real server: its inline diff parses and the rules provider finds
// the TODO it adds.
func TestReviewHTTPDocumentedExample(t *testing.T) {
	t.Parallel()
	a := newReviewAPI(t)
	var d struct {
		Capabilities []struct {
			Name    string `json:"name"`
			Example string `json:"example"`
		} `json:"capabilities"`
	}
	a.call("GET", "/v1", "", nil, nil, 200, &d)
	var body map[string]any
	for _, c := range d.Capabilities {
		if c.Name == "createReview" {
			_, js, ok := strings.Cut(c.Example, " -d '")
			if !ok || json.Unmarshal([]byte(strings.TrimSuffix(js, "'")), &body) != nil {
				t.Fatalf("example %s", c.Example)
			}
		}
	}
	if body == nil {
		t.Fatal("no createReview capability")
	}
	body["region"] = "us" // the example names the server's first region, eu, which has no reviews here
	var rv apiReview
	a.call("POST", "/v1/reviews", a.acme, body, nil, 202, &rv)
	a.waitPublished(t, &rv)
	if len(rv.Result.Findings) != 1 || rv.Result.Findings[0].Path != "app.go" || rv.Result.Findings[0].Line != 3 ||
		rv.Result.Findings[0].Category != "maintainability" {
		t.Fatalf("example review %+v", rv.Result)
	}
}

// TestReviewHTTPList: GET /v1/reviews lists a tenant's own reviews newest
// first (never another tenant's, never the parts), pages with next_cursor
// as GET /v1/jobs does, filters by state and region, lets an admin see
// every tenant, and refuses a foreign tenant filter and a bad limit.
func TestReviewHTTPList(t *testing.T) {
	t.Parallel()
	a := newReviewAPI(t)
	submit := func(key, change string) string {
		var rv apiReview
		a.call("POST", "/v1/reviews", key, map[string]any{"region": "us", "repo": "acme/app", "change": change, "diff": testkit.AWSKeyDiff, "provider": "rules"}, nil, 202, &rv)
		return rv.ID
	}
	first, second := submit(a.acme, "1"), submit(a.acme, "2")
	theirs := submit(a.globex, "3")

	type list struct {
		Reviews []struct {
			ID, Tenant, Region, State, Repo, Change string
			Parts                                   struct{ Total, Succeeded, Failed, Pending int }
			Findings, Quarantined                   *int
		} `json:"reviews"`
		NextCursor string `json:"next_cursor"`
	}
	var l list
	a.call("GET", "/v1/reviews", a.acme, nil, nil, 200, &l)
	if len(l.Reviews) != 2 || l.Reviews[0].ID != second || l.Reviews[1].ID != first || l.NextCursor != "" {
		t.Fatalf("acme's list: %+v", l)
	}
	if r := l.Reviews[0]; r.Tenant != "acme" || r.Region != "us" || r.Repo != "acme/app" || r.Change != "2" || r.Parts.Total < 1 {
		t.Fatalf("summary: %+v", r)
	}
	// Each summary counts its parts, and once aggregated its findings, as
	// the review's own GET does: running ones from their parts, finished
	// ones from their result.
	testkit.Eventually(t, testkit.Timeout, "acme's reviews to be aggregated", func() error {
		a.call("GET", "/v1/reviews", a.acme, nil, nil, 200, &l)
		for _, r := range l.Reviews {
			if r.Parts.Pending+r.Parts.Succeeded+r.Parts.Failed > r.Parts.Total || r.Parts.Total < 1 {
				t.Fatalf("summary parts of %s: %+v", r.ID, r.Parts)
			}
			if (r.Findings == nil) != (r.State == "accepted") {
				t.Fatalf("summary of %s in state %s: findings %v", r.ID, r.State, r.Findings)
			}
			if r.Findings == nil {
				return fmt.Errorf("review %s is %s, parts %+v", r.ID, r.State, r.Parts)
			}
		}
		return nil
	})
	for _, r := range l.Reviews {
		var rv apiReview
		a.call("GET", "/v1/reviews/"+r.ID, a.acme, nil, nil, 200, &rv)
		if rv.Result == nil || *r.Findings != len(rv.Result.Findings) || *r.Findings != 1 || *r.Quarantined != len(rv.Result.Quarantined) ||
			r.Parts.Total != rv.Parts.Total || r.Parts.Succeeded != rv.Parts.Succeeded || r.Parts.Pending != 0 {
			t.Fatalf("summary %+v (findings %d, quarantined %d) disagrees with the review %+v", r, *r.Findings, *r.Quarantined, rv)
		}
	}
	// One per page: the cursor leads to the older review, then ends.
	a.call("GET", "/v1/reviews?limit=1", a.acme, nil, nil, 200, &l)
	if len(l.Reviews) != 1 || l.Reviews[0].ID != second || l.NextCursor != second {
		t.Fatalf("page 1: %+v", l)
	}
	a.call("GET", "/v1/reviews?limit=1&after="+l.NextCursor, a.acme, nil, nil, 200, &l)
	if len(l.Reviews) != 1 || l.Reviews[0].ID != first {
		t.Fatalf("page 2: %+v", l)
	}
	// Filters: region eu has no reviews; a state no review is in lists none.
	a.call("GET", "/v1/reviews?region=eu", a.acme, nil, nil, 200, &l)
	if len(l.Reviews) != 0 {
		t.Fatalf("eu: %+v", l)
	}
	a.call("GET", "/v1/reviews?state=terminal", a.acme, nil, nil, 200, &l)
	if len(l.Reviews) != 0 {
		t.Fatalf("terminal: %+v", l)
	}
	// An admin sees every tenant's, or one tenant's.
	const admin = reviewAdminKey
	a.call("GET", "/v1/reviews?tenant=globex", admin, nil, nil, 200, &l)
	if len(l.Reviews) != 1 || l.Reviews[0].ID != theirs {
		t.Fatalf("admin, globex: %+v", l)
	}
	a.call("GET", "/v1/reviews", admin, nil, nil, 200, &l)
	if len(l.Reviews) != 3 {
		t.Fatalf("admin: %+v", l)
	}
	// Refusals, as problem+json naming what to fix.
	for path, want := range map[string]int{
		"/v1/reviews?tenant=globex":    403,
		"/v1/reviews?limit=0":          400,
		"/v1/reviews?state=sleeping":   400,
		"/v1/reviews?region=mars":      400,
		"/v1/reviews?kind=review.part": 400,
	} {
		resp := a.call("GET", path, a.acme, nil, nil, want, nil)
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", path, ct)
		}
	}
}

// TestReviewHTTPListRunning: a review whose parts have not run (nothing
// works them: the client is never started) is listed accepted with its
// parts pending, counted from its part jobs, and without findings counts.
func TestReviewHTTPListRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}}
	rules, err := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	reviews := withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{rules}})
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := reviews.Submit(ctx, review.Request{Region: "us", Tenant: "acme", Diff: []byte(testkit.AWSKeyDiff), Depth: "full"})
	if err != nil || sub.Parts.Total < 1 {
		t.Fatalf("submit: %v, %+v", err, sub)
	}
	api, err := c.NewAPI(ctx, ratelane.APIConfig{AdminKey: reviewAdminKey, RequestRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	srv := httptest.NewServer(api.Handler)
	defer srv.Close()

	resp, raw := callJSON(t, "GET", srv.URL, "/v1/reviews", reviewAdminKey, nil, nil)
	var l struct {
		Reviews []map[string]json.RawMessage `json:"reviews"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &l) != nil || len(l.Reviews) != 1 {
		t.Fatalf("list: %d %s", resp.StatusCode, raw)
	}
	r := l.Reviews[0]
	var parts struct{ Total, Succeeded, Failed, Pending int }
	if err := json.Unmarshal(r["parts"], &parts); err != nil || string(r["state"]) != `"accepted"` ||
		parts.Total != sub.Parts.Total || parts.Pending != parts.Total || parts.Succeeded+parts.Failed != 0 {
		t.Fatalf("running review listed as %s (parts %+v, %v)", raw, parts, err)
	}
	if _, ok := r["findings"]; ok {
		t.Fatalf("a running review lists a findings count: %s", raw)
	}
	if _, ok := r["quarantined"]; ok {
		t.Fatalf("a running review lists a quarantined count: %s", raw)
	}
}
