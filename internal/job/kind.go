package job

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Built-in kinds are job kinds that ratelane itself creates and handles:
// webhook deliveries, reviews and their parts, GitHub publication. Their
// payloads name other records (a subscriber, a review, a diff object) and
// their handlers act with ratelane's own credentials (a subscriber's signing
// secret, a GitHub token), so a producer who could enqueue one could make
// ratelane act on another tenant's records. Only ratelane's own code paths,
// which insert through the internal store, may create them; every public
// insert path (ratelane.Client.Insert, POST /v1/jobs) refuses them with a
// *ReservedKindError, and external workers may not lease them.
//
// The package that owns a kind reserves it with ReserveKind from an init
// function, so the set grows with the features linked into the binary (and,
// later, with plug-ins registering their kinds through the core) rather
// than living in a list here. Kinds under ReservedPrefix are reserved as
// well, whether or not their owner is linked in, so that future built-in
// kinds can be named there safely on nodes that do not know them yet.

// ReservedPrefix starts every kind name kept for future built-in kinds.
const ReservedPrefix = "ratelane."

// BuiltinKind is one reserved kind and what it is for.
type BuiltinKind struct {
	// Name is the job kind.
	Name string `json:"kind"`
	// Owner says what creates the kind, for error messages and docs:
	// e.g. "webhook deliveries (POST /v1/events)".
	Owner string `json:"owner"`
}

var reserved = struct {
	sync.RWMutex
	kinds map[string]BuiltinKind
}{kinds: map[string]BuiltinKind{}}

// ReserveKind marks name as a built-in kind owned by owner. It is meant to
// be called from the owning package's init function. Reserving a kind
// twice with the same owner is a no-op; an empty name or owner, or a second
// owner, panics: it is a programming error in ratelane, found at start.
func ReserveKind(name, owner string) {
	if name == "" || owner == "" {
		panic("job.ReserveKind: name and owner are required")
	}
	reserved.Lock()
	defer reserved.Unlock()
	if prev, ok := reserved.kinds[name]; ok && prev.Owner != owner {
		panic(fmt.Sprintf("job.ReserveKind: kind %q is already reserved by %s", name, prev.Owner))
	}
	reserved.kinds[name] = BuiltinKind{Name: name, Owner: owner}
}

// Reserved reports whether kind is a built-in kind: reserved with
// ReserveKind, or under ReservedPrefix.
func Reserved(kind string) (BuiltinKind, bool) {
	reserved.RLock()
	k, ok := reserved.kinds[kind]
	reserved.RUnlock()
	if ok {
		return k, true
	}
	if strings.HasPrefix(kind, ReservedPrefix) {
		return BuiltinKind{Name: kind, Owner: "ratelane itself (the " + ReservedPrefix + " namespace)"}, true
	}
	return BuiltinKind{}, false
}

// ReservedKinds returns every kind reserved with ReserveKind, sorted by
// name. ReservedPrefix is not listed; document it beside the list.
func ReservedKinds() []BuiltinKind {
	reserved.RLock()
	defer reserved.RUnlock()
	out := make([]BuiltinKind, 0, len(reserved.kinds))
	for _, k := range reserved.kinds {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b BuiltinKind) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ReservedKindError is the refusal of a built-in kind on a public path: a
// producer's insert (Field "kind") or an external worker's lease (Field
// "kinds"). The HTTP API answers it 422.
type ReservedKindError struct {
	// Field is the request field that named the kind.
	Field string
	// Kind is the built-in kind and its owner.
	Kind BuiltinKind
}

func (e *ReservedKindError) Error() string {
	return fmt.Sprintf("%s: kind %q is reserved for %s: ratelane creates and runs jobs of this kind itself, "+
		"so they cannot be enqueued or leased directly; use a kind name of your own", e.Field, e.Kind.Name, e.Kind.Owner)
}

// CheckPublicKind returns a *ReservedKindError naming field when kind is a
// built-in kind, and nil otherwise. Every public insert and lease path
// calls it; ratelane's own code paths insert through the store and never
// do.
func CheckPublicKind(field, kind string) error {
	if k, ok := Reserved(kind); ok {
		return &ReservedKindError{Field: field, Kind: k}
	}
	return nil
}
