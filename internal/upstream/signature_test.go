package upstream

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/ratelane/ratelane/internal/webhook/signature"
)

const (
	secretOld = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretNew = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCBrZXk="
)

// specSign builds a webhook-signature value straight from the Standard
// Webhooks spec, independently of the code under test.
func specSign(t *testing.T, secret, id string, ts int64, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func signedHeaders(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

func TestSignatureVerification(t *testing.T) {
	t.Parallel()
	const body = `{"type":"invoice.paid","data":{"id":"in_1"}}`
	now := time.Now().Unix()
	good := specSign(t, secretOld, "msg_1", now, body)
	other := specSign(t, secretNew, "msg_1", now, body)
	for _, tc := range []struct {
		name    string
		secrets []string
		hdr     http.Header
		body    string
		want    int
	}{
		{"valid", []string{secretOld}, signedHeaders("msg_1", now, good), body, 200},
		{"several entries, one valid", []string{secretOld}, signedHeaders("msg_1", now, "v1,Zm9v v2,x "+good), body, 200},
		{"rotation: old secret", []string{secretNew, secretOld}, signedHeaders("msg_1", now, good), body, 200},
		{"rotation: new secret", []string{secretNew, secretOld}, signedHeaders("msg_1", now, other), body, 200},
		{"wrong secret", []string{secretNew}, signedHeaders("msg_1", now, good), body, 401},
		{"tampered body", []string{secretOld}, signedHeaders("msg_1", now, good), body + " ", 401},
		{"other id", []string{secretOld}, signedHeaders("msg_2", now, good), body, 401},
		{"wrong version", []string{secretOld}, signedHeaders("msg_1", now, "v2"+good[2:]), body, 401},
		{"stale", []string{secretOld}, signedHeaders("msg_1", now-600, specSign(t, secretOld, "msg_1", now-600, body)), body, 401},
		{"missing", []string{secretOld}, http.Header{}, body, 401},
		{"no secrets: unchecked", nil, http.Header{}, body, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{Routes: map[string]RouteConfig{"sub": {Secrets: tc.secrets}}})
			resp, _ := b.post(t, b.srv.RouteURL("sub"), tc.body, tc.hdr)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			r := b.srv.Stats().Routes["sub"]
			wantBad := int64(0)
			if tc.want == 401 {
				wantBad = 1
			}
			if r.BadSignatures != wantBad {
				t.Errorf("BadSignatures = %d, want %d", r.BadSignatures, wantBad)
			}
		})
	}
}

// TestSignatureReferenceLibrary: a signature from the Standard Webhooks
// reference library verifies, and rotating Secrets mid-run takes effect.
func TestSignatureReferenceLibrary(t *testing.T) {
	t.Parallel()
	wh, err := standardwebhooks.NewWebhook(secretNew)
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"ok":1}`
	ts := time.Now()
	sig, err := wh.Sign("msg_ref", ts, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, Config{Routes: map[string]RouteConfig{"sub": {Secrets: []string{secretOld}}}})
	hdr := signedHeaders("msg_ref", ts.Unix(), sig)
	if resp, _ := b.post(t, b.srv.RouteURL("sub"), body, hdr); resp.StatusCode != 401 {
		t.Fatalf("before rotation: status %d, want 401", resp.StatusCode)
	}
	if err := b.srv.UpdateRoute("sub", func(rc *RouteConfig) { rc.Secrets = append(rc.Secrets, secretNew) }); err != nil {
		t.Fatal(err)
	}
	if resp, _ := b.post(t, b.srv.RouteURL("sub"), body, hdr); resp.StatusCode != 200 {
		t.Fatalf("after rotation: status %d, want 200", resp.StatusCode)
	}
}

// TestLimiterRunsBeforeSignature: an unsigned flood is rate limited, not
// all answered 401.
func TestLimiterRunsBeforeSignature(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Routes: map[string]RouteConfig{"sub": {Rate: 0.1, Burst: 1, Secrets: []string{secretOld}}}})
	got := b.statuses(t, "sub", 3)
	if got[0] != 401 || got[1] != 429 || got[2] != 429 {
		t.Errorf("statuses %v, want 401 429 429", got)
	}
}

// FuzzVerifySignature checks that signature.Verify never panics on
// arbitrary headers, that it finds a signature built straight from the
// spec (specSign, not signature.Compute, so a bug shared by signer and
// verifier cannot hide) among whatever other entries the header holds, and
// that this signature never verifies another body or another id.
func FuzzVerifySignature(f *testing.F) {
	f.Add("msg_1", "1700000000", "v1,abc v1,def", []byte("{}"))
	f.Add("", "x", ",", []byte(nil))
	const secret = "whsec_ZnV6ei1rZXk=" // "fuzz-key"
	key := []byte("fuzz-key")
	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sigs)
		now := time.Unix(1700000000, 0)
		_ = signature.Verify([][]byte{key}, h, body, now, 5*time.Minute)
		if id == "" || !validHeaderValue(id) {
			return
		}
		own := specSign(t, secret, id, now.Unix(), string(body))
		h = signedHeaders(id, now.Unix(), sigs+" "+own)
		// Whatever the fuzzed entries hold, the spec signature is a field
		// of its own after the space, so it must be found.
		if err := signature.Verify([][]byte{key}, h, body, now, 5*time.Minute); err != nil {
			t.Fatalf("own signature rejected: %v", err)
		}
		// The spec signature alone, so no fuzzed entry can be the match.
		tampered := append(bytes.Clone(body), '.')
		if signature.Verify([][]byte{key}, signedHeaders(id, now.Unix(), own), tampered, now, 5*time.Minute) == nil {
			t.Fatalf("signature of %q verified body %q", body, tampered)
		}
		if signature.Verify([][]byte{key}, signedHeaders(id+".", now.Unix(), own), body, now, 5*time.Minute) == nil {
			t.Fatalf("signature for id %q verified id %q", id, id+".")
		}
	})
}

func validHeaderValue(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}
