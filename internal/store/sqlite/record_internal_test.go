package sqlite

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// TestRecordJSON: the hand-written encoding of an attempt record is the
// one encoding/json gives, byte for byte, on the records it handles and on
// those it passes to json.Marshal.
func TestRecordJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	east := time.FixedZone("x", 5*3600+30*60)
	for _, r := range []job.AttemptRecord{
		{At: t0, Attempt: 1, Outcome: job.ClassSuccess},
		{At: t0.Truncate(time.Second), Attempt: 12, Outcome: job.ClassSuccess},
		{At: t0.In(east), Attempt: 3, Outcome: job.ClassLeaseExpired, Status: 503, Delay: 1500 * time.Millisecond},
		{At: time.Time{}, Outcome: "x"},
		{At: t0, Attempt: -1, Outcome: "a<b>&\"c\"\\", Status: -2, Delay: -3},
		{At: t0, Attempt: 2, Outcome: "é"},
		{At: t0, Attempt: 2, Outcome: job.ClassSuccess, Why: "slow <down>", Error: "boom\n\"x\""},
		{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Outcome: job.ClassSuccess},
		{At: t0, Attempt: 9, Outcome: job.ClassPending, Delay: time.Minute, Count: 7, FirstAt: t0.Add(-time.Hour)},
	} {
		want, _ := json.Marshal(r)
		if got := recordJSON(r); got != string(want) {
			t.Errorf("recordJSON(%+v)\n got %s\nwant %s", r, got, want)
		}
	}
}
