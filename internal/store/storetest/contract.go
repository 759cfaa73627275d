package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// contractCases are the cases for driver differences found while making
// every write of a document or job go through one guarded path.
var contractCases = map[string]func(*testing.T, Opener){
	"ObjectCompareAndSet": testObjectCompareAndSet,
	"ListPageCap":         testListPageCap,
	"LimitValidation":     testLimitValidation,
	"DeclareLimit":        testDeclareLimit,
	"ListKindState":       testListKindState,
}

// List by kind and state, the engine's sweeps for accepted parents and
// validated jobs (served by partial indexes since migration 0021, with the
// state written into the statement), returns exactly that kind's jobs in
// that state, newest first, paged by After; a state that is no job state
// matches nothing and is no error, on every driver.
func testListKindState(t *testing.T, open Opener) {
	s := open(t)
	var accepted, validated []string
	for i := range 6 {
		j := NewJob("acme", job.LaneBatch, "k")
		j.Kind = []string{"a", "b"}[i%2]
		switch {
		case i < 4:
			j.State = job.StateAccepted
			if j.Kind == "a" {
				accepted = append([]string{j.ID}, accepted...)
			}
		default:
			j.State = job.StateWaiting
		}
		insert(t, s, j)
	}
	for _, j := range lease(t, s, T0, 2) {
		tr := success(j, T0)
		tr.To, tr.Result = job.StateValidated, []byte(`{}`)
		mustOK(t, finish(t, s, tr))
		if j.Kind == "a" {
			validated = append(validated, j.ID)
		}
	}
	list := func(p store.ListParams) []string { return listIDs(t, s, p) }
	first := list(store.ListParams{Kind: "a", State: job.StateAccepted, Limit: 1})
	rest := list(store.ListParams{Kind: "a", State: job.StateAccepted, After: first[0], Limit: 5})
	if got := append(first, rest...); fmt.Sprint(got) != fmt.Sprint(accepted) {
		t.Errorf("accepted jobs of kind a, two pages = %v, want %v", got, accepted)
	}
	if got := list(store.ListParams{Kind: "a", State: job.StateValidated}); fmt.Sprint(got) != fmt.Sprint(validated) {
		t.Errorf("validated jobs of kind a = %v, want %v", got, validated)
	}
	if got := list(store.ListParams{Kind: "a", State: "bogus"}); len(got) != 0 {
		t.Errorf("jobs in state bogus = %v, want none", got)
	}
}

// List above its page cap returns MaxListLimit jobs on every driver
// (SQLite used to fall back to 100, PostgreSQL to clamp at 1000), and a
// zero limit DefaultListLimit.
func testListPageCap(t *testing.T, open Opener) {
	s := open(t)
	jobs := make([]*job.Job, store.MaxListLimit+1)
	for i := range jobs {
		jobs[i] = NewJob("acme", job.LaneBatch, "k")
	}
	insert(t, s, jobs...)
	for limit, want := range map[int]int{0: store.DefaultListLimit, 5000: store.MaxListLimit, store.MaxListLimit + 1: store.MaxListLimit, 7: 7} {
		got, err := s.List(context.Background(), store.ListParams{Limit: limit})
		if err != nil || len(got) != want {
			t.Errorf("List(Limit %d) = %d jobs, %v; want %d", limit, len(got), err, want)
		}
	}
}

// Every driver refuses an invalid limit configuration with
// admission.Config.Validate's message and stores nothing (SQLite used to
// store it).
func testLimitValidation(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	for _, c := range []admission.Config{
		{Name: "neg", Rate: -1},
		{Name: "minrate", Rate: 1, MinRate: 2},
		{Name: "adaptive", Adaptive: true},
		{Name: "conc", Concurrency: -1},
		{Name: ""},
	} {
		want := fmt.Sprintf("limit key %q: %v", c.Name, c.Validate())
		if _, err := s.UpsertLimit(ctx, c, T0); err == nil || err.Error() != want {
			t.Errorf("UpsertLimit(%+v) = %v, want %s", c, err, want)
		}
		if c.Name == "" {
			continue
		}
		if _, err := s.GetLimit(ctx, c.Name); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("invalid key %q was stored: %v", c.Name, err)
		}
	}
}

