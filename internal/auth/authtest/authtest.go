// Package authtest is the conformance suite every auth.Backend passes: run
// Run from each backend's tests with a constructor of fresh, empty backends.
// It tests the backends through auth.Keys, the Store the API uses, and
// Bootstrap, so every behaviour callers rely on is proven on every backend.
package authtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/testkit"
)

// NewBackend returns a fresh, empty backend; it must close it in t.Cleanup.
// Two calls in one test must return independent backends.
type NewBackend func(t *testing.T) auth.Backend

// Run runs the suite. Every subtest is parallel and has its own backend.
func Run(t *testing.T, newBackend NewBackend) {
	tests := map[string]func(*testing.T, NewBackend){
		"CreateAuthenticate":  testCreateAuthenticate,
		"NotStoredInClear":    testNotStoredInClear,
		"UnknownAndMalformed": testUnknownAndMalformed,
		"Revoke":              testRevoke,
		"RevokeOtherNode":     testRevokeOtherNode,
		"Validation":          testValidation,
		"Import":              testImport,
		"List":                testList,
		"Concurrent":          testConcurrent,
		"BootstrapGenerated":  testBootstrapGenerated,
		"BootstrapEnv":        testBootstrapEnv,
		"BootstrapErrors":     testBootstrapErrors,
	}
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newBackend)
		})
	}
}

func newKeys(t *testing.T, nb NewBackend) (*auth.Keys, auth.Backend, *testkit.Clock) {
	t.Helper()
	c := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC))
	b := nb(t)
	return auth.NewKeys(b, c.Now), b, c
}

func mustCreate(t *testing.T, k auth.Store, tenant string, role auth.Role, regions ...string) (string, auth.KeyInfo) {
	t.Helper()
	secret, info, err := k.Create(context.Background(), tenant, role, regions, "test key")
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return secret, info
}

func testCreateAuthenticate(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, b, c := newKeys(t, nb)
	secret, info := mustCreate(t, k, "acme", auth.RoleProducer, "eu", "us", "eu")
	id, _, err := auth.ParseKey(secret)
	if err != nil || id != info.ID || !strings.HasPrefix(secret, "rl_"+info.ID+"_") {
		t.Fatalf("secret %q does not have the key format with id %q: %v", secret[:12], info.ID, err)
	}
	want := auth.KeyInfo{ID: id, Name: "test key", Tenant: "acme", Role: auth.RoleProducer, Regions: []string{"eu", "us"}, CreatedAt: c.Now()}
	if !equalInfo(info, want) {
		t.Fatalf("Create info = %+v, want %+v", info, want)
	}
	for _, bearer := range []string{secret, "Bearer " + secret, "bearer  " + secret} {
		p, err := k.Authenticate(ctx, bearer)
		if err != nil {
			t.Fatalf("Authenticate(%.16s...): %v", bearer, err)
		}
		if p.KeyID != id || p.Tenant != "acme" || p.Role != auth.RoleProducer || !p.CanUseRegion("eu") || p.CanUseRegion("ap") {
			t.Fatalf("principal = %+v", p)
		}
	}
	// A second Keys over the same backend (another node) authenticates
	// from storage, not from the first one's cache.
	p, err := auth.NewKeys(unclosable{b}, c.Now).Authenticate(ctx, secret)
	if err != nil || p.KeyID != id {
		t.Fatalf("other node: %+v, %v", p, err)
	}
}

// unclosable wraps a backend shared by two Keys so that only its owner
// closes it.
type unclosable struct{ auth.Backend }

func (unclosable) Close() error { return nil }

func equalInfo(a, b auth.KeyInfo) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Tenant == b.Tenant && a.Role == b.Role &&
		strings.Join(a.Regions, ",") == strings.Join(b.Regions, ",") &&
		a.CreatedAt.Equal(b.CreatedAt) && a.RevokedAt.Equal(b.RevokedAt)
}

