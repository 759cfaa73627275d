package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/ratelane/ratelane/internal/admission"
)

// LimitFingerprint identifies a declared limit configuration: equal for
// declarations that configure a key alike (defaults applied), different
// when any field differs. DeclareLimit stores it with the key (column
// declared, migration 0010) to tell a restart with the same declaration,
// which must not undo an operator's change, from a changed declaration.
func LimitFingerprint(c admission.Config) string {
	b, err := json.Marshal(c.WithDefaults())
	if err != nil {
		// admission.Config is plain data; Marshal cannot fail on it.
		panic("store: marshal limit config: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
