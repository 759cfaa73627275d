// Package signature computes and checks Standard Webhooks signatures: the
// HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}", carried as
// space-separated "v1,<base64>" entries in webhook-signature. It is the
// one copy both sides use: internal/webhook signs deliveries and verifies
// them for receivers written in Go, and internal/upstream's simulated
// receiver checks what it is sent. It imports only the standard library,
// so the simulator links no delivery code.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names, lower case as the specification writes
// them. net/http canonicalises them on the wire; receivers match them
// case-insensitively.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Errors returned by Verify. Callers branch on them with errors.Is; the
// messages never contain keys or payloads.
var (
	// ErrMissingHeaders: webhook-id, webhook-timestamp or webhook-signature
	// is missing or empty.
	ErrMissingHeaders = errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrInvalidTimestamp: webhook-timestamp is not integer Unix seconds.
	ErrInvalidTimestamp = errors.New("webhook-timestamp is not integer seconds")
	// ErrTimestampOutOfTolerance: webhook-timestamp is further from now than
	// the tolerance allows (a replay, or a badly skewed clock).
	ErrTimestampOutOfTolerance = errors.New("webhook-timestamp outside tolerance")
	// ErrNoMatchingSignature: no v1 signature in webhook-signature matches
	// the body under any of the keys.
	ErrNoMatchingSignature = errors.New("no matching webhook signature")
)

// Compute returns the standard base64 of HMAC-SHA256(key,
// "{id}.{ts}.{body}"): a v1 signature without its "v1," prefix. ts is the
// webhook-timestamp header's text (Unix seconds).
func Compute(key []byte, id, ts string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	sum := mac.Sum(nil)
	out := make([]byte, base64.StdEncoding.EncodedLen(len(sum)))
	base64.StdEncoding.Encode(out, sum)
	return out
}

// Verify checks received headers and body the way a Standard Webhooks
// receiver does: webhook-id, webhook-timestamp (1 to 18 ASCII digits of
// Unix seconds, within tolerance of now either way) and webhook-signature
// must be present, and one of its "v1,<base64>" entries must equal
// Compute under one of keys, compared in constant time. Several keys
// model a secret rotation in progress; entries of other versions are
// ignored. tolerance is used as given (0 accepts only now's second). It
// returns nil or one of the Err* values above, and is safe for
// concurrent use.
func Verify(keys [][]byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	unix, ok := parseUnix(ts)
	if !ok {
		return ErrInvalidTimestamp
	}
	if skew := now.Unix() - unix; skew > int64(tolerance/time.Second) || skew < -int64(tolerance/time.Second) {
		return ErrTimestampOutOfTolerance
	}
	for _, key := range keys {
		want := Compute(key, id, ts, body)
		for entry := range strings.FieldsSeq(sigs) {
			version, sig, ok := strings.Cut(entry, ",")
			if ok && version == "v1" && hmac.Equal([]byte(sig), want) {
				return nil
			}
		}
	}
	return ErrNoMatchingSignature
}

// parseUnix parses webhook-timestamp: 1 to 18 ASCII digits, so no sign, no
// spaces and no overflow (18 digits is past the year 30 billion).
func parseUnix(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
