package pipeline

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
)

// plannedReview stores and inserts a review of testDiff for tenant in st
// and returns its plan.
func plannedReview(t *testing.T, st store.Store, tenant string, now time.Time) Plan {
	t.Helper()
	ctx := context.Background()
	s := Submission{ID: uuid.NewString(), Region: "eu", Tenant: tenant, Lane: job.LaneInteractive, Diff: []byte(testDiff),
		Args:    Args{Repo: "acme/app", DepthRequested: DepthFull, Depth: DepthFull, Publish: Publish{Kind: PublishNone}},
		Profile: testProfile(""), Now: now}
	p, err := NewPlan(s, uuid.NewString)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range p.Objects {
		if err := st.PutObject(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Insert(ctx, append([]*job.Job{p.Parent}, p.Parts...), admission.Config{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// forge inserts a built-in job through the internal path, as a bug in
// ratelane's own code would, and returns it as stored.
func forge(t *testing.T, st store.Store, kind, tenant, parent string, args any, now time.Time) *job.Job {
	t.Helper()
	payload, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	j := &job.Job{Kind: kind, Region: "eu", Tenant: tenant, LimitKeys: []string{"forged:key"}, Payload: payload, ParentID: parent}
	j.Prepare(uuid.NewString(), now, 0, false)
	res, err := st.Insert(context.Background(), []*job.Job{j}, admission.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Job
}

// countingProvider counts its calls and reviews with the rules provider,
// which quotes the diff's lines as evidence.
type countingProvider struct {
	provider.Provider
	calls *atomic.Int64
}

func (c countingProvider) Review(ctx context.Context, r provider.Request) (provider.Response, error) {
	c.calls.Add(1)
	return c.Provider.Review(ctx, r)
}

// openEU opens a fresh SQLite store of region eu, closed at the test's end.
func openEU(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "eu.db"), Region: "eu", Synchronous: sqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestForgedBuiltinJobsRefused is the review handlers' defence in depth:
// part, GitHub and aggregation jobs that reference another tenant's review
// (forged rows inserted through the internal path, as a bug would) end
// permanent before any provider or GitHub call, and never quote the
// victim's diff; a forged part never counts towards the victim's review.
func TestForgedBuiltinJobsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openEU(t)
	now := time.Now()
	victim := plannedReview(t, st, "acme", now)
	own := plannedReview(t, st, "globex", now)
	va, _ := decode[PartArgs](victim.Parts[0].Payload)

	rules, err := provider.New(testProfile(""))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	parts, err := NewPartHandler("eu", st, []provider.Provider{countingProvider{rules, &calls}})
	if err != nil {
		t.Fatal(err)
	}
	// The real part runs: the handler works for a genuine part.
	if o := parts.Handle(ctx, victim.Parts[0]); o.Class != job.ClassSuccess || !strings.Contains(string(o.Result), "CANARY") {
		t.Fatalf("genuine part: %+v", o)
	}
	calls.Store(0)

	var ghHits atomic.Int64
	gh := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ghHits.Add(1)
		w.Write([]byte(`[]`))
	}))
	defer gh.Close()
	github := &GitHub{BaseURL: gh.URL, Token: "t", Jobs: st}

	ownArgs := va
	ownArgs.Review = own.Parent.ID
	for name, tc := range map[string]struct {
		kind, parent string
		args         any
	}{
		"part: victim's review as parent":     {KindPart, victim.Parent.ID, va},
		"part: own parent, victim's review":   {KindPart, own.Parent.ID, va},
		"part: own review, victim's object":   {KindPart, own.Parent.ID, ownArgs},
		"part: no parent":                     {KindPart, "", va},
		"github: victim's review as parent":   {KindGitHub, victim.Parent.ID, GitHubArgs{Review: victim.Parent.ID, Target: "evil/repo#1"}},
		"github: own parent, victim's review": {KindGitHub, own.Parent.ID, GitHubArgs{Review: victim.Parent.ID, Target: "evil/repo#1"}},
		"github: unknown review as parent":    {KindGitHub, "no-such-review", GitHubArgs{Review: "no-such-review", Target: "evil/repo#1"}},
	} {
		j := forge(t, st, tc.kind, "globex", tc.parent, tc.args, now)
		var o job.Outcome
		if tc.kind == KindPart {
			o = parts.Handle(ctx, j)
		} else {
			o = github.Handle(ctx, j)
		}
		if o.Class != job.ClassPermanent || o.Reason != job.ReasonPermanentError || len(o.Result) > 0 ||
			strings.Contains(o.Err, "CANARY") || strings.Contains(o.Err, "AKIA") {
			t.Errorf("%s: outcome %s/%s %q with a %d-byte result, want permanent_error without content", name, o.Class, o.Reason, o.Err, len(o.Result))
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the provider reviewed %d forged parts", n)
	}
	if n := ghHits.Load(); n != 0 {
		t.Errorf("GitHub was called %d times for forged jobs", n)
	}

	// A forged, published part of another tenant naming the victim as
	// its parent is not one of the victim's parts.
	fake := forge(t, st, KindPart, "globex", victim.Parent.ID, va, now)
	res, _ := json.Marshal(PartResult{Findings: []finding.Finding{fnd("app.go", 4, finding.SeverityInfo, finding.CategoryMaintainability, "planted")}})
	leased, err := st.Lease(ctx, store.LeaseParams{Now: now, Max: 100, LeaseFor: time.Minute, Kinds: []string{KindPart}, Tenant: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leased {
		if l.ID == fake.ID {
			errs, err := st.Finish(ctx, []store.Transition{{ID: l.ID, LeaseToken: l.LeaseToken, To: job.StatePublished, Result: res,
				Record: job.AttemptRecord{At: now, Outcome: job.ClassSuccess}}})
			if err != nil || errs[0] != nil {
				t.Fatal(err, errs)
			}
		}
	}
	if fj, err := st.Get(ctx, fake.ID); err != nil || fj.State != job.StatePublished {
		t.Fatalf("the forged part is not published (%v): the check below would prove nothing", err)
	}
	w, err := engine.NewJobs(engine.JobsConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.Parts(ctx, victim.Parent, []string{KindPart})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(victim.Parts) {
		t.Fatalf("Parts(victim) = %d jobs, want its %d own parts", len(got), len(victim.Parts))
	}
	for _, pj := range got {
		if pj.Tenant != "acme" {
			t.Fatalf("Parts(victim) holds a part of tenant %q", pj.Tenant)
		}
	}
}

// TestAggregatorRefusesForeignDiff: through the engine's parts
// capability, a review parent whose payload names
// another review's diff object (a forged row) ends terminal with
// permanent_error instead of being aggregated and published.
func TestAggregatorRefusesForeignDiff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openEU(t)
	now := time.Now()
	victim := plannedReview(t, st, "acme", now)
	payload, _ := json.Marshal(Args{DepthRequested: DepthFull, Depth: DepthFull, DiffObject: victim.Parent.ID, Publish: Publish{Kind: PublishNone}})
	forged := &job.Job{Kind: KindReview, Region: "eu", Tenant: "globex", LimitKeys: []string{"forged:key"}, Payload: payload}
	forged.Prepare(uuid.NewString(), now, 0, true)
	if _, err := st.Insert(ctx, []*job.Job{forged}, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Store: st, Region: "eu", Kinds: map[string]engine.Kind{
		KindReview: {Aggregate: Aggregate(AggregateConfig{}), PartKinds: []string{KindPart}, Publisher: &ReviewPublisher{Region: "eu"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AggregateParent(ctx, forged.ID); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, forged.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != job.StateTerminal || got.Reason != job.ReasonPermanentError || len(got.Result) > 0 {
		t.Fatalf("forged review is %s/%s with result %s; want terminal permanent_error", got.State, got.Reason, got.Result)
	}
}

// A review whose diff is one part stores the diff once: its part names the
// review's diff object (PartArgs.WholeDiff), and the part handler reviews
// that object's text.
func TestWholeDiffPartStoresTheDiffOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openEU(t)
	const one = "diff --git a/x.go b/x.go\n--- a/x.go\n+++ b/x.go\n@@ -0,0 +1,2 @@\n+package x\n+// CANARY AKIA0000000000000000\n"
	s := Submission{ID: uuid.NewString(), Region: "eu", Tenant: "acme", Lane: job.LaneInteractive, Diff: []byte(one),
		Args:    Args{Repo: "acme/app", DepthRequested: DepthFull, Depth: DepthFull, Publish: Publish{Kind: PublishNone}},
		Profile: testProfile(""), Now: time.Now()}
	p, err := NewPlan(s, uuid.NewString)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Parts) != 1 || len(p.Objects) != 1 || p.Objects[0].Kind != ObjectDiff {
		t.Fatalf("%d parts, %d objects (want 1 part and the diff alone)", len(p.Parts), len(p.Objects))
	}
	pa, _ := decode[PartArgs](p.Parts[0].Payload)
	if kind, id := pa.PartObject(); !pa.WholeDiff || kind != ObjectDiff || id != s.ID || pa.Object != s.ID+"/0" {
		t.Fatalf("part args %+v name %s/%s", pa, kind, id)
	}
	for _, o := range p.Objects {
		if err := st.PutObject(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Insert(ctx, append([]*job.Job{p.Parent}, p.Parts...), admission.Config{}); err != nil {
		t.Fatal(err)
	}
	rules, err := provider.New(testProfile(""))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := NewPartHandler("eu", st, []provider.Provider{rules})
	if err != nil {
		t.Fatal(err)
	}
	if o := parts.Handle(ctx, p.Parts[0]); o.Class != job.ClassSuccess || !strings.Contains(string(o.Result), "CANARY") {
		t.Fatalf("whole-diff part: %+v", o)
	}
}
