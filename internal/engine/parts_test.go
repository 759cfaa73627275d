package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/postgres/pgtest"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// The parts capability (parts.go): a parent of kind "report" with parts of
// kind "fetch". A fetch part returns {"n": its index}, or fails permanent
// when its payload says so; the report's aggregator sums the succeeded
// parts' n and counts the failed ones.

type fetchArgs struct {
	N    int  `json:"n"`
	Fail bool `json:"fail"`
}

type report struct {
	Sum    int `json:"sum"`
	Failed int `json:"failed"`
	Parts  int `json:"parts"`
}

var fetchKind = engine.Kind{Handler: engine.HandlerFunc(func(_ context.Context, j *job.Job) job.Outcome {
	var a fetchArgs
	if err := json.Unmarshal(j.Payload, &a); err != nil || a.Fail {
		return job.Outcome{Class: job.ClassPermanent, Err: "fetch refused"}
	}
	return job.Outcome{Class: job.ClassSuccess, Result: fmt.Appendf(nil, `{"n":%d}`, a.N)}
})}

// sumParts is the report aggregator; calls counts its calls.
func sumParts(calls *atomic.Int64) engine.AggregatorFunc {
	return func(_ context.Context, _ *job.Job, parts []*job.Job) job.Outcome {
		calls.Add(1)
		r := report{Parts: len(parts)}
		for _, p := range parts {
			if p.State == job.StateTerminal {
				r.Failed++
				continue
			}
			var a fetchArgs
			if err := json.Unmarshal(p.Result, &a); err != nil {
				return job.Outcome{Class: job.ClassPermanent, Err: "part result"}
			}
			r.Sum += a.N
		}
		b, _ := json.Marshal(r)
		return job.Outcome{Class: job.ClassSuccess, Result: b}
	}
}

// countingPublisher counts deliveries.
type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(context.Context, *job.Job) error { p.n.Add(1); return nil }

// newParent returns an accepted parent of kind "report" and n fetch parts
// (waiting), the parts whose index is in fail failing.
func newParent(now time.Time, n int, fail ...int) (*job.Job, []*job.Job) {
	parent := &job.Job{Kind: "report", Region: "us", Tenant: "acme", Lane: job.LaneBatch, LimitKeys: []string{"parts:report"}}
	parent.Prepare(uuid.Must(uuid.NewV7()).String(), now, 0, true)
	var parts []*job.Job
	for i := range n {
		a := fetchArgs{N: i + 1}
		for _, f := range fail {
			a.Fail = a.Fail || f == i
		}
		payload, _ := json.Marshal(a)
		p := &job.Job{Kind: "fetch", Region: "us", Tenant: "acme", Lane: job.LaneBatch, LimitKeys: []string{"fetch"},
			Payload: payload, ParentID: parent.ID}
		p.Prepare(uuid.Must(uuid.NewV7()).String(), now, 0, false)
		parts = append(parts, p)
	}
	return parent, parts
}

// aggregations returns the parent's history records written by its
// aggregation (the advance out of accepted).
func aggregations(t *testing.T, s store.Store, id string) []job.AttemptRecord {
	t.Helper()
	j, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []job.AttemptRecord
	for _, r := range j.History {
		if strings.HasPrefix(r.Why, "aggregated ") {
			out = append(out, r)
		}
	}
	return out
}

