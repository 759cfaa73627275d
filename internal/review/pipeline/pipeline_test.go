package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/provider"
)

const testDiff = `diff --git a/app.go b/app.go
--- a/app.go
+++ b/app.go
@@ -1,3 +1,6 @@
 package app
 
 func Run() {
+	// TODO: remove CANARY-pipeline-test
+	fmt.Println("debug")
+	_ = save()
 }
diff --git a/lib.go b/lib.go
new file mode 100644
--- /dev/null
+++ b/lib.go
@@ -0,0 +1,2 @@
+package lib
+var id = "AKIAQWERTYUIOPAS1234"
`

func TestResolveDepth(t *testing.T) {
	tests := []struct {
		req        string
		wait, budg time.Duration
		want       string
		wantErr    bool
	}{
		{"full", time.Hour, time.Second, DepthFull, false},
		{"fast", 0, time.Second, DepthFast, false},
		{"auto", 2 * time.Second, time.Second, DepthFast, false},
		{"auto", time.Second, time.Second, DepthFull, false}, // equal is within budget
		{"auto", 0, time.Second, DepthFull, false},
		{"", 3 * time.Second, time.Second, DepthFast, false},
		{"", 0, time.Second, DepthFull, false},
		{"deep", 0, time.Second, "", true},
		{"FULL", 0, time.Second, "", true},
	}
	for _, tt := range tests {
		got, err := ResolveDepth(tt.req, tt.wait, tt.budg)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ResolveDepth(%q, %v, %v) = %q, %v; want %q, err %v", tt.req, tt.wait, tt.budg, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParsePullTarget(t *testing.T) {
	tests := []struct {
		in          string
		owner, repo string
		number      int
		ok          bool
	}{
		{"acme/app#7", "acme", "app", 7, true},
		{"my-org.io/repo_name.go#12345", "my-org.io", "repo_name.go", 12345, true},
		{"acme/app", "", "", 0, false},
		{"acme#7", "", "", 0, false},
		{"acme/app#", "", "", 0, false},
		{"acme/app#x1", "", "", 0, false},
		{"acme/app#-1", "", "", 0, false},
		{"/app#7", "", "", 0, false},
		{"acme/app/extra#7", "", "", 0, false},
		{" acme/app#7", "", "", 0, false},
		{"acme/app#7\n", "", "", 0, false},
		{"", "", "", 0, false},
	}
	for _, tt := range tests {
		owner, repo, n, err := ParsePullTarget(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParsePullTarget(%q) err = %v, want ok %v", tt.in, err, tt.ok)
			continue
		}
		if tt.ok && (owner != tt.owner || repo != tt.repo || n != tt.number) {
			t.Errorf("ParsePullTarget(%q) = %q, %q, %d", tt.in, owner, repo, n)
		}
	}
	// A number too large for an int matches the pattern but is an error.
	if _, _, _, err := ParsePullTarget("acme/app#99999999999999999999999"); err == nil {
		t.Error("an overflowing pull number parsed")
	}
}

func fnd(path string, line int, sev finding.Severity, cat finding.Category, msg string) finding.Finding {
	return finding.Finding{Path: path, Line: line, Severity: sev, Category: cat, Message: msg, Evidence: "x", Confidence: 0.5}
}

func TestFingerprint(t *testing.T) {
	base := fnd("a.go", 3, finding.SeverityError, finding.CategoryBug, "nil deref")
	fp := Fingerprint(base)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(fp) {
		t.Fatalf("fingerprint %q is not 32 hex digits", fp)
	}
	if Fingerprint(base) != fp {
		t.Fatal("fingerprint is not deterministic")
	}
	// What identifies a finding across runs changes it...
	for name, f := range map[string]finding.Finding{
		"path":     fnd("b.go", 3, finding.SeverityError, finding.CategoryBug, "nil deref"),
		"line":     fnd("a.go", 4, finding.SeverityError, finding.CategoryBug, "nil deref"),
		"category": fnd("a.go", 3, finding.SeverityError, finding.CategorySecurity, "nil deref"),
		"message":  fnd("a.go", 3, finding.SeverityError, finding.CategoryBug, "nil deref!"),
		// The separator keeps ("a.go", 31) apart from ("a.go3", 1).
		"boundary": fnd("a.go3", 1, finding.SeverityError, finding.CategoryBug, "nil deref"),
	} {
		if Fingerprint(f) == fp {
			t.Errorf("changing the %s keeps the fingerprint", name)
		}
	}
	if Fingerprint(fnd("a.go", 31, finding.SeverityError, finding.CategoryBug, "x")) == Fingerprint(fnd("a.go3", 1, finding.SeverityError, finding.CategoryBug, "x")) {
		t.Error("path/line boundary is ambiguous")
	}
	// ...what a re-run may vary does not.
	other := base
	other.Severity, other.Confidence, other.Evidence = finding.SeverityInfo, 0.99, "y"
	s := "use a guard"
	other.Suggestion = &s
	if Fingerprint(other) != fp {
		t.Error("severity, confidence, evidence or suggestion changed the fingerprint")
	}
}

func TestNewCommentsSkipsPostedAndCarriesFingerprint(t *testing.T) {
	end := 6
	sugg := "check it"
	multi := fnd("a.go", 4, finding.SeverityWarning, finding.CategoryBug, "range")
	multi.EndLine, multi.Suggestion = &end, &sugg
	same := 9
	oneLine := fnd("a.go", 9, finding.SeverityInfo, finding.CategoryStyle, "style")
	oneLine.EndLine = &same
	posted := fnd("b.go", 1, finding.SeverityError, finding.CategorySecurity, "secret")
	seen := map[string]bool{Fingerprint(posted): true}

	cs := newComments([]finding.Finding{multi, posted, oneLine, multi}, seen)
	if len(cs) != 2 {
		t.Fatalf("comments = %+v, want 2 (posted one skipped, duplicate skipped)", cs)
	}
	if c := cs[0]; c.Path != "a.go" || c.Line != 6 || c.StartLine != 4 || c.Side != "RIGHT" || c.StartSide != "RIGHT" {
		t.Errorf("multi-line comment = %+v, want lines 4-6 on RIGHT", c)
	}
	if c := cs[1]; c.Line != 9 || c.StartLine != 0 || c.StartSide != "" {
		t.Errorf("single-line comment with end_line = line: %+v", c)
	}
	for i, f := range []finding.Finding{multi, oneLine} {
		m := fingerprintRE.FindStringSubmatch(cs[i].Body)
		if m == nil || m[1] != Fingerprint(f) {
			t.Errorf("comment %d body %q lacks the hidden fingerprint", i, cs[i].Body)
		}
	}
	if !strings.Contains(cs[0].Body, "**warning** (bug): range") || !strings.Contains(cs[0].Body, "Suggestion: check it") {
		t.Errorf("body = %q", cs[0].Body)
	}
	if !seen[Fingerprint(multi)] || !seen[Fingerprint(oneLine)] {
		t.Error("new fingerprints are not recorded in seen")
	}
}

func TestClassifyGitHub(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	reset := strconv.FormatInt(now.Add(30*time.Second).Unix(), 10)
	tests := []struct {
		name   string
		status int
		h      http.Header
		body   string
		class  job.Class
		after  time.Duration
		source string
	}{
		{"ok", 200, nil, `{}`, job.ClassSuccess, 0, ""},
		{"created", 201, nil, `{}`, job.ClassSuccess, 0, ""},
		{"429 retry-after", 429, h("Retry-After", "5"), ``, job.ClassRateLimited, 5 * time.Second, "retry-after"},
		{"429 bare", 429, nil, ``, job.ClassRateLimited, time.Minute, "github secondary limit"},
		{"403 primary", 403, h("x-ratelimit-remaining", "0", "x-ratelimit-reset", reset, "x-ratelimit-limit", "5000"), `{"message":"API rate limit exceeded"}`,
			job.ClassRateLimited, 30 * time.Second, "x-ratelimit-reset"},
		{"403 secondary message", 403, nil, `{"message":"You have exceeded a secondary rate limit."}`, job.ClassRateLimited, time.Minute, "github secondary limit"},
		{"403 secondary retry-after", 403, h("Retry-After", "7"), ``, job.ClassRateLimited, 7 * time.Second, "retry-after"},
		{"403 forbidden", 403, h("x-ratelimit-remaining", "4999"), `{"message":"Resource not accessible by integration"}`, job.ClassPermanent, 0, ""},
		{"404", 404, nil, ``, job.ClassPermanent, 0, ""},
		{"422", 422, nil, `{"message":"Validation Failed"}`, job.ClassPermanent, 0, ""},
		{"500", 500, nil, ``, job.ClassTransient, 0, ""},
		{"502", 502, nil, ``, job.ClassTransient, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ClassifyGitHub(tt.status, tt.h, []byte(tt.body), now)
			if o.Class != tt.class || o.Status != tt.status {
				t.Fatalf("class = %s (status %d), want %s", o.Class, o.Status, tt.class)
			}
			if o.RetryAfter != tt.after || o.RetrySource != tt.source {
				t.Errorf("retry after %v (%q), want %v (%q)", o.RetryAfter, o.RetrySource, tt.after, tt.source)
			}
		})
	}
	o := ClassifyGitHub(200, h("x-ratelimit-limit", "5000", "x-ratelimit-remaining", "12", "x-ratelimit-reset", reset), nil, now)
	if len(o.Hints) != 1 || o.Hints[0] != (job.Hint{Key: GitHubKey, Limit: 5000, Remaining: 12, Reset: 30 * time.Second}) {
		t.Errorf("hints = %+v", o.Hints)
	}
	if o := ClassifyGitHub(200, h("x-ratelimit-limit", "5000"), nil, now); len(o.Hints) != 0 {
		t.Errorf("a partial quota header made hints %+v", o.Hints)
	}
}

