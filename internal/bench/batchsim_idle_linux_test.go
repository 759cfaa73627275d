//go:build linux

package bench

import (
	"testing"
	"time"
)

// TestBatchSimChildThreadsAllIdle: the batch simulator's own child
// (BatchSimIdle) serves the batch simulator alone, and every one of its
// threads is on SCHED_IDLE, read from /proc/PID/task/*/stat after a burst
// of concurrent requests made its runtime start more threads: those must
// have inherited the policy too (a child reniced or set idle from outside
// after its start would race them).
func TestBatchSimChildThreadsAllIdle(t *testing.T) {
	t.Parallel()
	c, err := startSimChildOf(time.Second, simServesBatch, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if c.urls.Batch == "" || c.urls.LLM != "" {
		t.Fatalf("urls %+v: want the batch simulator's alone", c.urls)
	}
	burstBatchSim(c.urls.Batch)
	ps := taskPolicies(c.cmd.Process.Pid)
	if len(ps) < 2 {
		t.Fatalf("%d threads read, want the Go runtime's several", len(ps))
	}
	for tid, p := range ps {
		if p != schedIdlePolicy {
			t.Errorf("thread %d: policy %d, want SCHED_IDLE (%d); %s", tid, p, schedIdlePolicy, c.idleNote)
		}
	}
	if idle, all, ok := c.idleThreads(); !ok || idle != all {
		t.Errorf("idleThreads = %d of %d (ok %v), want all", idle, all, ok)
	}
}
