package bench

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// diskReader returns a reading of the block device holding dir from
// /proc/diskstats (nil when it cannot be found): the kernel's own counts
// of the device's writes and flushes and the milliseconds they took, which
// no CPU contention in this process moves (other processes' I/O to the
// device does).
func diskReader(dir string) func() (diskReading, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return nil
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return func() (diskReading, bool) {
		b, err := os.ReadFile("/proc/diskstats")
		if err != nil {
			return diskReading{}, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 14 || f[0] != strconv.FormatUint(major, 10) || f[1] != strconv.FormatUint(minor, 10) {
				continue
			}
			n := func(i int) int64 {
				if i >= len(f) {
					return 0
				}
				v, _ := strconv.ParseInt(f[i], 10, 64)
				return v
			}
			// Fields 8 and 11 (1-based after the name): writes completed
			// and ms writing; 19 and 20 (kernel 5.5+): flushes and ms.
			return diskReading{writes: n(7), writeMs: n(10), flushes: n(18), flushMs: n(19)}, true
		}
		return diskReading{}, false
	}
}