// TestClassifyGitHubClockSkew checks that GitHub's absolute times
// (x-ratelimit-reset, an HTTP-date Retry-After) are read against the
// answer's Date, GitHub's clock, not against ours.
func TestClassifyGitHubClockSkew(t *testing.T) {
	local := time.Unix(1_700_000_000, 0)
	h := func(serverSkew, resetIn time.Duration, kv ...string) http.Header {
		server := local.Add(serverSkew)
		out := http.Header{}
		out.Set("Date", server.UTC().Format(http.TimeFormat))
		out.Set("x-ratelimit-limit", "5000")
		out.Set("x-ratelimit-remaining", "0")
		out.Set("x-ratelimit-reset", strconv.FormatInt(server.Add(resetIn).Unix(), 10))
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	tests := []struct {
		name   string
		h      http.Header
		after  time.Duration
		source string
	}{
		{"github ahead 30s", h(30*time.Second, 10*time.Second), 10 * time.Second, "x-ratelimit-reset"},
		{"github behind 30s", h(-30*time.Second, 10*time.Second), 10 * time.Second, "x-ratelimit-reset"},
		{"github ahead 1h", h(time.Hour, 45*time.Second), 45 * time.Second, "x-ratelimit-reset"},
		{"reset in the past on github's clock", h(time.Hour, -5*time.Second), 0, "x-ratelimit-reset"},
		{"http-date retry-after, github ahead", h(30*time.Second, time.Hour,
			"Retry-After", local.Add(30*time.Second+7*time.Second).UTC().Format(http.TimeFormat)), 7 * time.Second, "retry-after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ClassifyGitHub(http.StatusForbidden, tt.h, []byte(`{"message":"API rate limit exceeded"}`), local)
			if o.Class != job.ClassRateLimited {
				t.Fatalf("class = %s, want rate_limited", o.Class)
			}
			if o.RetryAfter != tt.after || o.RetrySource != tt.source {
				t.Errorf("retry after %v (%q), want %v (%q)", o.RetryAfter, o.RetrySource, tt.after, tt.source)
			}
			if tt.source == "x-ratelimit-reset" && (len(o.Hints) != 1 || o.Hints[0].Reset != tt.after) {
				t.Errorf("hints = %+v, want reset %v", o.Hints, tt.after)
			}
		})
	}
	// Without a Date the local clock is all there is.
	noDate := h(0, 20*time.Second)
	noDate.Del("Date")
	if o := ClassifyGitHub(http.StatusForbidden, noDate, nil, local); o.RetryAfter != 20*time.Second {
		t.Errorf("no Date: retry after %v, want 20s", o.RetryAfter)
	}
}

