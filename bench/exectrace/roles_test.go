package main

import (
	"math"
	"testing"

	"golang.org/x/exp/trace"
)

// TestSplitReview lays a synthetic review on synthetic goroutine states
// and checks every ms of its wall time lands in the right role and state:
// the submit goroutine running then waiting for the writer; the worker
// created late, runnable, running with a GC assist inside, waiting on the
// network, woken by a timer; the finisher waiting for the writer. The
// split must sum to the wall time (the segments tile it).
func TestSplitReview(t *testing.T) {
	const ms = trace.Time(1e6)
	const submitG, writerG, workerG, finishG trace.GoID = 1, 2, 3, 4
	root := map[trace.GoID]string{submitG: "bench.submit", writerG: "internal/store/sqlite.(*Store).writer", workerG: "engine.worker", finishG: "engine.finishLoop"}
	states := map[trace.GoID][]gstate{
		// submit: running 0-2, waiting for the writer 2-5, running 5-20.
		// the writer: running 2-3, in a syscall 3-4.5, runnable 4.5-5.
		writerG: {{at: 2 * ms, state: trace.GoRunning}, {at: 3 * ms, state: trace.GoSyscall},
			{at: 4500 * ms / 1000, state: trace.GoRunnable}, {at: 5 * ms, state: trace.GoRunning}},
		submitG: {{at: 0, state: trace.GoRunning}, {at: 2 * ms, state: trace.GoWaiting, reason: "select"},
			{at: 5 * ms, state: trace.GoRunnable, waker: writerG}, {at: 5 * ms, state: trace.GoRunning}},
		// worker: created at 7, runnable to 9, running to 12 (an assist
		// 10-11), on the network to 16, runnable to 17, running to 18,
		// asleep to 19 (woken by no goroutine), running on.
		workerG: {{at: 7 * ms, state: trace.GoRunnable}, {at: 9 * ms, state: trace.GoRunning},
			{at: 12 * ms, state: trace.GoWaiting, reason: "network"}, {at: 16 * ms, state: trace.GoRunnable},
			{at: 17 * ms, state: trace.GoRunning}, {at: 18 * ms, state: trace.GoWaiting, reason: "sleep"},
			{at: 19 * ms, state: trace.GoRunnable, waker: trace.NoGoroutine}, {at: 19 * ms, state: trace.GoRunning}},
		// finisher: waiting for the writer all along, woken at 22.
		finishG: {{at: 0, state: trace.GoWaiting, reason: "select"}, {at: 22 * ms, state: trace.GoRunnable, waker: writerG},
			{at: 23 * ms, state: trace.GoRunning}},
	}
	assists := map[trace.GoID][][2]trace.Time{workerG: {{10 * ms, 11 * ms}}}
	segs := []seg{
		{stage: "submit", g: submitG, s: 0, e: 1 * ms},
		{stage: "queued", g: submitG, s: 1 * ms, e: 6 * ms},
		{stage: "gap>start", g: workerG, s: 6 * ms, e: 8 * ms},
		{stage: "run", g: workerG, s: 8 * ms, e: 20 * ms},
		{stage: "finish", g: finishG, s: 20 * ms, e: 24 * ms},
		{stage: "notice", g: 0, s: 24 * ms, e: 25 * ms},
	}
	got, wakers := splitReview(segs, states, assists, root)
	const sub, q, gap, run, fin, note = "submit (bench goroutine: Submit, the request path)",
		"queued (the lease: Submit's own insert or the fetch loop)", "hand-off before start",
		"worker: handler (start, run: provider call, validation)", "finish (outcome written)",
		"notice (bench goroutine: sees it published)"
	want := map[string]float64{
		sub + " | " + stRunning: 1,
		q + " | " + stRunning:   2,
		q + " | waiting: select, for internal/store/sqlite.(*Store).writer": 3,
		gap + " | " + stNotYet:   1,
		gap + " | " + stRunnable: 1,
		run + " | " + stRunnable: 1 + 1,
		run + " | " + stRunning:  2 + 1 + 1,
		run + " | " + stAssist:   1,
		run + " | " + stNetwork:  4,
		run + " | waiting: sleep, for no goroutine (a timer, the netpoller, the runtime)": 1,
		fin + " | waiting: select, for internal/store/sqlite.(*Store).writer":             2,
		fin + " | " + stRunnable:      1,
		fin + " | " + stRunning:       1,
		note + " | unknown goroutine": 1,
	}
	total := 0.0
	for k, v := range got {
		total += v
		if w := want[k] * float64(ms); math.Abs(v-w) > 0.5 {
			t.Errorf("%s: %.3f ms, want %.3f", k, v/float64(ms), want[k])
		}
	}
	for k, w := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: missing, want %.3f ms", k, w)
		}
	}
	if total != float64(25*ms) {
		t.Errorf("the split sums to %.3f ms, want the wall time 25", total/float64(ms))
	}
	// The folds keep the total and name the classes.
	st := byState(got)
	if st[stWriter] != float64(5*ms) || st[stTimer] != float64(1*ms) || st[stNetwork] != float64(4*ms) || st[stRunnable] != float64(4*ms) {
		t.Errorf("byState: %v", st)
	}
	// Whom the waits waited for, and what it did meanwhile: the writer
	// over the submit's wait 2-5 (its part inside the queued stage) and
	// the finisher's 20-22.
	wantW := map[string]float64{q + " | internal/store/sqlite.(*Store).writer | Running": 1,
		q + " | internal/store/sqlite.(*Store).writer | Syscall @ ": 1.5, q + " | internal/store/sqlite.(*Store).writer | Runnable": 0.5,
		fin + " | internal/store/sqlite.(*Store).writer | Running": 2}
	for k, w := range wantW {
		if v := wakers[k]; math.Abs(v-w*float64(ms)) > 0.5 {
			t.Errorf("waker %s: %.3f ms, want %.3f", k, v/float64(ms), w)
		}
	}
	if len(wakers) != len(wantW) {
		t.Errorf("wakers: %v", wakers)
	}
	if r := byRole(got); r[run] != float64(12*ms) || r[q] != float64(5*ms) {
		t.Errorf("byRole: %v", r)
	}
}

// TestSlowest takes the slowest share, at least two, slowest first.
func TestSlowest(t *testing.T) {
	var rs []*review
	for i := range 100 {
		rs = append(rs, &review{s: 0, e: trace.Time(i)})
	}
	got := slowest(rs, 0.02)
	if len(got) != 2 || got[0].e != 99 || got[1].e != 98 {
		t.Fatalf("slowest 2 %% of 100: %v, %v", got[0].e, got[1].e)
	}
	if got := slowest(rs[:10], 0.02); len(got) != 2 {
		t.Fatalf("at least two: %d", len(got))
	}
}