// PutObjectIf creates only what is absent and replaces only what has not
// changed since it was read; a stale write is ErrConflict and leaves the
// newer document in place.
func testObjectCompareAndSet(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	o := store.Object{Kind: "subscriber", ID: "s", Body: []byte(`{"version":1}`), UpdatedAt: T0}
	if err := s.PutObjectIf(ctx, o, nil); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := s.PutObjectIf(ctx, o, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	v2 := store.Object{Kind: "subscriber", ID: "s", Body: []byte(`{"version":2}`), UpdatedAt: T0.Add(time.Second)}
	if err := s.PutObjectIf(ctx, v2, o.Body); err != nil {
		t.Fatalf("update from version 1: %v", err)
	}
	stale := store.Object{Kind: "subscriber", ID: "s", Body: []byte(`{"version":2,"other":true}`), UpdatedAt: T0.Add(2 * time.Second)}
	if err := s.PutObjectIf(ctx, stale, o.Body); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update from stale version 1: %v, want ErrConflict", err)
	}
	got, err := s.GetObject(ctx, "subscriber", "s")
	if err != nil || string(got.Body) != string(v2.Body) {
		t.Fatalf("stored %s (%v), want %s", got.Body, err, v2.Body)
	}
	missing := store.Object{Kind: "subscriber", ID: "gone", Body: []byte(`{}`), UpdatedAt: T0}
	if err := s.PutObjectIf(ctx, missing, []byte(`{}`)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update of a missing object: %v, want ErrConflict", err)
	}
}

// DeclareLimit applies a declaration to a new key, to a key a job created
// with the default configuration, and whenever the declaration changes;
// an unchanged declaration (the next start) leaves the key as an
// operator's UpsertLimit left it, and an invalid one is refused.
func testDeclareLimit(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	declared := admission.Config{Name: "openai:m", Rate: 10, Burst: 5, PerStart: true,
		Windows: []admission.Window{{Limit: 500, Period: time.Minute}}}
	declare := func(c admission.Config, at time.Time, wantApplied bool) admission.State {
		t.Helper()
		st, applied, err := s.DeclareLimit(ctx, c, at)
		if err != nil || applied != wantApplied {
			t.Fatalf("DeclareLimit(%+v) = applied %v, %v; want applied %v", c, applied, err, wantApplied)
		}
		return st
	}
	rate := func(name string) float64 {
		t.Helper()
		st, err := s.GetLimit(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return st.Rate
	}
	if st := declare(declared, T0, true); st.Rate != 10 || !st.PerStart || len(st.Windows) != 1 {
		t.Fatalf("a new declared key = %+v, want the declaration", st)
	}
	declare(declared, T0.Add(time.Second), false) // a restart
	operator := declared
	operator.Rate = 2
	if _, err := s.UpsertLimit(ctx, operator, T0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if st := declare(declared, T0.Add(3*time.Second), false); st.Rate != 2 || rate("openai:m") != 2 {
		t.Fatalf("a restart with the same declaration undid the operator's rate: %v, want 2", rate("openai:m"))
	}
	changed := declared
	changed.Rate = 20
	if st := declare(changed, T0.Add(4*time.Second), true); st.Rate != 20 || rate("openai:m") != 20 {
		t.Fatalf("a changed declaration was not applied: rate %v, want 20", rate("openai:m"))
	}
	declare(changed, T0.Add(5*time.Second), false)
	declare(declared, T0.Add(6*time.Second), true) // changed back: a change too

	// A key first created by a job (the default configuration) is not a
	// declaration: the first DeclareLimit applies.
	insert(t, s, NewJob("acme", job.LaneBatch, "tenant:acme"))
	declare(admission.Config{Name: "tenant:acme", Rate: 3}, T0.Add(7*time.Second), true)
	if got := rate("tenant:acme"); got != 3 {
		t.Fatalf("a job-created key after its first declaration has rate %v, want 3", got)
	}

	bad := admission.Config{Name: "bad", Rate: -1}
	want := fmt.Sprintf("limit key %q: %v", bad.Name, bad.Validate())
	if _, _, err := s.DeclareLimit(ctx, bad, T0); err == nil || err.Error() != want {
		t.Fatalf("DeclareLimit(%+v) = %v, want %s", bad, err, want)
	}
}
