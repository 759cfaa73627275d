package engine

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// TestTakeUnwrittenCountsAnswersBeforeTheRefusal checks what the finish
// loop tells a refusal of its key's answers not yet written: those that
// came back before the refusal's own answer and are not in its batch
// (store.KeyEffect.Unwritten). An answer that came back after it may
// have been at the upstream with it and is not counted; the batch's own
// answers leave the record (the store counts those later in the batch);
// an outcome the engine made up (no answer) was never recorded.
func TestTakeUnwrittenCountsAnswersBeforeTheRefusal(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	e := &Engine{unwritten: map[string][]time.Time{
		"a": {at(10), at(20), at(30), at(40), at(50)},
		"b": {at(20), at(30)},
	}}
	jobOn := func(keys ...string) *job.Job { return &job.Job{LimitKeys: keys} }
	batch := []result{
		{job: jobOn("a", "b"), out: job.Outcome{Class: job.ClassRateLimited}, answered: at(30)},
		{job: jobOn("a"), out: job.Outcome{Class: job.ClassSuccess}, answered: at(20)},
		{job: jobOn("a"), out: job.Outcome{Class: job.ClassTransient}}, // made up: never recorded
	}
	rs := make([]Report, len(batch))
	e.takeUnwritten(batch, rs)
	// Left for a: 10, 40, 50; before the refusal's 30: one. For b: 20.
	if got := rs[0].Unwritten; got["a"] != 1 || got["b"] != 1 || len(got) != 2 {
		t.Fatalf("refusal told %v, want a:1 b:1", got)
	}
	if rs[1].Unwritten != nil || rs[2].Unwritten != nil {
		t.Fatalf("non-refusals told %v, %v; want nothing", rs[1].Unwritten, rs[2].Unwritten)
	}
	if got := e.unwritten["a"]; len(got) != 3 || !got[0].Equal(at(10)) || !got[1].Equal(at(40)) || !got[2].Equal(at(50)) {
		t.Fatalf("record left for a: %v, want 10, 40, 50 ms", got)
	}
	if got := e.unwritten["b"]; len(got) != 1 || !got[0].Equal(at(20)) {
		t.Fatalf("record left for b: %v, want 20 ms", got)
	}
}
