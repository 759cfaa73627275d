package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/batchapi"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/review/report"
	"github.com/ratelane/ratelane/internal/review/reviewapi"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
)

// Review is the routes' review, as these tests name it.
type Review = reviewapi.Review

// fakeReviews is an in-memory reviewapi.Service for the regions in configured.
type fakeReviews struct {
	mu         sync.Mutex
	configured map[string]bool
	reviews    map[string]*Review // by id
	idem       map[string]string  // tenant + "\x00" + key -> id
	diffs      map[string][]byte  // what SubmitReview was given, by id
	n          int
}

func newFakeReviews(regions ...string) *fakeReviews {
	f := &fakeReviews{configured: map[string]bool{}, reviews: map[string]*Review{}, idem: map[string]string{}, diffs: map[string][]byte{}}
	for _, r := range regions {
		f.configured[r] = true
	}
	return f
}

func (f *fakeReviews) SubmitReview(_ context.Context, sub reviewapi.Submission) (Review, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.configured[sub.Region] {
		return Review{}, fmt.Errorf("ratelane: %w: %q", reviewapi.ErrNotConfigured, sub.Region)
	}
	switch {
	case sub.Provider == "store-down":
		return Review{}, fmt.Errorf("insert review: database is locked")
	case sub.Provider != "" && sub.Provider != "rules":
		return Review{}, &reviewapi.InputError{Field: "provider", Err: fmt.Errorf("no review provider %q in region %q", sub.Provider, sub.Region)}
	case !bytes.HasPrefix(sub.Diff, []byte("diff --git ")) && !bytes.HasPrefix(sub.Diff, []byte("--- ")):
		return Review{}, &reviewapi.InputError{Field: "diff", Err: errors.New("parse diff: no file diff in the input")}
	}
	if sub.IdempotencyKey != "" {
		if id, ok := f.idem[sub.Tenant+"\x00"+sub.IdempotencyKey]; ok {
			return *f.reviews[id], nil
		}
	}
	f.n++
	id := fmt.Sprintf("rv-%d", f.n)
	rv := &Review{ID: id, Region: sub.Region, Tenant: sub.Tenant, State: job.StateAccepted, Repo: sub.Repo, Change: sub.Change,
		DepthRequested: sub.Depth, Depth: pipeline.DepthFull, Provider: "rules", Publish: sub.Publish,
		Parts: pipeline.Progress{Total: 1, Pending: 1}, CreatedAt: t0, UpdatedAt: t0}
	f.reviews[id] = rv
	f.diffs[id] = sub.Diff
	if sub.IdempotencyKey != "" {
		f.idem[sub.Tenant+"\x00"+sub.IdempotencyKey] = id
	}
	return *rv, nil
}

func (f *fakeReviews) Review(_ context.Context, region, id string) (Review, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.configured[region] {
		return Review{}, fmt.Errorf("ratelane: %w: %q", reviewapi.ErrNotConfigured, region)
	}
	rv, ok := f.reviews[id]
	if !ok || rv.Region != region {
		return Review{}, store.ErrNotFound
	}
	return *rv, nil
}

func (f *fakeReviews) ReviewSARIF(ctx context.Context, region, id string, w io.Writer) error {
	rv, err := f.Review(ctx, region, id)
	if err != nil {
		return err
	}
	return report.WriteSARIF(w, "test", rv.Result.Findings)
}

func (f *fakeReviews) Providers(_ context.Context, region string) ([]reviewapi.ProviderInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.configured[region] {
		return nil, fmt.Errorf("ratelane: %w: %q", reviewapi.ErrNotConfigured, region)
	}
	return []reviewapi.ProviderInfo{{Name: "rules", Kind: "rules", Region: region, Default: true, RequestsKey: "rules:local",
		MaxOutputTokens: 2048}}, nil
}

// Progress answers the parts of a review the fake made, and no parts for
// another review job of the store.
func (f *fakeReviews) Progress(_ context.Context, parent *job.Job) (pipeline.Progress, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rv, ok := f.reviews[parent.ID]; ok {
		return rv.Parts, nil
	}
	return pipeline.Progress{}, nil
}

