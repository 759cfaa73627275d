package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/webhook/signature"
)

// Standard Webhooks header names, lower case as the specification writes
// them (package signature's). net/http canonicalises them on the wire;
// receivers match them case-insensitively.
const (
	HeaderID        = signature.HeaderID
	HeaderTimestamp = signature.HeaderTimestamp
	HeaderSignature = signature.HeaderSignature
)

// SecretPrefix starts every secret ratelane issues, as the Standard Webhooks
// specification recommends, so that a secret is recognisable in a config
// file or a leak scanner.
const SecretPrefix = "whsec_"

// Secret key sizes in bytes. The specification asks for 24 to 64 random
// bytes; NewSecret uses 32, the size of an HMAC-SHA256 block's output.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
	newSecretBytes = 32
)

// DefaultTolerance is how far a webhook-timestamp may be from the
// verifier's clock, either way, before Verify refuses it; 5 minutes, as in
// the reference libraries. It bounds how long a captured request can be
// replayed.
const DefaultTolerance = 5 * time.Minute

// Errors returned by the signing functions. Callers branch on them with
// errors.Is; the messages never contain secrets or payloads.
var (
	// ErrInvalidSecret: a secret is not "whsec_" followed by standard
	// base64 of MinSecretBytes to MaxSecretBytes bytes.
	ErrInvalidSecret = errors.New("invalid webhook secret")
	// ErrNoSecret: there is no secret to sign or verify with.
	ErrNoSecret = errors.New("no webhook secret")
	// ErrMissingHeaders: webhook-id, webhook-timestamp or webhook-signature
	// is missing or empty.
	ErrMissingHeaders = signature.ErrMissingHeaders
	// ErrInvalidTimestamp: webhook-timestamp is not integer Unix seconds.
	ErrInvalidTimestamp = signature.ErrInvalidTimestamp
	// ErrTimestampOutOfTolerance: webhook-timestamp is further from now than
	// the tolerance allows (a replay, or a badly skewed clock).
	ErrTimestampOutOfTolerance = signature.ErrTimestampOutOfTolerance
	// ErrNoMatchingSignature: no v1 signature in webhook-signature matches
	// the body under any of the secrets.
	ErrNoMatchingSignature = signature.ErrNoMatchingSignature
)

// NewSecret returns a fresh secret: SecretPrefix followed by the standard
// base64 of 32 bytes from crypto/rand. crypto/rand does not fail on
// supported platforms (since Go 1.24 it crashes the program rather than
// return weak randomness), so NewSecret has no error to return.
func NewSecret() string {
	key := make([]byte, newSecretBytes)
	_, _ = rand.Read(key) // documented never to return an error
	return SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// ParseSecret decodes a secret into its HMAC key. The "whsec_" prefix is
// optional, as in the reference libraries, so a secret copied without it
// still works; the key must be MinSecretBytes to MaxSecretBytes long, so a
// truncated or placeholder secret is caught at configuration time rather
// than producing signatures no receiver accepts.
func ParseSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("%w: not standard base64 after %q", ErrInvalidSecret, SecretPrefix)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("%w: key is %d bytes, want %d to %d", ErrInvalidSecret, len(key), MinSecretBytes, MaxSecretBytes)
	}
	return key, nil
}

// Sign returns the Standard Webhooks signature of one message under one
// secret: "v1," followed by the standard base64 of
// HMAC-SHA256(key, "{msgID}.{unix seconds of ts}.{body}"). It is the value
// of webhook-signature when there is one secret; see SignAll for a
// rotation. The timestamp is truncated to whole seconds, as the header
// carries it. Sign fails only for an invalid secret or an empty msgID.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := ParseSecret(secret)
	if err != nil {
		return "", err
	}
	if msgID == "" {
		return "", errors.New("sign webhook: empty message id")
	}
	return "v1," + string(signature.Compute(key, msgID, strconv.FormatInt(ts.Unix(), 10), body)), nil
}

