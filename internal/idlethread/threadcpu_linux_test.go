//go:build linux

package idlethread

import (
	"testing"
	"time"
)

// TestThreadCPU: Thread.CPU is the entered thread's CPU clock, read from
// any goroutine: it grows by what the locked goroutine computes, not by
// what it waits, and another goroutine reads the same clock.
func TestThreadCPU(t *testing.T) {
	th := make(chan *Thread)
	step := make(chan string)
	go func() {
		t0, err := Enter()
		if err != nil {
			t.Errorf("Enter: %v", err)
			close(th)
			return
		}
		th <- t0
		for s := range step {
			switch s {
			case "spin":
				for c0, _ := t0.CPU(); ; {
					if c, _ := t0.CPU(); c-c0 >= 30*time.Millisecond {
						break
					}
				}
			case "sleep":
				time.Sleep(60 * time.Millisecond)
			}
			step <- "done"
		}
		t0.Leave()
	}()
	t0 := <-th
	if t0 == nil {
		t.FailNow()
	}
	defer close(step)
	do := func(s string) (cpu, wall time.Duration) {
		c0, ok := t0.CPU() // from this goroutine, not the locked one
		if !ok {
			t.Fatal("CPU: clock not read")
		}
		w0 := time.Now()
		step <- s
		<-step
		c1, _ := t0.CPU()
		return c1 - c0, time.Since(w0)
	}
	if cpu, wall := do("sleep"); cpu > 10*time.Millisecond {
		t.Errorf("a goroutine that slept %v: its thread's clock grew %v, want next to nothing", wall, cpu)
	}
	if cpu, wall := do("spin"); cpu < 30*time.Millisecond || cpu > wall {
		t.Errorf("a goroutine that computed 30 ms in %v: its thread's clock grew %v, want 30 ms to its wall time", wall, cpu)
	}
}
