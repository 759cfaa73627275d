package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

// contractCases are the cases for driver differences found while making
// every write of a document or job go through one guarded path.
var contractCases = map[string]func(*testing.T, Opener){
	"ObjectCompareAndSet": testObjectCompareAndSet,
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
