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
