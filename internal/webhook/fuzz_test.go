package webhook

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseSecret checks that ParseSecret never panics, that every key it
// accepts is within the documented length, and that an accepted key
// round-trips through its canonical "whsec_" form.
func FuzzParseSecret(f *testing.F) {
	f.Add(vecSecret)
	f.Add("whsec_")
	f.Add("whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, MinSecretBytes)))
	f.Add(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, MaxSecretBytes+1)))
	f.Add("whsec_whsec_AAAA====")
	f.Fuzz(func(t *testing.T, secret string) {
		key, err := ParseSecret(secret)
		if err != nil {
			if !errors.Is(err, ErrInvalidSecret) {
				t.Fatalf("ParseSecret(%q): error %v does not wrap ErrInvalidSecret", secret, err)
			}
			return
		}
		if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
			t.Fatalf("ParseSecret(%q) accepted a %d-byte key", secret, len(key))
		}
		again, err := ParseSecret(SecretPrefix + base64.StdEncoding.EncodeToString(key))
		if err != nil || !bytes.Equal(again, key) {
			t.Fatalf("canonical form of %q: %x, %v; want %x", secret, again, err, key)
		}
	})
}

// FuzzDecodePayload checks that a delivery job's payload decoder never
// panics on arbitrary bytes (a stored payload is input too) and that what
// it accepts names a subscriber and an event and carries a body.
func FuzzDecodePayload(f *testing.F) {
	f.Add([]byte(`{"subscriber_id":"s1","event_id":"e1","topic":"t","version":3,"body":{"a":1}}`))
	f.Add([]byte(`{"subscriber_id":"s1","event_id":"e1","body":null}`))
	f.Add([]byte(`{"subscriber_id":"","event_id":"e1","body":"x"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"version":1e400}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok := decodePayload(b)
		if !ok {
			return
		}
		if p.SubscriberID == "" || p.EventID == "" || len(p.Body) == 0 || string(bytes.TrimSpace(p.Body)) == "null" {
			t.Fatalf("decodePayload(%q) accepted %+v", b, p)
		}
		re, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", p, err)
		}
		if _, ok := decodePayload(re); !ok {
			t.Fatalf("decodePayload refuses its own re-encoding %s", re)
		}
	})
}
