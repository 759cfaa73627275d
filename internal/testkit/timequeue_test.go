package testkit_test

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

type event struct {
	at   time.Time
	name string
}

func (e event) Due() time.Time { return e.at }

// TestTimeQueuePopsDueEarliestFirst: values come out earliest first, and
// only once due.
func TestTimeQueuePopsDueEarliestFirst(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var q testkit.TimeQueue[event]
	if _, ok := q.PopDue(t0); ok {
		t.Fatal("an empty queue popped a value")
	}
	for _, e := range []event{{t0.Add(3 * time.Second), "c"}, {t0.Add(time.Second), "a"}, {t0.Add(2 * time.Second), "b"}} {
		q.Push(e)
	}
	if _, ok := q.PopDue(t0); ok {
		t.Fatal("popped a value before any was due")
	}
	var got string
	for e, ok := q.PopDue(t0.Add(2 * time.Second)); ok; e, ok = q.PopDue(t0.Add(2 * time.Second)) {
		got += e.name
	}
	if got != "ab" || q.Len() != 1 {
		t.Fatalf("due by 2 s: popped %q with %d left, want \"ab\" with 1", got, q.Len())
	}
}
