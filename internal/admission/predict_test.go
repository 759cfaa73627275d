package admission

import (
	"testing"
	"time"
)

func TestPredictWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := NewState(Config{Name: "idle"}) // unpaced, not paused: adds nothing
	paced := NewState(Config{Name: "paced", Rate: 2, Burst: 1})
	paused := NewState(Config{Name: "paused", Rate: 10, Burst: 10})
	paused.PausedUntil = now.Add(5 * time.Second)
	tests := []struct {
		name     string
		in       WaitInput
		want     time.Duration
		unserved bool
	}{
		// The case: an interactive lane 733 s old, nothing leasing
		// the kind. The idle key alone predicts 0 s, which accepted the job.
		{"733 s old lane, unserved", WaitInput{Now: now, Cost: 1, Keys: []KeyLoad{{State: idle}}, OldestReady: 733 * time.Second}, 733 * time.Second, true},
		{"served kind: the keys decide", WaitInput{Now: now, Cost: 1, Keys: []KeyLoad{{State: idle}}, Served: true, OldestReady: 733 * time.Second}, 0, false},
		{"paced backlog", WaitInput{Now: now, Cost: 1, Keys: []KeyLoad{{State: paced, Ahead: 9}}, Served: true}, 4500 * time.Millisecond, false},
		{"pause then pace", WaitInput{Now: now, Cost: 1, Keys: []KeyLoad{{State: paused, Ahead: 19}}, Served: true}, 6 * time.Second, false},
		{"slowest key wins", WaitInput{Now: now, Cost: 1, Keys: []KeyLoad{{State: idle}, {State: paced, Ahead: 3}, {State: paused}}, Served: true}, 5 * time.Second, false},
		{"unserved but keys slower than the lane", WaitInput{Now: now, Cost: 1, Keys: []KeyLoad{{State: paced, Ahead: 99}}, OldestReady: time.Second}, 49500 * time.Millisecond, true},
	}
	for _, tt := range tests {
		got := PredictWait(tt.in)
		if got.Wait != tt.want || got.Unserved != tt.unserved {
			t.Errorf("%s: got %v (unserved %v), want %v (unserved %v)", tt.name, got.Wait, got.Unserved, tt.want, tt.unserved)
		}
	}
}

func TestPredictCompletion(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// The submit key of a batch lane: one pass a minute, 30 passes queued.
	slow := NewState(Config{Name: "batch-submit:openai:m", Rate: 1.0 / 60, Burst: 1})
	submit := PredictWait(WaitInput{Now: now, Cost: 1, Keys: []KeyLoad{{State: slow, Ahead: 30}}, Served: true})
	paused := NewState(Config{Name: "batch-submit:openai:m"})
	paused.PausedUntil = now.Add(3 * time.Hour)
	held := PredictWait(WaitInput{Now: now, Cost: 1, Keys: []KeyLoad{{State: paused}}, Served: true})
	h := time.Hour
	tests := []struct {
		name   string
		in     CompletionInput
		rounds int64
		finish time.Duration
	}{
		{"empty lane, no queue bound", CompletionInput{Work: BatchWork{500, 1e6}, Turnaround: h}, 1, h},
		{"fits the queue with the work ahead", CompletionInput{Work: BatchWork{40, 0}, Ahead: BatchWork{60, 0}, Queue: BatchWork{Requests: 100}, Turnaround: h}, 1, h},
		{"one over the request queue: a second round", CompletionInput{Work: BatchWork{41, 0}, Ahead: BatchWork{60, 0}, Queue: BatchWork{Requests: 100}, Turnaround: h}, 2, 2 * h},
		{"the token queue decides", CompletionInput{Work: BatchWork{1, 2_500_000}, Ahead: BatchWork{1, 4_000_000}, Queue: BatchWork{Requests: 100, Tokens: 2_000_000}, Turnaround: h}, 4, 4 * h},
		{"a slow submit key comes first", CompletionInput{Submit: submit, Work: BatchWork{1, 1}, Turnaround: h}, 1, 30*time.Minute + h},
		{"a paused submit key", CompletionInput{Submit: held, Work: BatchWork{1, 1}, Turnaround: h}, 1, 4 * h},
		{"saturates", CompletionInput{Work: BatchWork{1 << 40, 0}, Queue: BatchWork{Requests: 1}, Turnaround: h}, 1 << 40, MaxAhead},
	}
	for _, tt := range tests {
		got := PredictCompletion(tt.in)
		if got.Rounds != tt.rounds || got.Finish != tt.finish {
			t.Errorf("%s: %d rounds, finish %v; want %d, %v", tt.name, got.Rounds, got.Finish, tt.rounds, tt.finish)
		}
	}
}
