package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ratelane/ratelane/internal/atomicfile"
)

// Bootstrap identity of the first admin key.
const (
	// AdminTenant is the tenant of the bootstrap admin key.
	AdminTenant = "admin"
	// AdminKeyFile is the file in the data directory that receives a
	// generated admin key, readable by its owner only.
	AdminKeyFile = "admin.key"
	// AdminKeyEnv is the environment variable that supplies an admin key.
	AdminKeyEnv = "RATELANE_ADMIN_KEY"
)

// Bootstrap makes sure a fresh server can be administered.
//
// When envKey (the value of RATELANE_ADMIN_KEY) is set, it is imported as an
// admin key of tenant "admin" for every region; this is idempotent, so every
// start may do it. A malformed envKey, or one whose id is taken by another
// key or that was revoked, is an error that names the problem but never
// echoes the key.
//
// Otherwise, when s holds no key at all (the first start), Bootstrap
// generates an admin key, writes it to <dataDir>/admin.key with mode 0600,
// stores it, and returns a message holding the key for the caller to print
// once. On later starts it does nothing and returns "".
//
// The file is written before the key is stored: if storing fails, the next
// start simply generates a new key and overwrites the file, whereas the
// other order could leave a stored admin key nobody has.
func Bootstrap(ctx context.Context, s Store, envKey string, dataDir string) (printed string, err error) {
	if envKey != "" {
		id, _, err := ParseKey(envKey)
		if err != nil {
			return "", fmt.Errorf("%s is malformed: %w", AdminKeyEnv, err)
		}
		_, err = s.Import(ctx, envKey, AdminTenant, RoleAdmin, nil, AdminKeyEnv)
		switch {
		case errors.Is(err, ErrKeyExists):
			return "", fmt.Errorf("%s: its id %q is already used by another key; choose another id", AdminKeyEnv, id)
		case errors.Is(err, ErrRevokedKey):
			return "", fmt.Errorf("%s: this key has been revoked; set a new one", AdminKeyEnv)
		case err != nil:
			return "", fmt.Errorf("bootstrap admin key: %w", err)
		}
		return "", nil
	}
	keys, err := s.List(ctx)
	if err != nil {
		return "", fmt.Errorf("bootstrap admin key: %w", err)
	}
	if len(keys) > 0 {
		return "", nil
	}
	if dataDir == "" {
		return "", fmt.Errorf("bootstrap admin key: no keys exist, %s is not set and there is no data directory to write %s to", AdminKeyEnv, AdminKeyFile)
	}
	secret, err := NewKey()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dataDir, AdminKeyFile)
	if err := writeSecretFile(path, secret+"\n"); err != nil {
		return "", fmt.Errorf("bootstrap admin key: %w", err)
	}
	info, err := s.Import(ctx, secret, AdminTenant, RoleAdmin, nil, "bootstrap admin")
	if err != nil {
		return "", fmt.Errorf("bootstrap admin key: %w", err)
	}
	return fmt.Sprintf("ratelane: created admin key %s (tenant %q, role admin), also written to %s (mode 0600).\n"+
		"It is shown only this once; store it in a secret manager:\n\n    %s\n\n", info.ID, AdminTenant, path, secret), nil
}

// writeSecretFile writes data to path atomically and durably
// (internal/atomicfile) with mode 0600 from the start, so the key is never
// readable by others, not even briefly.
func writeSecretFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, 0o600, func(w io.Writer) error {
		_, err := io.WriteString(w, data)
		return err
	})
}
