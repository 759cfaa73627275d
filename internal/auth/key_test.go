package auth

import (
	"bytes"
	"crypto/sha256"
	"regexp"
	"strings"
	"testing"
)

func TestNewKeyFormat(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^rl_[a-z0-9]{8}_[a-z2-7]{52}$`)
	seen := map[string]bool{}
	for range 100 {
		k, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(k) {
			t.Fatalf("NewKey() = %q, does not match %s", k, re)
		}
		if seen[k] {
			t.Fatal("NewKey repeated a key")
		}
		seen[k] = true
		id, hash, err := ParseKey(k)
		sum := sha256.Sum256([]byte(k))
		if err != nil || id != k[3:11] || string(hash) != string(sum[:]) {
			t.Fatalf("ParseKey(NewKey()) = %q, %x, %v", id, hash, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	secret43 := strings.Repeat("aZ9", 14) + "x"
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"rl_abcd1234_" + secret43, true},
		{"rl_abcd1234_" + strings.Repeat("f", 64), true}, // openssl rand -hex 32
		{"rl_abcd1234_" + strings.Repeat("f", MaxSecretLen), true},
		{"rl_abcd1234_" + strings.Repeat("f", MaxSecretLen+1), false},
		{"rl_abcd1234_" + secret43[:42], false},
		{"rl_ABCD1234_" + secret43, false},
		{"rl_abcd123_" + secret43, false},
		{"rl_abcd12345_" + secret43, false},
		{"rk_abcd1234_" + secret43, false},
		{"rl_abcd1234-" + secret43, false},
		{"rl_abcd1234_" + secret43 + "_", false},
		{"rl_abcd1234_" + secret43 + "é", false},
		{"", false},
		{"rl_", false},
	} {
		id, _, err := ParseKey(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("ParseKey(%q) error = %v, want ok=%v", tc.key, err, tc.ok)
		}
		if err != nil && len(tc.key) > 8 && strings.Contains(err.Error(), tc.key) {
			t.Errorf("ParseKey error echoes the key: %v", err)
		}
		if err == nil && id != "abcd1234" {
			t.Errorf("ParseKey(%q) id = %q", tc.key, id)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	k, _ := NewKey()
	f.Add(k)
	f.Add("rl_abcd1234_" + strings.Repeat("A", 43))
	f.Add("rl__")
	f.Fuzz(func(t *testing.T, s string) {
		id, hash, err := ParseKey(s)
		if err != nil {
			return
		}
		if len(id) != IDLen || !allIn(id, isIDChar) || len(hash) != sha256.Size || !strings.HasPrefix(s, KeyPrefix+id+"_") {
			t.Fatalf("ParseKey(%q) accepted a bad key: id %q", s, id)
		}
		// The stored hash is of the whole key as given: a key that
		// parsed, hashed any other way, would never match its row.
		if sum := sha256.Sum256([]byte(s)); !bytes.Equal(hash, sum[:]) {
			t.Fatalf("ParseKey(%q) hash %x, want SHA-256 of the key", s, hash)
		}
	})
}

func TestRoleValid(t *testing.T) {
	t.Parallel()
	for _, r := range Roles {
		if !r.Valid() {
			t.Errorf("%q not valid", r)
		}
	}
	if Role("root").Valid() || Role("").Valid() {
		t.Error("unknown role valid")
	}
}