// finish aggregates a review with one finding and one quarantined one.
func (f *fakeReviews) finish(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv := f.reviews[id]
	fd := finding.Finding{Path: "app.go", Line: 3, Severity: finding.SeverityInfo, Category: finding.CategoryMaintainability,
		Message: "A TODO was added.", Evidence: "// TODO: handle retries", Confidence: 0.9}
	bad := fd
	bad.Line = 99
	rv.State, rv.Parts = job.StatePublished, pipeline.Progress{Total: 1, Succeeded: 1}
	rv.Result = &pipeline.Result{SchemaVersion: "v1", Depth: pipeline.DepthFull, Parts: rv.Parts,
		Findings:    []finding.Finding{fd},
		Quarantined: []pipeline.Quarantined{{Finding: bad, Reason: finding.ReasonLineNotInDiff}},
		Usage:       provider.Usage{InputTokens: 120, OutputTokens: 40}}
}

// withReviews serves the review endpoints over f, and the batch
// endpoints over a fake batch service in f's regions, as the review
// plug-in mounts both.
func withReviews(f *fakeReviews) func(*Config) {
	var regions []string
	for r := range f.configured {
		regions = append(regions, r)
	}
	return func(c *Config) {
		c.Mounts = append(c.Mounts, reviewapi.Routes(f), batchapi.Routes(newFakeBatches(regions...)))
	}
}

func newReviewEnv(t *testing.T, tweak ...func(*Config)) (*env, *fakeReviews) {
	t.Helper()
	f := newFakeReviews("us", "eu")
	return newEnv(t, append([]func(*Config){withReviews(f)}, tweak...)...), f
}

const testDiff = "diff --git a/app.go b/app.go\n--- a/app.go\n+++ b/app.go\n@@ -1,2 +1,3 @@\n package app\n+// TODO: handle retries\n \n"

func reviewBody(region string) map[string]any {
	return map[string]any{"region": region, "repo": "acme/app", "change": "42", "diff": testDiff}
}

func (e *env) submitReview(key string, body map[string]any, hdr ...string) Review {
	e.t.Helper()
	var rv Review
	e.do("POST", "/v1/reviews", key, body, hdr...).want(e.t, 202).json(e.t, &rv)
	return rv
}

// reviewExampleVars prepares what one review capability's example needs.
func (e *env) reviewExampleVars(c capability, f *fakeReviews) map[string]string {
	e.t.Helper()
	vars := map[string]string{"RATELANE_URL": e.hs.URL, "RATELANE_API_KEY": acmeKey}
	if c.Name != "createReview" {
		rv := e.submitReview(acmeKey, reviewBody(e.srv.regions[0]))
		f.finish(rv.ID)
		vars["REVIEW_ID"] = rv.ID
	}
	return vars
}

// TestReviewRoutesDocumented checks the review endpoints as the shared docs
// tests check the others: the OpenAPI document is valid and lists exactly
// the served routes, and every example runs and matches it.
func TestReviewRoutesDocumented(t *testing.T) {
	t.Parallel()
	e, f := newReviewEnv(t)
	v := e.documentedRoutes(t)
	n := 0
	for _, c := range e.capabilities() {
		if !strings.HasPrefix(c.Path, "/v1/reviews") {
			continue
		}
		n++
		req := parseCurlT(t, c.Example, e.reviewExampleVars(c, f))
		e.sendValidated(t, v, c.Name, req)
	}
	if n != 5 {
		t.Fatalf("%d review capabilities, want 5 (create, list, get, sarif, providers)", n)
	}
	// The example's diff reaches the service as a real multi-line diff.
	for id, d := range f.diffs {
		if !strings.Contains(string(d), "\n+// TODO: handle retries\n") {
			t.Fatalf("review %s got diff %q", id, d)
		}
	}
}

