package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// Key format. A key is "rl_<prefix>_<secret>": the prefix is the key's id,
// public and safe to log; the secret is the credential. Only the SHA-256 of
// the whole key is stored. A plain (unsalted, fast) hash is enough because
// the secret is 256 random bits: there is no dictionary to attack, and a
// slow KDF would only slow down every API request.
const (
	// KeyPrefix starts every key, so that leaked keys are easy to recognise
	// (secret scanners match on it).
	KeyPrefix = "rl_"
	// IDLen is the length of a key's id: lower-case letters and digits.
	IDLen = 8
	// MinSecretLen is the shortest secret accepted: 43 base62 characters
	// are 256 bits. Generated secrets are 52 base32 characters (32 bytes).
	MinSecretLen = 43
	// MaxSecretLen bounds the secret so a huge bearer is rejected before it
	// is hashed.
	MaxSecretLen = 128
	// MaxRegions bounds how many regions one key may name.
	MaxRegions = 32
)

// Errors callers branch on.
var (
	// ErrUnknownKey: the bearer is malformed or no key matches it. The HTTP
	// API answers 401.
	ErrUnknownKey = errors.New("unknown API key")
	// ErrRevokedKey: the bearer matches a revoked key. It is reported only
	// to someone who holds the key's full secret. The HTTP API answers 401.
	ErrRevokedKey = errors.New("API key revoked")
	// ErrNotFound: no key with that id (Revoke).
	ErrNotFound = errors.New("API key not found")
	// ErrKeyExists: a backend already holds a key with that id.
	ErrKeyExists = errors.New("API key id already exists")
)

// KeyInfo is everything about a key except its secret and hash; it is what
// List returns and what may be shown to an admin.
type KeyInfo struct {
	// ID is the key's public prefix; safe to log.
	ID string `json:"id"`
	// Name is a free-form label ("billing worker").
	Name string `json:"name"`
	// Tenant scopes the jobs the key creates and reads.
	Tenant string `json:"tenant"`
	// Role is what the key may do.
	Role Role `json:"role"`
	// Regions the key may use; empty means every region.
	Regions []string `json:"regions"`
	// CreatedAt is when the key was created.
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is when the key was revoked; zero while it is active.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// Principal returns who a request authenticated with this key acts as.
func (k KeyInfo) Principal() Principal {
	return Principal{KeyID: k.ID, Tenant: k.Tenant, Role: k.Role, Regions: k.Regions}
}

// Revoked reports whether the key has been revoked.
func (k KeyInfo) Revoked() bool { return !k.RevokedAt.IsZero() }

// Record is a key as a backend stores it: its info and the SHA-256 of the
// whole key string.
type Record struct {
	KeyInfo
	Hash []byte
}

// secretEncoding renders generated secrets: lower-case base32 without
// padding, so a key is one "word" that survives double-click selection,
// shells and URLs.
var secretEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// idAlphabet is the alphabet of key ids.
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewKey generates a key string: a random id and a 32-byte secret from
// crypto/rand. Most callers want Keys.Create, which also stores it.
func NewKey() (string, error) {
	var id [IDLen]byte
	var secret [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	for i, b := range id {
		// 256 % 36 != 0 gives a slight bias; the id is not a secret, it only
		// has to be unlikely to collide (Create retries when it does).
		id[i] = idAlphabet[int(b)%len(idAlphabet)]
	}
	return KeyPrefix + string(id[:]) + "_" + secretEncoding.EncodeToString(secret[:]), nil
}

// ParseKey checks that s has the key format and returns its id and the
// SHA-256 of the whole key. The error describes the format (never the key
// itself), so it may be shown to the person who configured it.
func ParseKey(s string) (id string, hash []byte, err error) {
	rest, ok := strings.CutPrefix(s, KeyPrefix)
	if !ok || len(rest) < IDLen+1 || rest[IDLen] != '_' {
		return "", nil, errKeyFormat
	}
	id, secret := rest[:IDLen], rest[IDLen+1:]
	if !allIn(id, isIDChar) || len(secret) < MinSecretLen || len(secret) > MaxSecretLen || !allIn(secret, isSecretChar) {
		return "", nil, errKeyFormat
	}
	sum := sha256.Sum256([]byte(s))
	return id, sum[:], nil
}

var errKeyFormat = fmt.Errorf("an API key looks like %s<%d characters a-z 0-9>_<%d to %d characters A-Z a-z 0-9>",
	KeyPrefix, IDLen, MinSecretLen, MaxSecretLen)

func isIDChar(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func isSecretChar(c byte) bool { return isIDChar(c) || c >= 'A' && c <= 'Z' }

func allIn(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// validateInfo checks what a caller sets on a new key, one entry per field
// so the HTTP API can answer with per-field violations. It also
// de-duplicates the regions.
func validateInfo(k *KeyInfo) error {
	ve := &job.ValidationError{}
	add := func(field, detail string) {
		ve.Fields = append(ve.Fields, job.FieldError{Field: field, Detail: detail})
	}
	if msg := checkName("tenant", k.Tenant, true); msg != "" {
		add("tenant", msg)
	}
	if msg := checkName("name", k.Name, false); msg != "" {
		add("name", msg)
	}
	if !k.Role.Valid() {
		add("role", fmt.Sprintf("role must be %q, %q or %q, not %q", RoleProducer, RoleWorker, RoleAdmin, k.Role))
	}
	if len(k.Regions) > MaxRegions {
		add("regions", fmt.Sprintf("a key names at most %d regions, got %d", MaxRegions, len(k.Regions)))
	}
	regions := []string{} // never nil, so JSON shows [] (every region)
	for _, r := range k.Regions {
		if msg := checkName("region", r, true); msg != "" {
			add("regions", msg)
		} else if !slices.Contains(regions, r) {
			regions = append(regions, r)
		}
	}
	k.Regions = regions
	if len(ve.Fields) > 0 {
		return ve
	}
	return nil
}

func checkName(field, v string, required bool) string {
	switch {
	case v == "" && required:
		return field + " is required"
	case len(v) > job.MaxNameLen:
		return fmt.Sprintf("%s is %d bytes long; the limit is %d", field, len(v), job.MaxNameLen)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return field + " must not contain control characters"
	}
	return ""
}