// SignAll returns the webhook-signature header value for a message signed
// under every secret, space separated in the order given, each signature
// once. During a secret rotation both the new and the previous secret sign
// (see [Secrets.Active]), so a receiver that still holds either one
// verifies the message. It fails with ErrNoSecret for an empty list and
// with ErrInvalidSecret (naming the index, never the secret) for a bad one.
func SignAll(secrets []string, msgID string, ts time.Time, body []byte) (string, error) {
	if len(secrets) == 0 {
		return "", ErrNoSecret
	}
	sigs := make([]string, 0, len(secrets))
	for i, s := range secrets {
		sig, err := Sign(s, msgID, ts, body)
		if err != nil {
			return "", fmt.Errorf("secret %d: %w", i, err)
		}
		if !slices.Contains(sigs, sig) {
			sigs = append(sigs, sig)
		}
	}
	return strings.Join(sigs, " "), nil
}

// Verify checks a received webhook the way a Standard Webhooks receiver
// does: the headers must carry webhook-id, webhook-timestamp (integer Unix
// seconds within tolerance of now, either way) and webhook-signature, and
// one of the space-separated "v1,<base64>" entries must equal the
// signature of the body under one of the secrets (compared in constant
// time). Entries with other versions are ignored. tolerance <= 0 means
// DefaultTolerance. It returns nil or an error wrapping one of the Err*
// values above. Verify is safe for concurrent use.
func Verify(secrets []string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secrets) == 0 {
		return ErrNoSecret
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return fmt.Errorf("secret %d: %w", i, err)
		}
		keys[i] = key
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return signature.Verify(keys, h, body, now, tolerance)
}

// DefaultRotationWindow is how long the previous secret keeps signing after
// a rotation when Rotate is given no window: one day, long enough for a
// subscriber to deploy the new secret.
const DefaultRotationWindow = 24 * time.Hour

// Secrets is a subscriber's signing secrets: the current one and, during a
// rotation, the previous one until PreviousExpiresAt. While both are active
// every delivery carries both signatures, so the subscriber can switch its
// verifier to the new secret at any moment in the window without losing a
// delivery. The zero value has no secret; deliveries with it fail
// permanently rather than go out unsigned.
type Secrets struct {
	// Current signs every delivery.
	Current string `json:"current"`
	// Previous also signs until PreviousExpiresAt; empty when no rotation
	// is in progress.
	Previous string `json:"previous,omitempty"`
	// PreviousExpiresAt is when Previous stops signing.
	PreviousExpiresAt time.Time `json:"previous_expires_at,omitzero"`
}

// Active returns the secrets that sign a delivery made at now: Current,
// then Previous while now is before PreviousExpiresAt. Empty secrets are
// left out, so the zero Secrets gives an empty list.
func (s Secrets) Active(now time.Time) []string {
	out := make([]string, 0, 2)
	if s.Current != "" {
		out = append(out, s.Current)
	}
	if s.Previous != "" && s.Previous != s.Current && now.Before(s.PreviousExpiresAt) {
		out = append(out, s.Previous)
	}
	return out
}

// Rotate returns s with next as the current secret and the old current
// secret signing too until now+window. window <= 0 means
// DefaultRotationWindow. A rotation started while another is in progress
// drops the older previous secret at once.
func (s Secrets) Rotate(next string, now time.Time, window time.Duration) Secrets {
	if window <= 0 {
		window = DefaultRotationWindow
	}
	return Secrets{Current: next, Previous: s.Current, PreviousExpiresAt: now.Add(window)}
}

// Validate reports whether every non-empty secret in s parses and there is
// a current one, so a directory can refuse a bad secret when it is stored
// rather than at delivery time.
func (s Secrets) Validate() error {
	if s.Current == "" {
		return fmt.Errorf("current: %w", ErrNoSecret)
	}
	if _, err := ParseSecret(s.Current); err != nil {
		return fmt.Errorf("current: %w", err)
	}
	if s.Previous != "" {
		if _, err := ParseSecret(s.Previous); err != nil {
			return fmt.Errorf("previous: %w", err)
		}
	}
	return nil
}