// TestReviewProviders: the listing merges the key's regions, one region
// when named; a region without reviews is skipped unless named (501), and
// a region the key may not use is refused like any other route's.
func TestReviewProviders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withReviews(newFakeReviews("us")))
	var list struct {
		Providers []reviewapi.ProviderInfo `json:"providers"`
	}
	e.do("GET", "/v1/reviews/providers", adminKey, nil).want(t, 200).json(t, &list)
	if len(list.Providers) != 1 || list.Providers[0].Region != "us" || !list.Providers[0].Default {
		t.Fatalf("providers = %+v, want us's rules only (eu has no reviews)", list.Providers)
	}
	e.do("GET", "/v1/reviews/providers?region=us", acmeKey, nil).want(t, 200)
	e.do("GET", "/v1/reviews/providers?region=eu", adminKey, nil).wantProblem(t, 501, "reviews-not-configured")
	e.do("GET", "/v1/reviews/providers?region=us", euKey, nil).want(t, 403)
	e.do("GET", "/v1/reviews/providers", "", nil).want(t, 401)
}

// TestReviewsNotServedWithoutService: no review mount, no routes.
func TestReviewsNotServedWithoutService(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/reviews", acmeKey, reviewBody("us")).wantProblem(t, 404, "not-found")
	for _, c := range e.capabilities() {
		if strings.HasPrefix(c.Path, "/v1/reviews") {
			t.Fatalf("%s listed without a ReviewService", c.Path)
		}
	}
}

// TestReviewSubmitAndGet walks a review: 202 with Location, the key's
// tenant, GET by id with and without region, SARIF once aggregated, and
// the tenancy and region rules of jobs.
func TestReviewSubmitAndGet(t *testing.T) {
	t.Parallel()
	e, f := newReviewEnv(t)
	body := reviewBody("us")
	body["depth"], body["lane"], body["provider"] = "fast", "batch", "rules"
	body["publish"] = map[string]any{"kind": "webhook", "target": "ci"}
	body["tenant"] = "globex" // ignored for producers, as for jobs
	r := e.do("POST", "/v1/reviews", acmeKey, body).want(t, 202)
	var rv Review
	r.json(t, &rv)
	if rv.Tenant != "acme" || rv.State != job.StateAccepted || rv.DepthRequested != "fast" || rv.Publish.Kind != "webhook" || rv.Result != nil {
		t.Fatalf("submitted %+v", rv)
	}
	if loc := r.header.Get("Location"); loc != "/v1/reviews/"+rv.ID+"?region=us" {
		t.Fatalf("Location %q", loc)
	}
	if got := string(f.diffs[rv.ID]); got != testDiff {
		t.Fatalf("service got diff %q", got)
	}

	// Admins may name the tenant; defaults fill in.
	admin := e.submitReview(adminKey, map[string]any{"region": "us", "diff": testDiff, "tenant": "globex"})
	if admin.Tenant != "globex" || admin.DepthRequested != "auto" || admin.Publish.Kind != "none" {
		t.Fatalf("admin submission %+v", admin)
	}

	// Before aggregation: no result, SARIF is a 409.
	var got Review
	e.do("GET", "/v1/reviews/"+rv.ID, acmeKey, nil).want(t, 200).json(t, &got)
	if got.ID != rv.ID || got.Result != nil {
		t.Fatalf("got %+v", got)
	}
	e.do("GET", "/v1/reviews/"+rv.ID+"/sarif", acmeKey, nil).wantProblem(t, 409, "conflict")

	f.finish(rv.ID)
	e.do("GET", "/v1/reviews/"+rv.ID+"?region=us", acmeKey, nil).want(t, 200).json(t, &got)
	if got.State != job.StatePublished || got.Result == nil || len(got.Result.Findings) != 1 || len(got.Result.Quarantined) != 1 ||
		got.Result.Quarantined[0].Reason != finding.ReasonLineNotInDiff || got.Result.Usage.InputTokens != 120 {
		t.Fatalf("aggregated %+v", got)
	}
	sr := e.do("GET", "/v1/reviews/"+rv.ID+"/sarif", acmeKey, nil).want(t, 200)
	if ct := sr.header.Get("Content-Type"); ct != "application/sarif+json" {
		t.Fatalf("SARIF Content-Type %q", ct)
	}
	var sarif struct {
		Version string `json:"version"`
		Runs    []struct {
			Results []struct {
				RuleID string `json:"ruleId"`
			} `json:"results"`
		} `json:"runs"`
	}
	sr.json(t, &sarif)
	if sarif.Version != "2.1.0" || len(sarif.Runs) != 1 || len(sarif.Runs[0].Results) != 1 {
		t.Fatalf("SARIF %s", sr.body)
	}

	// Tenancy: another tenant's review is a 404, like a missing one; admins see it.
	for _, path := range []string{"/v1/reviews/" + rv.ID, "/v1/reviews/" + rv.ID + "/sarif", "/v1/reviews/" + rv.ID + "?region=us"} {
		e.do("GET", path, globexKey, nil).wantProblem(t, 404, "not-found")
	}
	e.do("GET", "/v1/reviews/"+rv.ID, adminKey, nil).want(t, 200)
	e.do("GET", "/v1/reviews/nope", acmeKey, nil).wantProblem(t, 404, "not-found")
	e.do("GET", "/v1/reviews/"+strings.Repeat("x", 65), acmeKey, nil).wantProblem(t, 404, "not-found")

	// Regions: an EU-only key may not name us (403) and does not find the us review.
	e.do("GET", "/v1/reviews/"+rv.ID+"?region=us", euKey, nil).wantProblem(t, 403, "region-forbidden")
	e.do("POST", "/v1/reviews", euKey, reviewBody("us")).wantProblem(t, 403, "region-forbidden")
	e.do("GET", "/v1/reviews/"+rv.ID, euKey, nil).wantProblem(t, 404, "not-found")

	// Roles: workers may not submit or read reviews.
	e.do("POST", "/v1/reviews", workerKey, reviewBody("us")).wantProblem(t, 403, "forbidden")
	e.do("GET", "/v1/reviews/"+rv.ID, workerKey, nil).wantProblem(t, 403, "forbidden")
	e.do("GET", "/v1/reviews/"+rv.ID, "", nil).wantProblem(t, 401, "unauthenticated")
}

