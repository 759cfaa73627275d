package batchlane

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/review/pipeline"
)

// TestAdmit: the intake decision for each policy, from one prediction.
func TestAdmit(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := time.Hour
	deadline := now.Add(90 * time.Minute)
	const key = "batch-submit:openai:m"
	// A queue of 100 requests; 60 ahead. 40 fit in the first round.
	in := func(work int64, submit time.Duration) admission.CompletionInput {
		return admission.CompletionInput{Submit: admission.Prediction{Wait: submit}, Work: admission.BatchWork{Requests: work, Tokens: work * 1000},
			Ahead: admission.BatchWork{Requests: 60, Tokens: 60_000}, Queue: admission.BatchWork{Requests: 100}, Turnaround: h}
	}
	fastFits := func() (admission.BatchWork, error) { return admission.BatchWork{Requests: 40}, nil }
	noFast := func() (admission.BatchWork, error) {
		t.Error("fast planned for a policy other than degrade, or for a manifest in time")
		return admission.BatchWork{}, nil
	}
	tests := []struct {
		name, policy string
		in           admission.CompletionInput
		fast         func() (admission.BatchWork, error)
		depth        string
		late, degr   bool
		err          string // "" accepted; "retry" a 429-kind refusal; "alone" a deadline refusal
	}{
		{"fits", "", in(40, 0), noFast, pipeline.DepthFull, false, false, ""},
		{"late by the backlog", "", in(41, 0), noFast, "", false, false, "retry"},
		{"late by the submit key", "reject", in(10, 31*time.Minute), noFast, "", false, false, "retry"},
		{"queue accepts it late", "queue", in(41, 0), noFast, pipeline.DepthFull, true, false, ""},
		{"degrade to fast", "degrade", in(41, 0), fastFits, pipeline.DepthFast, false, true, ""},
		{"degrade does not help", "degrade", in(41, 0), func() (admission.BatchWork, error) { return admission.BatchWork{Requests: 41}, nil }, "", false, false, "retry"},
		{"too large on its own", "", in(250, 0), noFast, "", false, false, "alone"},
	}
	for _, tt := range tests {
		got, depth, err := Admit(tt.policy, now, deadline, key, tt.in, tt.fast)
		var le *LateError
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.err != "" && !errors.As(err, &le):
			t.Errorf("%s: %v, want a *LateError", tt.name, err)
		case tt.err != "":
			if le.Alone != (tt.err == "alone") || le.RetryAfter < time.Second || !le.Finish.After(deadline) {
				t.Errorf("%s: %+v", tt.name, le)
			}
			if tt.name == "late by the submit key" && !strings.Contains(le.Detail, key) {
				t.Errorf("%s: detail does not name the submit key: %s", tt.name, le.Detail)
			}
			if tt.err == "retry" && tt.policy != "degrade" && le.RetryAfter != le.Finish.Sub(deadline) {
				t.Errorf("%s: Retry-After %v, want the %v it is late by", tt.name, le.RetryAfter, le.Finish.Sub(deadline))
			}
		default:
			if depth != tt.depth || got.Late != tt.late || got.Degraded != tt.degr || (got.Late || got.Degraded) != (got.Detail != "") {
				t.Errorf("%s: depth %s, intake %+v", tt.name, depth, got)
			}
			if !tt.late && got.PredictedFinish.After(deadline) {
				t.Errorf("%s: accepted in time but predicted to finish at %v, after %v", tt.name, got.PredictedFinish, deadline)
			}
		}
	}
}

// TestMedianTurnaround: no median below MinTurnaroundSamples; the middle
// sample of an odd count and the upper middle of an even one.
func TestMedianTurnaround(t *testing.T) {
	t.Parallel()
	m := func(ds ...time.Duration) []time.Duration { return ds }
	if _, ok := MedianTurnaround(m(1, 2, 3, 4)); ok {
		t.Error("a median from 4 samples")
	}
	if d, ok := MedianTurnaround(m(50, 10, 40, 20, 30)); !ok || d != 30 {
		t.Errorf("median of 5: %v, %v", d, ok)
	}
	if d, ok := MedianTurnaround(m(60, 10, 40, 20, 30, 50)); !ok || d != 40 {
		t.Errorf("median of 6: %v, %v", d, ok)
	}
}
