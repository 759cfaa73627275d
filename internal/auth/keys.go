package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Store manages API keys: what the HTTP API and the bootstrap need. *Keys is
// the implementation, over a Backend (the sqlite or postgres subpackage).
type Store interface {
	// Create generates a key and stores its hash. The returned secret is
	// the whole key string; it is not stored and cannot be shown again.
	// Bad input is a *job.ValidationError.
	Create(ctx context.Context, tenant string, role Role, regions []string, name string) (secret string, info KeyInfo, err error)
	// Import stores a key generated elsewhere (RATELANE_ADMIN_KEY, a secret
	// manager). It is idempotent: importing the same key again returns the
	// stored info. ErrKeyExists when another key has the same id;
	// ErrRevokedKey when this key was revoked.
	Import(ctx context.Context, secret string, tenant string, role Role, regions []string, name string) (KeyInfo, error)
	// Authenticate returns the principal of a bearer token. It accepts the
	// bare key or an Authorization header value ("Bearer rl_..."). A
	// malformed or unknown key is ErrUnknownKey; a revoked one ErrRevokedKey.
	Authenticate(ctx context.Context, bearer string) (Principal, error)
	// List returns every key, revoked ones included, ordered by creation.
	List(ctx context.Context) ([]KeyInfo, error)
	// Revoke revokes a key by id (ErrNotFound when there is none). Revoking
	// a revoked key keeps its first revocation time.
	Revoke(ctx context.Context, id string) error
}

// Backend is the storage under Keys: rows of Record. Implementations (the
// sqlite and postgres subpackages) are safe for concurrent use and share the
// authtest conformance suite.
type Backend interface {
	// InsertKey stores a new record; ErrKeyExists when its id is taken.
	InsertKey(ctx context.Context, r Record) error
	// GetKey returns the record with that id, or ErrNotFound.
	GetKey(ctx context.Context, id string) (Record, error)
	// ListKeys returns every key ordered by creation time, then id.
	ListKeys(ctx context.Context) ([]KeyInfo, error)
	// RevokeKey sets revoked_at to at unless it is already set; ErrNotFound
	// when there is no such key.
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// Close releases the backend's connections.
	Close() error
}

// CacheTTL is how long Keys remembers a successful authentication. It bounds
// how long a key revoked on another node keeps working; on the node that
// revokes it, revocation is immediate.
const CacheTTL = time.Second

// maxCached bounds the cache; when full it is emptied rather than evicted
// piecemeal, which is simple and only costs one lookup per active key.
const maxCached = 10_000

// Keys is the Store over a Backend. It is safe for concurrent use.
//
// Authenticate keeps a small positive cache from the key's hash to its
// principal for CacheTTL, so that a busy API does not read the backend on
// every request. It caches nothing that would let anyone authenticate: the
// hash is what the backend stores anyway, and unknown keys are not cached.
type Keys struct {
	b   Backend
	now func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	p       Principal
	expires time.Time
}

var _ Store = (*Keys)(nil)

// NewKeys returns a Store over b. now is the clock; nil means time.Now.
func NewKeys(b Backend, now func() time.Time) *Keys {
	if now == nil {
		now = time.Now
	}
	return &Keys{b: b, now: now, cache: map[string]cached{}}
}

// Close closes the backend.
func (k *Keys) Close() error { return k.b.Close() }

// Create generates and stores a new key. See Store.Create.
func (k *Keys) Create(ctx context.Context, tenant string, role Role, regions []string, name string) (string, KeyInfo, error) {
	info := KeyInfo{Name: name, Tenant: tenant, Role: role, Regions: regions}
	if err := validateInfo(&info); err != nil {
		return "", KeyInfo{}, err
	}
	// An id collision (1 in 36^8 per pair) is retried with a fresh key.
	for range 3 {
		secret, err := NewKey()
		if err != nil {
			return "", KeyInfo{}, err
		}
		id, hash, err := ParseKey(secret)
		if err != nil {
			return "", KeyInfo{}, err
		}
		info.ID, info.CreatedAt = id, k.now().UTC()
		err = k.b.InsertKey(ctx, Record{KeyInfo: info, Hash: hash})
		if errors.Is(err, ErrKeyExists) {
			continue
		}
		if err != nil {
			return "", KeyInfo{}, fmt.Errorf("create key: %w", err)
		}
		return secret, info, nil
	}
	return "", KeyInfo{}, fmt.Errorf("create key: %w three times in a row", ErrKeyExists)
}