func testNotStoredInClear(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, b, _ := newKeys(t, nb)
	secret, info := mustCreate(t, k, "acme", auth.RoleWorker)
	rec, err := b.GetKey(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, hash, _ := auth.ParseKey(secret)
	if string(rec.Hash) != string(hash) {
		t.Fatalf("stored hash is not SHA-256 of the key")
	}
	tail := secret[len(secret)-20:]
	for _, field := range []string{string(rec.Hash), rec.Name, rec.Tenant, rec.ID} {
		if strings.Contains(field, tail) {
			t.Fatalf("the secret is stored in clear")
		}
	}
}

func testUnknownAndMalformed(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, _ := newKeys(t, nb)
	secret, info := mustCreate(t, k, "acme", auth.RoleWorker)
	other, _ := auth.NewKey()
	sameIDOtherSecret := "rl_" + info.ID + "_" + other[len("rl_12345678_"):]
	for name, bearer := range map[string]string{
		"empty":            "",
		"unknown":          other,
		"wrong secret":     sameIDOtherSecret,
		"truncated":        secret[:len(secret)-20],
		"no prefix":        strings.TrimPrefix(secret, "rl_"),
		"upper id":         "rl_" + strings.ToUpper(info.ID) + secret[11:],
		"bad char":         secret[:30] + "!" + secret[31:],
		"basic scheme":     "Basic " + secret,
		"trailing garbage": secret + " x",
		"huge":             "rl_" + info.ID + "_" + strings.Repeat("a", 10000),
	} {
		if _, err := k.Authenticate(ctx, bearer); !errors.Is(err, auth.ErrUnknownKey) {
			t.Errorf("%s: Authenticate = %v, want ErrUnknownKey", name, err)
		}
	}
}

func testRevoke(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, c := newKeys(t, nb)
	secret, info := mustCreate(t, k, "acme", auth.RoleAdmin)
	keep, _ := mustCreate(t, k, "acme", auth.RoleAdmin)
	if _, err := k.Authenticate(ctx, secret); err != nil { // fill the cache
		t.Fatal(err)
	}
	revokedAt := c.Now()
	if err := k.Revoke(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	// On the node that revoked it, at once, without waiting for the cache.
	if _, err := k.Authenticate(ctx, secret); !errors.Is(err, auth.ErrRevokedKey) {
		t.Fatalf("Authenticate after Revoke = %v, want ErrRevokedKey", err)
	}
	if _, err := k.Authenticate(ctx, keep); err != nil {
		t.Fatalf("another key stopped working: %v", err)
	}
	c.Add(time.Hour)
	if err := k.Revoke(ctx, info.ID); err != nil {
		t.Fatalf("second Revoke: %v", err)
	}
	keys, _ := k.List(ctx)
	for _, ki := range keys {
		if ki.ID == info.ID && !ki.RevokedAt.Equal(revokedAt) {
			t.Fatalf("revoked_at = %v, want the first revocation %v", ki.RevokedAt, revokedAt)
		}
	}
	if err := k.Revoke(ctx, "zzzzzzzz"); !errors.Is(err, auth.ErrNotFound) {
		t.Fatalf("Revoke unknown = %v, want ErrNotFound", err)
	}
}

// testRevokeOtherNode proves the cache bound: a key revoked through one
// node stops working on another node within auth.CacheTTL.
func testRevokeOtherNode(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	a, b, c := newKeys(t, nb)
	other := auth.NewKeys(unclosable{b}, c.Now)
	secret, info := mustCreate(t, a, "acme", auth.RoleWorker)
	if _, err := a.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := other.Revoke(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	c.Add(auth.CacheTTL)
	if _, err := a.Authenticate(ctx, secret); !errors.Is(err, auth.ErrRevokedKey) {
		t.Fatalf("Authenticate on another node %v after Revoke = %v, want ErrRevokedKey", auth.CacheTTL, err)
	}
}

func testValidation(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, _ := newKeys(t, nb)
	for name, tc := range map[string]struct {
		tenant  string
		role    auth.Role
		regions []string
		name    string
		field   string
	}{
		"no tenant":     {"", auth.RoleWorker, nil, "", "tenant"},
		"bad role":      {"acme", "root", nil, "", "role"},
		"empty region":  {"acme", auth.RoleWorker, []string{""}, "", "regions"},
		"control chars": {"acme", auth.RoleWorker, nil, "a\nb", "name"},
		"long tenant":   {strings.Repeat("t", job.MaxNameLen+1), auth.RoleWorker, nil, "", "tenant"},
	} {
		_, _, err := k.Create(ctx, tc.tenant, tc.role, tc.regions, tc.name)
		var ve *job.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != tc.field {
			t.Errorf("%s: Create = %v, want a ValidationError on %s", name, err, tc.field)
		}
	}
	if keys, _ := k.List(ctx); len(keys) != 0 {
		t.Fatalf("invalid keys were stored: %+v", keys)
	}
}

func testImport(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, _ := newKeys(t, nb)
	secret, _ := auth.NewKey()
	info, err := k.Import(ctx, secret, "ops", auth.RoleAdmin, []string{"us"}, "imported")
	if err != nil {
		t.Fatal(err)
	}
	again, err := k.Import(ctx, secret, "ops", auth.RoleAdmin, []string{"us"}, "imported")
	if err != nil || !equalInfo(info, again) {
		t.Fatalf("Import again = %+v, %v; want %+v", again, err, info)
	}
	if p, err := k.Authenticate(ctx, secret); err != nil || p.Tenant != "ops" || p.Role != auth.RoleAdmin {
		t.Fatalf("Authenticate imported = %+v, %v", p, err)
	}
	other, _ := auth.NewKey()
	clash := secret[:len("rl_12345678_")] + other[len("rl_12345678_"):]
	if _, err := k.Import(ctx, clash, "ops", auth.RoleAdmin, nil, ""); !errors.Is(err, auth.ErrKeyExists) {
		t.Fatalf("Import with a taken id = %v, want ErrKeyExists", err)
	}
	if _, err := k.Import(ctx, "rl_short_abc", "ops", auth.RoleAdmin, nil, ""); err == nil {
		t.Fatal("Import of a malformed key succeeded")
	}
	if err := k.Revoke(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Import(ctx, secret, "ops", auth.RoleAdmin, []string{"us"}, "imported"); !errors.Is(err, auth.ErrRevokedKey) {
		t.Fatalf("Import of a revoked key = %v, want ErrRevokedKey", err)
	}
}

func testList(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, c := newKeys(t, nb)
	if keys, err := k.List(ctx); err != nil || keys == nil || len(keys) != 0 {
		t.Fatalf("List of no keys = %#v, %v; want an empty, non-nil slice", keys, err)
	}
	var want []auth.KeyInfo
	for _, tenant := range []string{"a", "b", "c"} {
		_, info := mustCreate(t, k, tenant, auth.RoleProducer)
		want = append(want, info)
		c.Add(time.Millisecond)
	}
	keys, err := k.List(ctx)
	if err != nil || len(keys) != len(want) {
		t.Fatalf("List = %+v, %v", keys, err)
	}
	for i := range want {
		if !equalInfo(keys[i], want[i]) {
			t.Errorf("List[%d] = %+v, want %+v", i, keys[i], want[i])
		}
		if keys[i].Regions == nil {
			t.Errorf("List[%d].Regions is nil; want [] so JSON says every region explicitly", i)
		}
	}
}

func testConcurrent(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, _ := newKeys(t, nb)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Go(func() {
			secret, _, err := k.Create(ctx, "acme", auth.RoleWorker, nil, "")
			if err != nil {
				errs <- err
				return
			}
			for range 20 {
				if _, err := k.Authenticate(ctx, secret); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testBootstrapGenerated(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, _ := newKeys(t, nb)
	dir := t.TempDir()
	printed, err := auth.Bootstrap(ctx, k, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, auth.AdminKeyFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(data))
	if !strings.Contains(printed, secret) || !strings.Contains(printed, path) {
		t.Fatalf("printed text does not hold the key and its file:\n%s", printed)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin key file mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	p, err := k.Authenticate(ctx, secret)
	if err != nil || p.Role != auth.RoleAdmin || p.Tenant != auth.AdminTenant || len(p.Regions) != 0 {
		t.Fatalf("bootstrap key principal = %+v, %v", p, err)
	}
	// A later start does nothing: no new key, the file is kept.
	printed, err = auth.Bootstrap(ctx, k, "", dir)
	if err != nil || printed != "" {
		t.Fatalf("second Bootstrap = %q, %v; want nothing", printed, err)
	}
	if keys, _ := k.List(ctx); len(keys) != 1 {
		t.Fatalf("%d keys after two starts, want 1", len(keys))
	}
	if data2, _ := os.ReadFile(path); string(data2) != string(data) {
		t.Fatal("second Bootstrap rewrote the admin key file")
	}
}

func testBootstrapEnv(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, _ := newKeys(t, nb)
	dir := t.TempDir()
	env, _ := auth.NewKey()
	for range 2 { // idempotent: every start imports it again
		printed, err := auth.Bootstrap(ctx, k, env, dir)
		if err != nil || printed != "" {
			t.Fatalf("Bootstrap with env key = %q, %v", printed, err)
		}
	}
	if keys, _ := k.List(ctx); len(keys) != 1 || keys[0].Tenant != auth.AdminTenant || keys[0].Role != auth.RoleAdmin {
		t.Fatalf("keys after env bootstrap = %+v", keys)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.AdminKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an env key must not be written to disk: %v", err)
	}
	if p, err := k.Authenticate(ctx, env); err != nil || p.Role != auth.RoleAdmin {
		t.Fatalf("env key principal = %+v, %v", p, err)
	}
}

func testBootstrapErrors(t *testing.T, nb NewBackend) {
	ctx := context.Background()
	k, _, _ := newKeys(t, nb)
	const bad = "rl_UPPER123_secret"
	_, err := auth.Bootstrap(ctx, k, bad, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), auth.AdminKeyEnv) || strings.Contains(err.Error(), bad) {
		t.Fatalf("malformed env key: %v; want an error naming %s and not echoing the key", err, auth.AdminKeyEnv)
	}
	env, _ := auth.NewKey()
	if _, err := auth.Bootstrap(ctx, k, env, ""); err != nil {
		t.Fatal(err)
	}
	keys, _ := k.List(ctx)
	if err := k.Revoke(ctx, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Bootstrap(ctx, k, env, ""); err == nil || !strings.Contains(err.Error(), "revoked") || strings.Contains(err.Error(), env) {
		t.Fatalf("revoked env key: %v; want an error saying it was revoked", err)
	}
	k2, _, _ := newKeys(t, nb)
	if _, err := auth.Bootstrap(ctx, k2, "", ""); err == nil {
		t.Fatal("Bootstrap with no keys, no env key and no data directory succeeded")
	}
}
