package bench

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
)

// renice sets every thread of process pid to nice (Linux: setpriority on
// each task of /proc/PID/task, as renice(1) does), and says what it did.
// It goes over the tasks again until a pass finds none left at another
// nice (at most four passes): Linux keeps a nice per thread and a new
// thread inherits its creator's, so a thread made during a pass by one
// not yet set would keep the old nice. A nice below the current one
// (a higher priority) needs root or CAP_SYS_NICE: where it is refused,
// renice leaves the process as it was and the note says why.
func renice(pid, nice int) string {
	if nice == 0 {
		return "not niced"
	}
	if runtime.GOOS != "linux" {
		return "not niced: setting a child's priority is implemented for Linux only"
	}
	var (
		refused error
		ns      map[int]int
	)
	for range 4 {
		ns = taskNices(pid)
		if len(ns) == 0 {
			return fmt.Sprintf("not niced: cannot read /proc/%d/task", pid)
		}
		off := 0
		for tid, v := range ns {
			if v == nice {
				continue
			}
			off++
			if err := setThreadNice(tid, nice); err != nil && refused == nil {
				refused = err
			}
		}
		if refused != nil {
			return fmt.Sprintf("not niced: %v (nice %d asked)", refused, nice)
		}
		if off == 0 {
			break
		}
	}
	return fmt.Sprintf("nice %d on its %d threads", nice, len(ns))
}

// taskNices returns the nice of each thread of process pid by thread id
// (/proc/PID/task/*/stat, field 19); empty where unreadable.
func taskNices(pid int) map[int]int { return taskStatField(pid, 19) }

// taskPolicies returns the scheduling policy of each thread of process
// pid by thread id (/proc/PID/task/*/stat, field 41: SCHED_OTHER 0,
// SCHED_IDLE 5, sched(7)); empty where unreadable.
func taskPolicies(pid int) map[int]int { return taskStatField(pid, 41) }

// schedIdlePolicy is SCHED_IDLE's number in a stat file's policy field.
const schedIdlePolicy = 5

// taskStatField returns field k (numbered from 1, as proc(5) does) of
// each thread's stat file of process pid, by thread id; empty where
// unreadable.
func taskStatField(pid, k int) map[int]int {
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	ns := make(map[int]int, len(paths))
	for _, p := range paths {
		tid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		f, ok := statFields(p)
		if !ok || len(f) < k-2 {
			continue
		}
		v, err := strconv.Atoi(f[k-3])
		if err != nil {
			continue
		}
		ns[tid] = v
	}
	return ns
}

// idleThreads counts the child's threads now and those of them on
// SCHED_IDLE (taskPolicies); ok false where unreadable.
func (c *selfChild) idleThreads() (idle, all int, ok bool) {
	ps := taskPolicies(c.cmd.Process.Pid)
	for _, p := range ps {
		if p == schedIdlePolicy {
			idle++
		}
	}
	return idle, len(ps), len(ps) > 0
}

// nices returns the least and the greatest nice of the child's threads
// now (taskNices); ok false where unreadable.
func (c *selfChild) nices() (lo, hi int, ok bool) {
	for _, v := range taskNices(c.cmd.Process.Pid) {
		if !ok || v < lo {
			lo = v
		}
		if !ok || v > hi {
			hi = v
		}
		ok = true
	}
	return lo, hi, ok
}

// batchSimIdleRefused prints, once per process, that the batch
// simulator's child is not on SCHED_IDLE (Options.BatchSim): the run goes
// on without it, and its figures (batch_sim_idle_threads) say so too.
var batchSimIdleRefused sync.Once

// simNiceRefused prints, once per process, that the simulator child's
// priority could not be raised: the run goes on without it, and its
// figures (sim_child_nice_*) say so too.
var simNiceRefused sync.Once