// Import stores a key generated elsewhere. See Store.Import.
func (k *Keys) Import(ctx context.Context, secret string, tenant string, role Role, regions []string, name string) (KeyInfo, error) {
	id, hash, err := ParseKey(secret)
	if err != nil {
		return KeyInfo{}, err
	}
	info := KeyInfo{ID: id, Name: name, Tenant: tenant, Role: role, Regions: regions, CreatedAt: k.now().UTC()}
	if err := validateInfo(&info); err != nil {
		return KeyInfo{}, err
	}
	err = k.b.InsertKey(ctx, Record{KeyInfo: info, Hash: hash})
	if err == nil {
		return info, nil
	}
	if !errors.Is(err, ErrKeyExists) {
		return KeyInfo{}, fmt.Errorf("import key %s: %w", id, err)
	}
	rec, err := k.b.GetKey(ctx, id)
	if err != nil {
		return KeyInfo{}, fmt.Errorf("import key %s: %w", id, err)
	}
	switch {
	case subtle.ConstantTimeCompare(rec.Hash, hash) != 1:
		return KeyInfo{}, fmt.Errorf("import key %s: %w (with another secret)", id, ErrKeyExists)
	case rec.Revoked():
		return KeyInfo{}, fmt.Errorf("import key %s: %w", id, ErrRevokedKey)
	}
	return rec.KeyInfo, nil
}

// Authenticate returns the principal of a bearer token. See Store.Authenticate.
func (k *Keys) Authenticate(ctx context.Context, bearer string) (Principal, error) {
	if scheme, token, ok := strings.Cut(bearer, " "); ok && strings.EqualFold(scheme, "Bearer") {
		bearer = strings.TrimSpace(token)
	}
	id, hash, err := ParseKey(bearer)
	if err != nil {
		return Principal{}, ErrUnknownKey
	}
	now := k.now()
	if p, ok := k.cached(string(hash), now); ok {
		return p, nil
	}
	rec, err := k.b.GetKey(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Principal{}, ErrUnknownKey
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate key %s: %w", id, err)
	}
	// Constant time, so response timing does not reveal how much of a
	// guessed hash matched.
	if subtle.ConstantTimeCompare(rec.Hash, hash) != 1 {
		return Principal{}, ErrUnknownKey
	}
	if rec.Revoked() {
		return Principal{}, ErrRevokedKey
	}
	p := rec.Principal()
	k.remember(string(hash), p, now)
	return p, nil
}

func (k *Keys) cached(hash string, now time.Time) (Principal, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.cache[hash]
	if !ok || !now.Before(c.expires) {
		return Principal{}, false
	}
	return c.p, true
}

func (k *Keys) remember(hash string, p Principal, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.cache) >= maxCached {
		clear(k.cache)
	}
	k.cache[hash] = cached{p: p, expires: now.Add(CacheTTL)}
}

// List returns every key. See Store.List.
func (k *Keys) List(ctx context.Context) ([]KeyInfo, error) {
	keys, err := k.b.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return keys, nil
}

// Revoke revokes a key; on this node it stops working at once. See
// Store.Revoke.
func (k *Keys) Revoke(ctx context.Context, id string) error {
	if err := k.b.RevokeKey(ctx, id, k.now().UTC()); err != nil {
		return fmt.Errorf("revoke key %s: %w", id, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for h, c := range k.cache {
		if c.p.KeyID == id {
			delete(k.cache, h)
		}
	}
	return nil
}
