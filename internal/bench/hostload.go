package bench

import (
	"bytes"
	"os"
	"strconv"
)

// hostReading is the machine's own counters at one instant (Linux; ok
// false elsewhere): the CPU time the hypervisor gave other guests while
// this one wanted it (steal) and the idle time with I/O outstanding
// (iowait), summed over every CPU, from /proc/stat; and the time some
// runnable task waited for a CPU (/proc/pressure/cpu "some total", where
// the kernel has pressure stall information). A phase whose latencies
// moved with these was disturbed by the host, not by the sweep: the
// other helpers' builds on a shared 2-core machine showed as steal and
// CPU pressure in session 32.
type hostReading struct {
	ok              bool
	steal, iowait   float64 // seconds
	pressureOK      bool
	cpuSomeMicrosec float64
}

// clockTicks is USER_HZ, the unit of /proc/stat's times: 100 on every
// Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs cgo).
const clockTicks = 100

// readHost reads the machine's counters now; a file that cannot be read
// (another OS, a restricted /proc) leaves its figures out.
func readHost() hostReading {
	var h hostReading
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		// cpu user nice system idle iowait irq softirq steal ...
		if f := bytes.Fields(line); len(f) > 8 && string(f[0]) == "cpu" {
			iowait, err1 := strconv.ParseFloat(string(f[5]), 64)
			steal, err2 := strconv.ParseFloat(string(f[8]), 64)
			if err1 == nil && err2 == nil {
				h.ok, h.iowait, h.steal = true, iowait/clockTicks, steal/clockTicks
			}
		}
	}
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		if rest, ok := bytes.CutPrefix(line, []byte("some ")); ok {
			for _, f := range bytes.Fields(rest) {
				if v, ok := bytes.CutPrefix(f, []byte("total=")); ok {
					if us, err := strconv.ParseFloat(string(v), 64); err == nil {
						h.pressureOK, h.cpuSomeMicrosec = true, us
					}
				}
			}
		}
	}
	return h
}

// addHost adds what the machine's counters did between a and b to r as
// phase's figures; nothing where they could not be read.
func addHost(r *Result, phase string, a, b hostReading) {
	if a.ok && b.ok {
		r.add(phase+"_host_steal_seconds", b.steal-a.steal, "s CPU stolen by the hypervisor in the phase, every CPU summed (/proc/stat)")
		r.add(phase+"_host_iowait_seconds", b.iowait-a.iowait, "s CPU idle waiting for I/O in the phase, every CPU summed (/proc/stat)")
	}
	if a.pressureOK && b.pressureOK {
		r.add(phase+"_host_cpu_some_ms", (b.cpuSomeMicrosec-a.cpuSomeMicrosec)/1000, "ms some runnable task waited for a CPU in the phase (/proc/pressure/cpu some total)")
	}
}
