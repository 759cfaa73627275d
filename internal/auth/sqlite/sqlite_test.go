package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/auth/authtest"
	"github.com/ratelane/ratelane/internal/auth/sqlite"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	authtest.Run(t, func(t *testing.T) auth.Backend {
		return open(t, filepath.Join(t.TempDir(), sqlite.FileName))
	})
}

// TestDurableAndNotInClear reopens the file: keys survive a restart, and
// no byte of the database (or its WAL) holds a secret.
func TestDurableAndNotInClear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, sqlite.FileName)
	k := auth.NewKeys(open(t, path), nil)
	secret, info, err := k.Create(ctx, "acme", auth.RoleWorker, []string{"eu"}, "w")
	if err != nil {
		t.Fatal(err)
	}
	secretPart := secret[len("rl_12345678_"):]
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), secretPart) {
			t.Fatalf("%s holds the secret in clear", f)
		}
	}
	k2 := auth.NewKeys(open(t, path), nil)
	p, err := k2.Authenticate(ctx, secret)
	if err != nil || p.KeyID != info.ID || !p.CanUseRegion("eu") || p.CanUseRegion("us") {
		t.Fatalf("after reopen: %+v, %v", p, err)
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