func waitState(t *testing.T, s store.Store, id string, want job.State) *job.Job {
	t.Helper()
	var j *job.Job
	testkit.Eventually(t, time.Minute, "the parent to be "+string(want), func() error {
		var err error
		if j, err = s.Get(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if j.State != want {
			return fmt.Errorf("parent is %s", j.State)
		}
		return nil
	})
	return j
}

// TestPartsAggregateOnceAcrossEngines: two engines (two nodes) on one
// store run 40 parts, three of which fail; the parent is advanced once
// (one aggregation record), with the sum of the succeeded parts, and its
// publication is recorded once.
func TestPartsAggregateOnceAcrossEngines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		var calls atomic.Int64
		pub := &countingPublisher{}
		kinds := map[string]engine.Kind{
			"fetch":  fetchKind,
			"report": {Aggregate: sumParts(&calls), PartKinds: []string{"fetch"}, Publisher: pub},
		}
		a := start(t, engine.Config{Store: s, Kinds: kinds, Workers: 4})
		start(t, engine.Config{Store: s, Kinds: kinds, Workers: 4})
		parent, parts := newParent(time.Now(), 40, 3, 17, 39)
		if _, err := a.Jobs().InsertParts(context.Background(), parent, parts, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		a.Notify()
		j := waitState(t, s, parent.ID, job.StatePublished)
		var r report
		if err := json.Unmarshal(j.Result, &r); err != nil {
			t.Fatal(err)
		}
		want := report{Sum: 40*41/2 - 4 - 18 - 40, Failed: 3, Parts: 40}
		if r != want {
			t.Fatalf("report %+v, want %+v", r, want)
		}
		recs := aggregations(t, s, parent.ID)
		if len(recs) != 1 || recs[0].Outcome != job.ClassSuccess || recs[0].Why != "aggregated 40 parts (3 failed)" {
			t.Fatalf("aggregation records %+v, want one success of 40 parts (3 failed)", recs)
		}
		if calls.Load() < 1 || pub.n.Load() < 1 {
			t.Fatalf("aggregator called %d times, publisher %d", calls.Load(), pub.n.Load())
		}
	})
}

// TestPartsNoPartsAggregatesAtOnce: a parent inserted with no part is
// aggregated without waiting for a sweep (the sweep is an hour away).
func TestPartsNoPartsAggregatesAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		var calls atomic.Int64
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{
			"report": {Aggregate: sumParts(&calls), SweepEvery: time.Hour},
		}})
		synctest.Wait() // past the start sweep, which found nothing
		t0 := time.Now()
		parent, _ := newParent(t0, 0)
		if _, err := e.Jobs().InsertParts(context.Background(), parent, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		waitState(t, s, parent.ID, job.StatePublished)
		if waited := time.Since(t0); waited >= time.Hour {
			t.Fatalf("aggregated after %v: by the sweep, not at once", waited)
		}
		if calls.Load() != 1 {
			t.Fatalf("aggregator called %d times, want 1", calls.Load())
		}
	})
}

// TestPartsSweepRepairs is the crash case without a process: every part
// of a parent finished but no engine was told (the node that wrote the
// last part died before the parent advanced, or another process finished
// them). An engine started afterwards aggregates it in its start sweep,
// and a running engine in its periodic one.
func TestPartsSweepRepairs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		// Another process's writer, with no engine watching it.
		other := writerOn(t, s)
		finishAll := func(parent *job.Job, parts []*job.Job) {
			t.Helper()
			if _, err := other.InsertParts(ctx, parent, parts, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			leased, err := other.Lease(ctx, engine.LeaseParams{Max: len(parts), LeaseFor: time.Minute, Kinds: []string{"fetch"}})
			if err != nil || len(leased) != len(parts) {
				t.Fatalf("leased %d of %d: %v", len(leased), len(parts), err)
			}
			var rs []engine.Report
			for _, l := range leased {
				rs = append(rs, engine.Report{Job: l, Outcome: fetchKind.Handler.Handle(ctx, l)})
			}
			if _, err := other.Report(ctx, rs); err != nil {
				t.Fatal(err)
			}
		}
		crashed, crashedParts := newParent(time.Now(), 5)
		finishAll(crashed, crashedParts)

		var calls atomic.Int64
		start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{
			"fetch":  fetchKind,
			"report": {Aggregate: sumParts(&calls), SweepEvery: 10 * time.Second},
		}})
		waitState(t, s, crashed.ID, job.StatePublished)

		synctest.Wait()
		t0 := time.Now()
		late, lateParts := newParent(t0, 3)
		finishAll(late, lateParts) // the running engine's writer is not told
		waitState(t, s, late.ID, job.StatePublished)
		// Its 10 s period, plus the wait's own polling.
		if waited := time.Since(t0); waited > 11*time.Second {
			t.Fatalf("the periodic sweep took %v, want about its 10s period", waited)
		}
		for _, id := range []string{crashed.ID, late.ID} {
			if recs := aggregations(t, s, id); len(recs) != 1 {
				t.Fatalf("parent %s: %d aggregation records, want 1", id, len(recs))
			}
		}
	})
}

