package llmbatch

import (
	"encoding/json"
	"testing"
)

// FuzzOpenAIResultLine: any line of an output or error file that decodes
// gives a result of a known kind, and only a 200 with a completion body
// counts as succeeded.
func FuzzOpenAIResultLine(f *testing.F) {
	f.Add(`{"id":"r","custom_id":"a","response":{"status_code":200,"body":{"choices":[{"message":{"content":"x"}}]}},"error":null}`)
	f.Add(`{"custom_id":"a","response":{"status_code":500,"body":{"error":{"type":"server_error"}}}}`)
	f.Add(`{"custom_id":"a","response":null,"error":{"code":"batch_expired","message":"m"}}`)
	f.Add(`{"custom_id":"a","response":{"status_code":200,"body":"nope"}}`)
	f.Fuzz(func(t *testing.T, line string) {
		var l resultLine
		if json.Unmarshal([]byte(line), &l) != nil {
			return
		}
		r := openAIResult(l)
		switch r.Kind {
		case KindSucceeded:
			if l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 {
				t.Fatalf("succeeded from %q", line)
			}
		case KindErrored, KindExpired, KindCanceled:
		default:
			t.Fatalf("kind %q from %q", r.Kind, line)
		}
		if r.CustomID != l.CustomID {
			t.Fatalf("custom_id %q, want %q", r.CustomID, l.CustomID)
		}
		// A success is final and carries no error; a result is retried
		// only when it errored; an upstream status is kept for the
		// operator whenever the line had a response and no error.
		if r.Kind == KindSucceeded && (r.Retryable || r.ErrorType != "") || r.Retryable && r.Kind != KindErrored {
			t.Fatalf("result %+v from %q", r, line)
		}
		if l.Error == nil && l.Response != nil && l.Response.StatusCode != 200 && r.Status != l.Response.StatusCode {
			t.Fatalf("status %d, want %d from %q", r.Status, l.Response.StatusCode, line)
		}
	})
}