func testProfile(tokensKey string) provider.Profile {
	return provider.Profile{Name: "rules", Kind: "rules", Region: "eu", TokensKey: tokensKey}
}

func TestNewPlan(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	n := 0
	ids := func() string { n++; return "part-" + strconv.Itoa(n) }
	for _, tc := range []struct {
		name, tokensKey, idem, depth string
	}{
		{"requests", "", "", DepthFull},
		{"tokens", "tpm:m", "idem-1", DepthFast},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Submission{ID: "rev-1", Region: "eu", Tenant: "t1", Lane: job.LaneInteractive, Diff: []byte(testDiff),
				Args:    Args{Repo: "acme/app", DepthRequested: DepthAuto, Depth: tc.depth, Publish: Publish{Kind: PublishNone}},
				Profile: testProfile(tc.tokensKey), MaxPartTokens: 64, IdempotencyKey: tc.idem, Now: now}
			p, err := NewPlan(s, ids)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Parts) < 2 {
				t.Fatalf("%d parts; a 64-token budget should split two files", len(p.Parts))
			}
			if p.Parent.ID != "rev-1" || p.Parent.Kind != KindReview || p.Parent.State != job.StateAccepted || p.Parent.IdempotencyKey != tc.idem {
				t.Errorf("parent = %+v", p.Parent)
			}
			args, _ := decode[Args](p.Parent.Payload)
			if args.Parts != len(p.Parts) || args.DiffObject != "rev-1" || args.Provider != "rules" || args.Depth != tc.depth {
				t.Errorf("parent args = %+v", args)
			}
			if len(p.Objects) != 1+len(p.Parts) || p.Objects[0].Kind != ObjectDiff || p.Objects[0].ID != "rev-1" || !bytes.Equal(p.Objects[0].Body, []byte(testDiff)) {
				t.Fatalf("objects = %d, first %s/%s", len(p.Objects), p.Objects[0].Kind, p.Objects[0].ID)
			}
			keys := map[string]bool{}
			prof := testProfile(tc.tokensKey).WithDefaults()
			for i, pj := range p.Parts {
				pa, err := decode[PartArgs](pj.Payload)
				if err != nil {
					t.Fatal(err)
				}
				obj := p.Objects[1+i]
				if pj.Kind != KindPart || pj.State != job.StateWaiting || pj.ParentID != "rev-1" || pj.Depth != tc.depth ||
					pj.Region != "eu" || pj.Tenant != "t1" || pj.Lane != job.LaneInteractive {
					t.Errorf("part %d = %+v", i, pj)
				}
				if pa.Review != "rev-1" || pa.Index != i || pa.Object != obj.ID || obj.Kind != ObjectPart || obj.ID != "rev-1/"+strconv.Itoa(i) ||
					pa.Provider != "rules" || pa.Depth != tc.depth || pa.EstTokens <= PromptOverheadTokens {
					t.Errorf("part %d args = %+v, object %s/%s", i, pa, obj.Kind, obj.ID)
				}
				if _, err := diff.Parse(obj.Body); err != nil {
					t.Errorf("part %d object does not parse: %v", i, err)
				}
				wantCost := int64(1)
				if tc.tokensKey != "" {
					wantCost = int64(pa.EstTokens + prof.MaxOutputTokens)
				}
				if pj.Cost != wantCost {
					t.Errorf("part %d cost = %d, want %d", i, pj.Cost, wantCost)
				}
				if strings.Join(pj.LimitKeys, ",") != strings.Join(prof.LimitKeys(), ",") {
					t.Errorf("part %d keys = %v, want %v", i, pj.LimitKeys, prof.LimitKeys())
				}
				if tc.idem == "" && pj.IdempotencyKey != "" {
					t.Errorf("part %d has idempotency key %q without a review key", i, pj.IdempotencyKey)
				}
				if tc.idem != "" {
					if pj.IdempotencyKey != partIdempotencyKey(tc.idem, i) || keys[pj.IdempotencyKey] {
						t.Errorf("part %d idempotency key %q", i, pj.IdempotencyKey)
					}
					keys[pj.IdempotencyKey] = true
				}
				// Payloads carry references, never content.
				if bytes.Contains(pj.Payload, []byte("CANARY")) || bytes.Contains(pj.Payload, []byte("AKIA")) {
					t.Errorf("part %d payload holds diff content: %s", i, pj.Payload)
				}
			}
			if bytes.Contains(p.Parent.Payload, []byte("CANARY")) {
				t.Error("parent payload holds diff content")
			}
		})
	}
	if _, err := NewPlan(Submission{ID: "x", Region: "eu", Diff: []byte("not a diff\n"), Profile: testProfile(""), Now: now}, ids); !errors.Is(err, diff.ErrNoFiles) {
		t.Errorf("NewPlan of a non-diff: %v, want ErrNoFiles", err)
	}
	// The same review key gives the same part keys (a replay dedupes);
	// another review key gives other keys.
	first, again := partIdempotencyKey("k", 0), partIdempotencyKey("k", 0)
	if first != again || first == partIdempotencyKey("k", 1) ||
		first == partIdempotencyKey("k2", 0) || len(partIdempotencyKey(strings.Repeat("k", 10000), 99)) > 64 {
		t.Error("part idempotency keys are not derived per review and index within a bounded length")
	}
}

