package bench

import (
	"testing"
	"time"
)

// TestPollAfter: a poll waits 5 ms at first, then a fiftieth of the time
// waited so far, at most 1 s (what the batch-isolation sweep's end and
// each interactive review's publication are polled at).
func TestPollAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ waited, want time.Duration }{
		{0, 5 * time.Millisecond},
		{100 * time.Millisecond, 5 * time.Millisecond},
		{10 * time.Second, 200 * time.Millisecond},
		{time.Hour, time.Second},
	} {
		got := pollAfter(time.Now().Add(-tc.waited))
		// time.Since runs after the subtraction: allow its few µs.
		if got < tc.want || got > tc.want+time.Millisecond {
			t.Errorf("after %v: %v, want %v", tc.waited, got, tc.want)
		}
	}
}
