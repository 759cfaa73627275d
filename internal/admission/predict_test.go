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