func partJob(id string, idx int, state job.State, reason job.Reason, res *PartResult) *job.Job {
	j := &job.Job{ID: id, Kind: KindPart, State: state, Reason: reason}
	j.Payload, _ = json.Marshal(PartArgs{Index: idx})
	if res != nil {
		j.Result, _ = json.Marshal(res)
	}
	return j
}

func TestBuild(t *testing.T) {
	a := fnd("a.go", 3, finding.SeverityWarning, finding.CategoryBug, "w")
	aErr := fnd("a.go", 3, finding.SeverityError, finding.CategoryBug, "e") // same key, more severe
	b := fnd("b.go", 1, finding.SeverityInfo, finding.CategoryStyle, "i")
	q := Quarantined{Finding: fnd("a.go", 99, finding.SeverityError, finding.CategoryBug, "x"), Reason: finding.ReasonLineNotInDiff}
	parts := []*job.Job{
		partJob("p0", 0, job.StatePublished, "", &PartResult{Findings: []finding.Finding{a, b}, Quarantined: []Quarantined{q},
			Usage: provider.Usage{InputTokens: 100, OutputTokens: 10}}),
		partJob("p1", 1, job.StatePublished, "", &PartResult{Findings: []finding.Finding{aErr}, Usage: provider.Usage{InputTokens: 50, OutputTokens: 5}}),
		partJob("p2", 2, job.StateTerminal, job.ReasonPermanentError, nil),
		partJob("p3", 3, job.StateRunning, "", nil),
	}
	res, err := Build(Args{Depth: DepthFast, Parts: 5}, parts, finding.AggregateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Parts != (Progress{Total: 5, Succeeded: 2, Failed: 1, Pending: 1}) || !res.Partial || res.Depth != DepthFast || res.SchemaVersion != "v1" {
		t.Errorf("result = %+v", res)
	}
	if len(res.FailedParts) != 1 || res.FailedParts[0] != (PartFailure{Index: 2, JobID: "p2", Reason: string(job.ReasonPermanentError)}) {
		t.Errorf("failed parts = %+v", res.FailedParts)
	}
	if len(res.Findings) != 2 || res.Findings[0].Message != "e" || res.Findings[1].Path != "b.go" {
		t.Errorf("findings = %+v, want the error on a.go:3 (deduped) then b.go", res.Findings)
	}
	if len(res.Quarantined) != 1 || res.Quarantined[0].Reason != finding.ReasonLineNotInDiff {
		t.Errorf("quarantined = %+v", res.Quarantined)
	}
	if res.Usage != (provider.Usage{InputTokens: 150, OutputTokens: 15}) {
		t.Errorf("usage = %+v", res.Usage)
	}
	capped, err := Build(Args{Parts: 2}, parts[:2], finding.AggregateOptions{MaxFindings: 1})
	if err != nil || !capped.Capped || capped.Dropped != 1 || len(capped.Findings) != 1 || capped.Partial {
		t.Errorf("capped = %+v, %v", capped, err)
	}
	empty, err := Build(Args{}, nil, finding.AggregateOptions{})
	if err != nil || empty.Findings == nil || empty.Quarantined == nil || empty.Partial {
		t.Errorf("empty review = %+v, %v; want empty (non-nil) lists", empty, err)
	}
	bad := partJob("bad", 0, job.StatePublished, "", nil)
	bad.Result = []byte("{")
	if _, err := Build(Args{Parts: 1}, []*job.Job{bad}, finding.AggregateOptions{}); err == nil {
		t.Error("a published part with an undecodable result built")
	}
}

// scripted is a provider answering one fixed output or error.
type scripted struct {
	out []byte
	err error
	use provider.Usage
	tok string
}

func (s scripted) Region() string { return "eu" }
func (s scripted) Profile() provider.Profile {
	return provider.Profile{Name: "s", Kind: "openai-compatible", Region: "eu", TokensKey: s.tok}
}
func (s scripted) Review(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{Output: s.out, Usage: s.use}, s.err
}

func TestReviewPart(t *testing.T) {
	d, err := diff.Parse([]byte(testDiff))
	if err != nil {
		t.Fatal(err)
	}
	good := `{"path":"app.go","line":4,"end_line":null,"severity":"info","category":"maintainability","message":"todo",` +
		`"evidence":"// TODO: remove CANARY-pipeline-test","suggestion":null,"confidence":0.9}`
	invented := strings.Replace(good, `"line":4`, `"line":40`, 1)
	use := provider.Usage{InputTokens: 300, OutputTokens: 40}

	res, o := ReviewPart(context.Background(), scripted{out: []byte(`{"findings":[` + good + `,` + invented + `]}`), use: use, tok: "tpm"}, d, DepthFull)
	if o.Class != job.ClassSuccess || len(res.Findings) != 1 || res.Findings[0].Line != 4 || len(res.Quarantined) != 1 ||
		res.Quarantined[0].Reason != finding.ReasonLineNotInDiff || o.Usage != 340 || res.Usage != use || res.Provider != "s" || res.Depth != DepthFull {
		t.Fatalf("valid output: %+v, %+v", res, o)
	}
	// Without a tokens key the usage is not reconciled on the outcome.
	if _, o := ReviewPart(context.Background(), scripted{out: []byte(`{"findings":[]}`), use: use}, d, DepthFast); o.Class != job.ClassSuccess || o.Usage != 0 {
		t.Errorf("request-priced part: %+v", o)
	}
	res, _ = ReviewPart(context.Background(), scripted{out: []byte(`{"findings":[]}`)}, d, DepthFull)
	if res.Findings == nil || len(res.Quarantined) != 0 {
		t.Errorf("empty output: findings %v (want non-nil empty)", res.Findings)
	}
	for _, out := range []string{`{"findings":[{"path":"app.go"`, `{"findings":[{"path":"app.go","line":4}]}`, `not json`, `{"findings":[],"extra":1}`} {
		if _, o := ReviewPart(context.Background(), scripted{out: []byte(out), use: use, tok: "tpm"}, d, DepthFull); o.Class != job.ClassInvalidOutput || o.Usage != 340 {
			t.Errorf("output %q: %+v, want invalid_output with usage", out, o)
		} else if strings.Contains(o.Err, "app.go") {
			t.Errorf("the error %q repeats the output", o.Err)
		}
	}
	limited := &provider.Error{Outcome: job.Outcome{Class: job.ClassRateLimited, Status: 429, RetryAfter: time.Second}}
	if _, o := ReviewPart(context.Background(), scripted{err: limited}, d, DepthFull); o.Class != job.ClassRateLimited || o.RetryAfter != time.Second {
		t.Errorf("429: %+v", o)
	}
	if _, o := ReviewPart(context.Background(), scripted{err: errors.New("dial tcp: refused")}, d, DepthFull); o.Class != job.ClassTransient {
		t.Errorf("connection error: %+v", o)
	}
}

func TestInlineRulesFindOnAddedLines(t *testing.T) {
	rules, err := provider.New(provider.Profile{Name: "rules", Kind: "rules", Region: "eu"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Inline(context.Background(), rules, []byte(testDiff), InlineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Depth != DepthFull || res.Partial || res.Parts.Succeeded != res.Parts.Total || len(res.Quarantined) != 0 {
		t.Fatalf("result = %+v", res)
	}
	got := map[string]bool{}
	for _, f := range res.Findings {
		got[f.Path+":"+strconv.Itoa(f.Line)] = true
	}
	// app.go 4 (TODO), 5 (debug print), 6 (ignored error); lib.go 2 (AWS key).
	for _, want := range []string{"app.go:4", "app.go:5", "app.go:6", "lib.go:2"} {
		if !got[want] {
			t.Errorf("no finding on %s: %+v", want, res.Findings)
		}
	}
	for k := range got {
		if k == "app.go:1" || k == "app.go:3" || k == "app.go:7" {
			t.Errorf("finding on context line %s", k)
		}
	}
	if res.Findings[0].Severity != finding.SeverityError {
		t.Errorf("findings not ordered by severity: %+v", res.Findings[0])
	}
	if _, err := Inline(context.Background(), rules, []byte("hello\n"), InlineOptions{}); !errors.Is(err, diff.ErrNoFiles) {
		t.Errorf("inline of a non-diff: %v", err)
	}
	// A failing provider makes the result partial, never an error.
	res, err = Inline(context.Background(), scripted{out: []byte("nope")}, []byte(testDiff), InlineOptions{Depth: DepthFast})
	if err != nil || !res.Partial || res.Parts.Failed != res.Parts.Total || res.FailedParts[0].Reason != string(job.ClassInvalidOutput) || res.Depth != DepthFast {
		t.Errorf("failing provider: %+v, %v", res, err)
	}
}

func TestCheckPublishAndRDJSONL(t *testing.T) {
	dir := t.TempDir()
	p := &ReviewPublisher{Region: "eu", RDJSONLDir: dir}
	for _, tc := range []struct {
		pub Publish
		ok  bool
	}{
		{Publish{}, true},
		{Publish{Kind: PublishNone}, true},
		{Publish{Kind: PublishRDJSONL, Target: "out.rdjsonl"}, true},
		{Publish{Kind: PublishRDJSONL, Target: "sub/out.rdjsonl"}, true},
		{Publish{Kind: PublishRDJSONL, Target: ""}, false},
		{Publish{Kind: PublishRDJSONL, Target: "."}, false},
		{Publish{Kind: PublishRDJSONL, Target: "/etc/passwd"}, false},
		{Publish{Kind: PublishRDJSONL, Target: "../escape"}, false},
		{Publish{Kind: PublishRDJSONL, Target: "a/../../escape"}, false},
		{Publish{Kind: PublishWebhook, Target: "sub-1"}, true},
		{Publish{Kind: PublishWebhook}, false},
		{Publish{Kind: PublishGitHub, Target: "acme/app#7"}, true},
		{Publish{Kind: PublishGitHub, Target: "acme/app"}, false},
		{Publish{Kind: "email", Target: "x"}, false},
	} {
		if err := p.CheckPublish(Args{Publish: tc.pub}); (err == nil) != tc.ok {
			t.Errorf("CheckPublish(%+v) = %v, want ok %v", tc.pub, err, tc.ok)
		}
	}
	// github without a target takes repo#change.
	if err := p.CheckPublish(Args{Repo: "acme/app", Change: "12", Publish: Publish{Kind: PublishGitHub}}); err != nil {
		t.Errorf("github from repo and change: %v", err)
	}
	if err := (&ReviewPublisher{}).CheckPublish(Args{Publish: Publish{Kind: PublishRDJSONL, Target: "x"}}); err == nil {
		t.Error("rdjsonl accepted without a directory")
	}

	// Publishing twice replaces the file rather than appending to it.
	j := &job.Job{ID: "rev", Region: "eu"}
	j.Payload, _ = json.Marshal(Args{Publish: Publish{Kind: PublishRDJSONL, Target: "sub/out.rdjsonl"}})
	j.Result, _ = json.Marshal(Result{Findings: []finding.Finding{fnd("a.go", 1, finding.SeverityError, finding.CategoryBug, "m")}})
	for range 2 {
		if err := p.Publish(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "default", "sub", "out.rdjsonl"))
	if err != nil || bytes.Count(b, []byte("\n")) != 1 || !bytes.Contains(b, []byte(`"a.go"`)) {
		t.Fatalf("rdjsonl after two publications: %q, %v", b, err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "default", "sub"))
	if len(entries) != 1 {
		t.Errorf("temp files left behind: %v", entries)
	}
	// Another tenant's review with the same target writes its own file:
	// it never overwrites the first tenant's.
	other := *j
	other.Tenant = ".."
	other.Result, _ = json.Marshal(Result{Findings: []finding.Finding{fnd("b.go", 2, finding.SeverityError, finding.CategoryBug, "other")}})
	if err := p.Publish(context.Background(), &other); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(filepath.Join(dir, "default", "sub", "out.rdjsonl")); !bytes.Equal(b, b2) {
		t.Fatalf("another tenant's review overwrote the file: %q", b2)
	}
	if b3, err := os.ReadFile(filepath.Join(dir, "%2E%2E", "sub", "out.rdjsonl")); err != nil || !bytes.Contains(b3, []byte(`"b.go"`)) {
		t.Fatalf("tenant \"..\"'s file: %q, %v", b3, err)
	}
	// webhook and github need an inserter.
	j.Payload, _ = json.Marshal(Args{Publish: Publish{Kind: PublishWebhook, Target: "s"}})
	if err := p.Publish(context.Background(), j); err == nil {
		t.Error("webhook publication without an inserter succeeded")
	}
}
