package upstream

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

// Standard Webhooks header names.
const (
	headerWebhookID        = "webhook-id"
	headerWebhookTimestamp = "webhook-timestamp"
	headerWebhookSignature = "webhook-signature"
)

var (
	errMissingSignatureHeaders = errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	errBadTimestamp            = errors.New("webhook-timestamp is not integer seconds")
	errStaleTimestamp          = errors.New("webhook-timestamp outside tolerance")
	errNoMatchingSignature     = errors.New("no matching v1 signature")
)

// verifySignature checks a Standard Webhooks signature: the HMAC-SHA256,
// under any of keys, of "${webhook-id}.${webhook-timestamp}.${body}" must
// equal one of the base64 "v1,<sig>" entries of the space-separated
// webhook-signature header, and the timestamp must be within tolerance of
// now. Several keys model a secret rotation in progress.
func verifySignature(keys [][]byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get(headerWebhookID), h.Get(headerWebhookTimestamp), h.Get(headerWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return errMissingSignatureHeaders
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errBadTimestamp
	}
	if delta := now.Unix() - unix; delta > int64(tolerance/time.Second) || -delta > int64(tolerance/time.Second) {
		return errStaleTimestamp
	}
	for _, key := range keys {
		want := sign(key, id, ts, body)
		for entry := range strings.FieldsSeq(sigs) {
			version, sig, ok := strings.Cut(entry, ",")
			if ok && version == "v1" && hmac.Equal([]byte(sig), want) {
				return nil
			}
		}
	}
	return errNoMatchingSignature
}

// sign returns the base64 v1 signature of a message under key.
func sign(key []byte, id, ts string, body []byte) []byte {
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