// TestReviewValidation: every refusal is a problem naming what to fix.
func TestReviewValidation(t *testing.T) {
	t.Parallel()
	e, _ := newReviewEnv(t)
	with := func(k string, v any) map[string]any {
		b := reviewBody("us")
		if v == nil {
			delete(b, k)
		} else {
			b[k] = v
		}
		return b
	}
	cases := []struct {
		name  string
		body  any
		field string
	}{
		{"no region", with("region", nil), "region"},
		{"unknown region", with("region", "mars"), "region"},
		{"no diff", with("diff", nil), "diff"},
		{"empty diff", with("diff", ""), "diff"},
		{"bad depth", with("depth", "deep"), "depth"},
		{"bad lane", with("lane", "express"), "lane"},
		{"bad publish", with("publish", map[string]any{"kind": "email"}), "publish.kind"},
		{"unknown provider", with("provider", "gpt-9"), "provider"},
		{"not a diff", with("diff", "hello"), "diff"},
		{"long repo", with("repo", strings.Repeat("r", 201)), "repo"},
		{"newline in change", with("change", "4\n2"), "change"},
	}
	for _, c := range cases {
		p := e.do("POST", "/v1/reviews", acmeKey, c.body).wantProblem(t, 400, "invalid-request")
		if len(p.Errors) != 1 || p.Errors[0].Field != c.field {
			t.Errorf("%s: errors %+v, want field %s", c.name, p.Errors, c.field)
		}
	}
	e.do("POST", "/v1/reviews", acmeKey, with("diffs", "x")).wantProblem(t, 400, "unknown-field")
	e.do("POST", "/v1/reviews", acmeKey, `{"region":"us"`).wantProblem(t, 400, "malformed-json")
	e.do("POST", "/v1/reviews", acmeKey, `{"region":"us","diff":"x"} {}`).wantProblem(t, 400, "malformed-json")
	e.do("POST", "/v1/reviews", acmeKey, testDiff, "Content-Type", "text/x-diff").wantProblem(t, 415, "unsupported-media-type")
	idem := with("idempotency_key", "b")
	e.do("POST", "/v1/reviews", acmeKey, idem, "Idempotency-Key", "a").wantProblem(t, 400, "invalid-request")

	// Size: a diff past 8 MiB is a 413, and so is a body past the reader's limit.
	big := "diff --git a/a b/a\n" + strings.Repeat("a", reviewapi.MaxReviewDiffBytes)
	p := e.do("POST", "/v1/reviews", acmeKey, with("diff", big)).wantProblem(t, 413, "payload-too-large")
	if !strings.Contains(p.Detail, "8 MiB") {
		t.Fatalf("413 detail %q", p.Detail)
	}
	huge := strings.Repeat("\n", reviewapi.MaxReviewBody/2+1) // each newline is two bytes of JSON
	e.do("POST", "/v1/reviews", acmeKey, with("diff", huge)).wantProblem(t, 413, "payload-too-large")
	// A diff just under the limit is accepted: the body limit leaves room for escaping.
	ok := "diff --git a/a b/a\n" + strings.Repeat("+\"x\"\t\n", (reviewapi.MaxReviewDiffBytes-64)/6)
	e.do("POST", "/v1/reviews", acmeKey, with("diff", ok)).want(t, 202)
}