// TestPartsConcurrentAggregationAdvancesOnce: two engines aggregate the
// same ready parent at the same moment (both have computed the aggregate
// before either writes): one advance is written and the other engine
// changes nothing.
func TestPartsConcurrentAggregationAdvancesOnce(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	var inside sync.WaitGroup
	inside.Add(2)
	var calls atomic.Int64
	agg := engine.AggregatorFunc(func(ctx context.Context, p *job.Job, parts []*job.Job) job.Outcome {
		inside.Done()
		inside.Wait() // both engines are past the readiness check
		return sumParts(&calls)(ctx, p, parts)
	})
	kinds := map[string]engine.Kind{"report": {Aggregate: agg}}
	var es []*engine.Engine
	for range 2 {
		e, err := engine.New(engine.Config{Store: s, Region: "us", Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	parent, _ := newParent(time.Now(), 0)
	if _, err := s.Insert(ctx, []*job.Job{parent}, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, e := range es {
		go func() { errs <- e.AggregateParent(ctx, parent.ID) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("aggregator ran %d times, want 2 (the test needs both engines to compute)", calls.Load())
	}
	if recs := aggregations(t, s, parent.ID); len(recs) != 1 {
		t.Fatalf("%d aggregation records, want exactly 1: %+v", len(recs), recs)
	}
	if j, _ := s.Get(ctx, parent.ID); j.State != job.StatePublished {
		t.Fatalf("parent is %s, want published", j.State)
	}
}

// TestPartsAggregateOutcomes: a permanent aggregate ends the parent
// terminal with its reason and result; a transient one leaves it accepted
// until the next try decides; children of other kinds, tenants or
// regions are not parts.
func TestPartsAggregateOutcomes(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	var seen atomic.Int64
	tries := 0
	agg := engine.AggregatorFunc(func(_ context.Context, p *job.Job, parts []*job.Job) job.Outcome {
		seen.Store(int64(len(parts)))
		tries++
		if tries == 1 {
			return job.Outcome{Class: job.ClassTransient, Err: "store hiccup"}
		}
		return job.Outcome{Class: job.ClassPermanent, Reason: job.ReasonProviderQuotaExhausted, Err: "every fetch failed",
			Result: []byte(`{"why":"quota"}`)}
	})
	e, err := engine.New(engine.Config{Store: s, Region: "us", Kinds: map[string]engine.Kind{
		"report": {Aggregate: agg, PartKinds: []string{"fetch"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	parent, parts := newParent(time.Now(), 2)
	delivery := storetest.NewJob("acme", job.LaneBatch, "k")  // another kind: not a part
	foreign := storetest.NewJob("globex", job.LaneBatch, "k") // another tenant: not a part
	foreign.Kind = "fetch"
	others := []*job.Job{delivery, foreign}
	for _, o := range others {
		o.ParentID, o.EligibleAt, o.CreatedAt = parent.ID, parent.CreatedAt, parent.CreatedAt
	}
	if _, err := s.Insert(ctx, append(append([]*job.Job{parent}, parts...), others...), admission.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if _, err := s.Cancel(ctx, p.ID, time.Now()); err != nil { // final: terminal/cancelled
			t.Fatal(err)
		}
	}
	delivery2 := storetest.NewJob("acme", job.LaneBatch, "k") // a waiting child of another kind does not hold it back
	delivery2.ParentID, delivery2.EligibleAt, delivery2.CreatedAt = parent.ID, parent.CreatedAt, parent.CreatedAt
	if _, err := s.Insert(ctx, []*job.Job{delivery2}, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := e.AggregateParent(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Get(ctx, parent.ID); j.State != job.StateAccepted {
		t.Fatalf("after a transient aggregate the parent is %s, want accepted", j.State)
	}
	if err := e.SweepParents(ctx); err != nil {
		t.Fatal(err)
	}
	j, _ := s.Get(ctx, parent.ID)
	if j.State != job.StateTerminal || j.Reason != job.ReasonProviderQuotaExhausted || string(j.Result) != `{"why":"quota"}` {
		t.Fatalf("parent %s/%s result %s; want terminal provider_quota_exhausted with the aggregate's result", j.State, j.Reason, j.Result)
	}
	if seen.Load() != 2 {
		t.Fatalf("the aggregator saw %d parts, want the parent's 2 own fetch parts", seen.Load())
	}
	// Ended: a later wake-up or sweep changes nothing.
	if err := e.AggregateParent(ctx, parent.ID); err != nil || tries != 2 {
		t.Fatalf("a finished parent was aggregated again (tries %d, %v)", tries, err)
	}
}

// TestPartsRedrivenParentReaggregates: a parent an operator redrives is
// leased and aggregated again from its parts by the engine (its kind has
// no handler of its own).
func TestPartsRedrivenParentReaggregates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		var fail atomic.Bool
		fail.Store(true)
		var calls atomic.Int64
		agg := engine.AggregatorFunc(func(ctx context.Context, p *job.Job, parts []*job.Job) job.Outcome {
			if fail.Load() {
				return job.Outcome{Class: job.ClassPermanent, Err: "bad day"}
			}
			return sumParts(&calls)(ctx, p, parts)
		})
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"fetch": fetchKind, "report": {Aggregate: agg}}})
		parent, parts := newParent(time.Now(), 3)
		if _, err := e.Jobs().InsertParts(ctx, parent, parts, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		waitState(t, s, parent.ID, job.StateTerminal)
		fail.Store(false)
		if _, err := e.Jobs().Redrive(ctx, parent.ID); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		j := waitState(t, s, parent.ID, job.StatePublished)
		if string(j.Result) != `{"sum":6,"failed":0,"parts":3}` {
			t.Fatalf("redriven parent's result %s", j.Result)
		}
	})
}

// TestInsertPartsRefusesStrayParts: a part that names another parent, or
// belongs to another tenant, is refused before anything is written; a
// replay with the parent's idempotency key inserts no part twice.
func TestInsertPartsRefusesStrayParts(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	w := writerOn(t, s)
	parent, parts := newParent(time.Now(), 2)
	parts[1].ParentID = "someone-else"
	if _, err := w.InsertParts(ctx, parent, parts, admission.Config{}); err == nil {
		t.Fatal("a part naming another parent was accepted")
	}
	parts[1].ParentID, parts[1].Tenant = parent.ID, "globex"
	if _, err := w.InsertParts(ctx, parent, parts, admission.Config{}); err == nil {
		t.Fatal("a part of another tenant was accepted")
	}
	if _, err := s.Get(ctx, parent.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused insert wrote the parent: %v", err)
	}
	parts[1].Tenant = "acme"
	parent.IdempotencyKey = "report-2026-12-01"
	first, err := w.InsertParts(ctx, parent, parts, admission.Config{})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := newParent(time.Now(), 0)
	again.IdempotencyKey = parent.IdempotencyKey
	_, replayParts := newParent(time.Now(), 2)
	for _, p := range replayParts {
		p.ParentID = again.ID
	}
	res, err := w.InsertParts(ctx, again, replayParts, admission.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Existing || r.Job.ID != first[i].Job.ID {
			t.Fatalf("replay result %d is %s (existing %v), want the first insert's %s", i, r.Job.ID, r.Existing, first[i].Job.ID)
		}
	}
}

// TestPartsOnPostgresAcrossNodes: two engines, each with its own
// connection pool to one PostgreSQL schema (two nodes), run the parts of
// several parents; each parent is advanced once and published. On the
// real clock: a synctest bubble cannot wait through network I/O.
func TestPartsOnPostgresAcrossNodes(t *testing.T) {
	t.Parallel()
	url, schema := testkit.PostgresSchema(t, "rl_parts_")
	var nodes []store.Store
	for range 2 {
		nodes = append(nodes, pgtest.Open(t, url, schema, 4))
	}
	var calls atomic.Int64
	kinds := map[string]engine.Kind{
		"fetch":  fetchKind,
		"report": {Aggregate: sumParts(&calls), PartKinds: []string{"fetch"}, SweepEvery: 200 * time.Millisecond},
	}
	var es []*engine.Engine
	for _, s := range nodes {
		es = append(es, start(t, engine.Config{Store: s, Kinds: kinds, Workers: 4}))
	}
	var parents []*job.Job
	for i := range 4 {
		parent, parts := newParent(time.Now(), 15, i, 14-i)
		if _, err := es[i%2].Jobs().InsertParts(context.Background(), parent, parts, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		parents = append(parents, parent)
	}
	for _, e := range es {
		e.Notify()
	}
	for _, p := range parents {
		j := waitState(t, nodes[0], p.ID, job.StatePublished)
		var r report
		if err := json.Unmarshal(j.Result, &r); err != nil {
			t.Fatal(err)
		}
		if r.Parts != 15 || r.Failed != 2 {
			t.Fatalf("parent %s: report %+v, want 15 parts, 2 failed", p.ID, r)
		}
		if recs := aggregations(t, nodes[1], p.ID); len(recs) != 1 {
			t.Fatalf("parent %s: %d aggregation records, want exactly 1", p.ID, len(recs))
		}
	}
}

// TestPartsNested: a part that is itself a parent (a "report" of
// "fetch" parts, under a "digest") is final once aggregated and
// published, which wakes its own parent: the digest publishes without
// waiting for a sweep (an hour away).
func TestPartsNested(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		var calls atomic.Int64
		digest := engine.AggregatorFunc(func(_ context.Context, _ *job.Job, parts []*job.Job) job.Outcome {
			return job.Outcome{Class: job.ClassSuccess, Result: fmt.Appendf(nil, `{"reports":%d}`, len(parts))}
		})
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{
			"fetch":  fetchKind,
			"report": {Aggregate: sumParts(&calls), PartKinds: []string{"fetch"}, Publisher: &countingPublisher{}, SweepEvery: time.Hour},
			"digest": {Aggregate: digest, PartKinds: []string{"report"}, SweepEvery: time.Hour},
		}})
		synctest.Wait() // past the start sweep
		t0 := time.Now()
		top := &job.Job{Kind: "digest", Region: "us", Tenant: "acme", Lane: job.LaneBatch, LimitKeys: []string{"parts:digest"}}
		top.Prepare(uuid.Must(uuid.NewV7()).String(), t0, 0, true)
		report, fetches := newParent(t0, 3)
		report.ParentID = top.ID
		// The report is a part of the digest (inserted accepted, as a
		// parent of its own fetches), so it goes in with its fetches.
		if _, err := s.Insert(ctx, []*job.Job{top}, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Jobs().InsertParts(ctx, report, fetches, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		j := waitState(t, s, top.ID, job.StatePublished)
		if string(j.Result) != `{"reports":1}` {
			t.Fatalf("digest result %s", j.Result)
		}
		if waited := time.Since(t0); waited >= time.Hour {
			t.Fatalf("the digest waited %v: for the sweep, not its part's wake-up", waited)
		}
	})
}
