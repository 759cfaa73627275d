package bench

import (
	"os"
	"testing"
)

// TestReadHost: on Linux the machine's steal and iowait are read, and a
// phase's figures are the difference of two readings; elsewhere none is
// added.
func TestReadHost(t *testing.T) {
	t.Parallel()
	a := hostReading{ok: true, steal: 1, iowait: 2, pressureOK: true, cpuSomeMicrosec: 1000}
	b := hostReading{ok: true, steal: 1.5, iowait: 2, pressureOK: true, cpuSomeMicrosec: 4000}
	var r Result
	addHost(&r, "sweep", a, b)
	for name, want := range map[string]float64{"sweep_host_steal_seconds": 0.5, "sweep_host_iowait_seconds": 0, "sweep_host_cpu_some_ms": 3} {
		if got, ok := r.Get(name); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	var none Result
	addHost(&none, "sweep", hostReading{}, b)
	if len(none.Metrics) != 0 {
		t.Errorf("figures from an unread counter: %+v", none.Metrics)
	}
	if _, err := os.Stat("/proc/stat"); err == nil {
		if h := readHost(); !h.ok || h.steal < 0 || h.iowait < 0 {
			t.Errorf("readHost() = %+v, want /proc/stat's steal and iowait", h)
		}
	}
}
