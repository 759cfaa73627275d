package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// procSched is a process's scheduler counters summed over its threads
// (Linux /proc/PID/task/*/schedstat): the time its threads ran on a CPU,
// the time they waited in the OS run queue for one (runnable, no core),
// and their timeslices. The run-queue wait is what Go's own
// /sched/latencies cannot see: a goroutine that holds a P is "running"
// to the Go scheduler while its thread waits for a core. A thread that
// exited between two readings takes its counts with it (a Go runtime
// rarely ends one), so a difference can only understate the wait.
type procSched struct {
	ok               bool
	runNs, waitNs    float64
	slices, nthreads float64
}

// readProcSched reads pid's threads' schedstat now; ok false where it
// cannot be read (another OS, a restricted /proc, a process gone).
func readProcSched(pid int) procSched {
	paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(paths) == 0 {
		return procSched{}
	}
	var s procSched
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended since the glob
		}
		run, wait, slices, ok := parseSchedstat(b)
		if !ok {
			continue
		}
		s.ok = true
		s.runNs += run
		s.waitNs += wait
		s.slices += slices
		s.nthreads++
	}
	return s
}

// parseSchedstat reads a schedstat line: ns on a CPU, ns waiting in the
// run queue, timeslices.
func parseSchedstat(b []byte) (run, wait, slices float64, ok bool) {
	f := bytes.Fields(b)
	if len(f) < 3 {
		return 0, 0, 0, false
	}
	var v [3]float64
	for i := range v {
		x, err := strconv.ParseFloat(string(f[i]), 64)
		if err != nil {
			return 0, 0, 0, false
		}
		v[i] = x
	}
	return v[0], v[1], v[2], true
}

// addProcSched adds what who's threads did with the OS scheduler between
// a and b (a phase of secs seconds) to r as phase's figures; nothing
// where either reading failed.
func addProcSched(r *Result, phase, who string, a, b procSched, secs float64) {
	if !a.ok || !b.ok || secs <= 0 {
		return
	}
	wait := (b.waitNs - a.waitNs) / 1e6
	r.add(phase+"_"+who+"_runqueue_wait_ms", wait, "ms the "+who+" process's threads waited in the OS run queue for a core in the phase (/proc/PID/task/*/schedstat)")
	r.add(phase+"_"+who+"_runqueue_wait_ms_per_s", wait/secs, "ms of that wait per second of the phase")
	r.add(phase+"_"+who+"_oncpu_seconds", (b.runNs-a.runNs)/1e9, "s its threads ran on a CPU in the phase (schedstat)")
	r.add(phase+"_"+who+"_timeslices", b.slices-a.slices, "its threads' timeslices in the phase (schedstat)")
}

// childSched reads the simulator child's threads (readProcSched); not ok
// without a child (the simulators in the bench's process).
func childSched(c *simChild) procSched {
	if c == nil || c.cmd == nil || c.cmd.Process == nil {
		return procSched{}
	}
	return readProcSched(c.cmd.Process.Pid)
}
