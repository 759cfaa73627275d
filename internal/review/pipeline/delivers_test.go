package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
)

// TestDelivers: a review published nowhere delivers nothing (the engine
// then records its publication without a claim); every other target, and
// a payload that does not decode, delivers.
func TestDelivers(t *testing.T) {
	t.Parallel()
	p := &ReviewPublisher{Region: "us"}
	for _, tc := range []struct {
		payload string
		want    bool
	}{
		{`{"publish":{"kind":"none"}}`, false},
		{`{}`, false}, // no publish: none, as Publish treats it
		{`{"publish":{"kind":"webhook"}}`, true},
		{`{"publish":{"kind":"github","target":"acme/app#1"}}`, true},
		{`{"publish":{"kind":"rdjsonl","target":"x"}}`, true},
		{`{"publish":`, true},
	} {
		if got := p.Delivers(&job.Job{Payload: json.RawMessage(tc.payload)}); got != tc.want {
			t.Errorf("Delivers(%s) = %v, want %v", tc.payload, got, tc.want)
		}
	}
}
