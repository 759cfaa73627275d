package main

import (
	"math"
	"testing"

	"golang.org/x/exp/trace"
)

// TestHandoff lays a review's run stage on a synthetic worker goroutine
// and checks the hand-off gap runs from the run's log (not its end, a
// wall time mapped onto the trace's clock) to the worker's end and splits by its state there: running, waiting for a store read
// (woken by a database/sql goroutine), runnable, running; and that a
// worker whose end is not in the trace gives no gap.
func TestHandoff(t *testing.T) {
	const ms = trace.Time(1e6)
	const workerG, readerG, finishG trace.GoID = 3, 5, 4
	root := map[trace.GoID]string{workerG: "engine.(*Engine).run.func2", readerG: "database/sql.(*DB).connectionOpener", finishG: "engine.finishLoop"}
	states := map[trace.GoID][]gstate{
		workerG: {{at: 1 * ms, state: trace.GoRunning}, {at: 11 * ms, state: trace.GoWaiting, reason: "select"},
			{at: 13 * ms, state: trace.GoRunnable, waker: readerG}, {at: 14 * ms, state: trace.GoRunning},
			{at: 15 * ms, state: trace.GoNotExist}},
		readerG: {{at: 0, state: trace.GoRunning}},
	}
	segs := []seg{
		// Its end a mapped wall time 0.2 ms off the trace's clock; its
		// log's trace time exact.
		{stage: "run", g: workerG, s: 1 * ms, e: 10*ms + ms/5, logged: 10 * ms},
		{stage: "finish", g: finishG, s: 10 * ms, e: 20 * ms},
	}
	d, split, ok := handoff(segs, states, nil, root)
	if !ok || d != float64(5*ms) {
		t.Fatalf("hand-off %v ms (ok %v), want 5", d/1e6, ok)
	}
	want := map[string]float64{
		"handoff | " + stRunning: 2,
		"handoff | waiting: select, for database/sql.(*DB).connectionOpener": 2,
		"handoff | " + stRunnable: 1,
	}
	sum := 0.0
	for k, v := range split {
		sum += v
		if math.Abs(v/1e6-want[k]) > 1e-9 {
			t.Errorf("%s: %.3f ms, want %.3f", k, v/1e6, want[k])
		}
	}
	if sum != d {
		t.Errorf("split sums to %.3f ms, want the gap's %.3f", sum/1e6, d/1e6)
	}
	states[workerG] = states[workerG][:4] // its end past the trace's
	if _, _, ok := handoff(segs, states, nil, root); ok {
		t.Error("a worker whose end is not in the trace gave a hand-off")
	}
}
