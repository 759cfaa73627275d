package bench

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
)

// TestTailTraceSummary builds a trace by hand: 100 in-sweep reviews of
// 10 ms, all in their part's queued stage, but two of 100 ms whose
// queued stage is 90 ms and which overlap a submission's run. The
// summary must take the two as the tail, give their queued mean against
// the typical median, and split the reviews by the submission's run.
// Without the publication's spans (the review kind publishes inside its
// aggregation) the parts are still measured: they were all 0 until
// session 43, every review left out for the missing stages.
func TestTailTraceSummary(t *testing.T) {
	for _, publishSpans := range []bool{true, false} {
		tailTraceSummary(t, publishSpans)
	}
}

func tailTraceSummary(t *testing.T, publishSpans bool) {
	t0 := time.Unix(1000, 0)
	tr := &tailTrace{t0: t0}
	at := func(us int64) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	for i := range 100 {
		start := int64(i) * 20_000
		lat := int64(10_000)
		if i == 50 || i == 51 {
			lat = 100_000
		}
		id := "r" + string(rune('A'+i/26)) + string(rune('a'+i%26))
		tr.review(id, "sweep", at(start), at(start+lat))
		// The part: queued takes all but the last 8 stages' 1 ms each.
		s := start
		for k, st := range engine.StageNames {
			if !publishSpans && (st == engine.StagePublishWait || st == engine.StagePublish) {
				continue
			}
			d := int64(1_000)
			if st == engine.StageQueued {
				d = lat - 8_000
			}
			sp := engine.StageSpan{ID: id, Lane: "interactive", Stage: st, Start: at(s), End: at(s + d)}
			if k < 4 {
				sp.ID, sp.Parent = "p-"+id, id
			}
			tr.span(sp)
			s += d
		}
	}
	tr.span(engine.StageSpan{ID: "sub", Kind: "review.batch.submit", Lane: "batch", Stage: engine.StageRun,
		Start: at(50*20_000 + 5_000), End: at(51*20_000 + 5_000)})
	tr.markInSweep(at(100 * 20_000))
	var r Result
	tr.summarize(&r)
	for name, want := range map[string]float64{
		"tail_reviews": 2, "tail_parts_reviews": 2, "tail_latency_ms": 100, "tail_queued_ms": 92, "tail_queued_typical_ms": 2, "tail_run_ms": 1,
		"tail_submit_ms": 0, "tail_overlap_batch_runs": 1, "tail_overlap_batch_runs_typical": 0.02,
		"tail_during_submit_reviews": 2, "tail_outside_submit_reviews": 98, "tail_outside_submit_p99_ms": 10,
	} {
		if got, ok := r.Get(name); !ok || got != want {
			t.Errorf("publication spans %v: %s = %v (present %v); want %v", publishSpans, name, got, ok, want)
		}
	}
}

// TestTailTraceQueuedCauses builds reviews whose part's queued stage ends
// each way a lease can end it (engine.StageSpan.Via) and checks that the
// summary counts, per phase, only those over 10 ms, by cause: an insert
// whose write took most of the stage, one whose time before its write
// did, a wake-up, a poll, a finish; and the share of their queued time
// in the lease's write. A stage of exactly 10 ms is not over it.
func TestTailTraceQueuedCauses(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := &tailTrace{t0: t0}
	at := func(us int64) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	type part struct {
		phase       string
		via         string
		queued      int64 // µs
		beforeLease int64 // µs from ready to the lease's call
	}
	parts := []part{
		{"baseline", "insert", 20_000, 100},      // insert_write, 19.9 ms in the write
		{"baseline", "insert", 10_000, 100},      // exactly 10 ms: not counted
		{"baseline", "insert", 12_000, 11_000},   // insert_before_write, 1 ms in the write
		{"sweep", "insert", 40_000, 0},           // insert_write, all 40 ms
		{"sweep", "wake:notify", 20_000, 18_000}, // wake, 2 ms in the write
		{"sweep", "poll", 50_000, 49_000},        // poll, 1 ms
		{"sweep", "finish:interactive", 30_000, 29_000},
		{"sweep", "insert", 3_000, 100}, // fast: not counted
	}
	for i, p := range parts {
		id := fmt.Sprintf("r%d", i)
		start := int64(i) * 100_000
		tr.review(id, p.phase, at(start), at(start+p.queued+1_000))
		tr.span(engine.StageSpan{ID: "p-" + id, Parent: id, Lane: "interactive", Stage: engine.StageQueued,
			Start: at(start), End: at(start + p.queued), Via: p.via, Asked: at(start + p.beforeLease)})
	}
	tr.markInSweep(at(int64(len(parts)) * 100_000))
	var r Result
	tr.summarize(&r)
	for name, want := range map[string]float64{
		"tail_queued_over_10ms_baseline_reviews": 2, "tail_queued_over_10ms_baseline_insert_write": 1,
		"tail_queued_over_10ms_baseline_insert_before_write": 1, "tail_queued_over_10ms_baseline_wake": 0,
		"tail_queued_over_10ms_baseline_write_share": (19_900 + 1_000) / 32_000.0,
		"tail_queued_over_10ms_sweep_reviews":        4, "tail_queued_over_10ms_sweep_insert_write": 1,
		"tail_queued_over_10ms_sweep_wake": 1, "tail_queued_over_10ms_sweep_poll": 1, "tail_queued_over_10ms_sweep_finish": 1,
		"tail_queued_over_10ms_sweep_other": 0, "tail_queued_over_10ms_sweep_write_share": (40_000 + 2_000 + 1_000 + 1_000) / 140_000.0,
	} {
		if got, ok := r.Get(name); !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v (present %v); want %v", name, got, ok, want)
		}
	}
}
