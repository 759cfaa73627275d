package rltype

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTransitions checks the state machine exhaustively against DESIGN.md.
func TestTransitions(t *testing.T) {
	t.Parallel()
	want := map[[2]State]bool{
		{StateAccepted, StateWaiting}: true, {StateAccepted, StateValidated}: true, {StateAccepted, StateTerminal}: true,
		{StateWaiting, StateRunning}: true, {StateWaiting, StateTerminal}: true,
		{StateRunning, StateWaiting}: true, {StateRunning, StateRetryScheduled}: true, {StateRunning, StateValidated}: true,
		{StateRunning, StatePublished}: true, {StateRunning, StateTerminal}: true,
		{StateRetryScheduled, StateWaiting}: true, {StateRetryScheduled, StateTerminal}: true,
		{StateValidated, StatePublished}: true, {StateValidated, StateTerminal}: true,
		{StateTerminal, StateWaiting}: true, // redrive
	}
	for _, from := range States {
		for _, to := range States {
			if got := CanTransition(from, to); got != want[[2]State{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %v", from, to, got)
			}
		}
	}
	for _, s := range States {
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
	}
	if State("sleeping").Valid() || !StatePublished.Final() || StateRunning.Final() {
		t.Error("Valid/Final disagree with the design")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := func() *Job {
		j := &Job{Kind: "k", Region: "us", Lane: LaneBatch, LimitKeys: []string{"a"}, Payload: []byte(`{}`)}
		j.Prepare("id", time.Now(), 0, false)
		return j
	}
	if err := ok().Validate([]string{"us", "eu"}); err != nil {
		t.Fatalf("valid job refused: %v", err)
	}
	tests := []struct {
		name  string
		mut   func(*Job)
		field string
	}{
		{"unknown region", func(j *Job) { j.Region = "mars" }, "region"},
		{"bad lane", func(j *Job) { j.Lane = "urgent" }, "lane"},
		{"five keys", func(j *Job) { j.LimitKeys = []string{"a", "b", "c", "d", "e"} }, "limit_keys"},
		{"no keys", func(j *Job) { j.LimitKeys = nil }, "limit_keys"},
		{"duplicate key", func(j *Job) { j.LimitKeys = []string{"a", "a"} }, "limit_keys"},
		{"no kind", func(j *Job) { j.Kind = "" }, "kind"},
		{"bad json", func(j *Job) { j.Payload = []byte(`{`) }, "payload"},
		{"priority", func(j *Job) { j.Priority = 1000 }, "priority"},
	}
	for _, tc := range tests {
		j := ok()
		tc.mut(j)
		var ve *ValidationError
		if err := j.Validate([]string{"us", "eu"}); !errors.As(err, &ve) || ve.Fields[0].Field != tc.field {
			t.Errorf("%s: error %v, want a violation of %s", tc.name, err, tc.field)
		}
	}
	big := ok()
	big.Payload = []byte(`"` + strings.Repeat("x", MaxPayloadBytes) + `"`)
	if err := big.Validate(nil); !errors.Is(err, ErrPayloadTooLarge) || !strings.Contains(err.Error(), "reference") {
		t.Fatalf("oversized payload: %v", err)
	}
}