// TestReviewIdempotency: a retry with the same key returns the first
// review; a different request with it is a 422.
func TestReviewIdempotency(t *testing.T) {
	t.Parallel()
	e, f := newReviewEnv(t)
	first := e.submitReview(acmeKey, reviewBody("us"), "Idempotency-Key", "pr-42@abc")
	again := e.submitReview(acmeKey, reviewBody("us"), "Idempotency-Key", "pr-42@abc")
	if again.ID != first.ID || len(f.reviews) != 1 {
		t.Fatalf("replay made review %s (first %s), %d reviews", again.ID, first.ID, len(f.reviews))
	}
	body := reviewBody("us")
	body["change"], body["idempotency_key"] = "43", "pr-42@abc"
	p := e.do("POST", "/v1/reviews", acmeKey, body).wantProblem(t, 422, "idempotency-mismatch")
	if !strings.Contains(p.Detail, "change") {
		t.Fatalf("mismatch detail %q", p.Detail)
	}
	// Keys are per tenant.
	if other := e.submitReview(globexKey, reviewBody("us"), "Idempotency-Key", "pr-42@abc"); other.ID == first.ID {
		t.Fatal("another tenant's key replayed acme's review")
	}
}

// TestReviewsNotConfigured: a region without reviews answers 501 with a
// problem that says so; searching skips such regions.
func TestReviewsNotConfigured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withReviews(newFakeReviews("us")))
	p := e.do("POST", "/v1/reviews", acmeKey, reviewBody("eu")).wantProblem(t, 501, "reviews-not-configured")
	if !strings.Contains(p.Detail, `region eu`) || p.Title == "" {
		t.Fatalf("problem %+v", p)
	}
	rv := e.submitReview(acmeKey, reviewBody("us"))
	e.do("GET", "/v1/reviews/"+rv.ID+"?region=eu", acmeKey, nil).wantProblem(t, 501, "reviews-not-configured")
	e.do("GET", "/v1/reviews/"+rv.ID, acmeKey, nil).want(t, 200)                   // eu skipped
	e.do("GET", "/v1/reviews/nope", acmeKey, nil).wantProblem(t, 404, "not-found") // us searched

	none := newEnv(t, withReviews(newFakeReviews()))
	none.do("GET", "/v1/reviews/x", acmeKey, nil).wantProblem(t, 501, "reviews-not-configured")
}

// TestReviewDiffNeverLogged: neither a refused nor a failed submission
// puts diff content in the server's log.
func TestReviewDiffNeverLogged(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	e, _ := newReviewEnv(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	const canary = "CANARY-7f3e1b"
	diff := strings.Replace(testDiff, "TODO: handle retries", canary, 1)
	body := reviewBody("us")
	body["diff"] = diff
	e.submitReview(acmeKey, body)
	body["provider"] = "store-down"
	e.do("POST", "/v1/reviews", acmeKey, body).wantProblem(t, 500, "internal")
	body["provider"], body["depth"] = "rules", "deep"
	e.do("POST", "/v1/reviews", acmeKey, body).wantProblem(t, 400, "invalid-request")
	if strings.Contains(logs.String(), canary) {
		t.Fatalf("the diff reached the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "database is locked") {
		t.Fatalf("the 500 was not logged:\n%s", logs.String())
	}
}
