package bench

import "testing"

// TestParseSchedstat reads schedstat's three fields in their order (ns on
// a CPU, ns in the run queue, timeslices) and refuses a short or garbled
// line rather than reading it as zeros.
func TestParseSchedstat(t *testing.T) {
	run, wait, slices, ok := parseSchedstat([]byte("2364041 1083218 17\n"))
	if !ok || run != 2364041 || wait != 1083218 || slices != 17 {
		t.Fatalf("got %v %v %v %v, want 2364041 1083218 17 true", run, wait, slices, ok)
	}
	for _, bad := range []string{"", "12 34", "12 x 5"} {
		if _, _, _, ok := parseSchedstat([]byte(bad)); ok {
			t.Errorf("%q read as ok", bad)
		}
	}
	// The counters add up across phases: a phase's wait is the difference.
	var r Result
	addProcSched(&r, "sweep", "sim", procSched{ok: true, waitNs: 1e6, runNs: 1e9, slices: 10}, procSched{ok: true, waitNs: 5e6, runNs: 3e9, slices: 30}, 2)
	want := map[string]float64{"sweep_sim_runqueue_wait_ms": 4, "sweep_sim_runqueue_wait_ms_per_s": 2, "sweep_sim_oncpu_seconds": 2, "sweep_sim_timeslices": 20}
	for _, m := range r.Metrics {
		if w, ok := want[m.Name]; ok {
			if m.Value != w {
				t.Errorf("%s = %v, want %v", m.Name, m.Value, w)
			}
			delete(want, m.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("missing %v", want)
	}
}
