package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

// idleThreads counts this process's threads whose scheduling policy is
// SCHED_IDLE (5), from /proc/self/task/*/stat's 41st field.
func idleThreads(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread ended meanwhile
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // fields 3 on
		if len(f) > 38 && f[38] == "5" {
			n++
		}
	}
	return n
}

// TestBurnerIdleRunsOnIdleThreads: the bench burner with idle set
// (--burn-idle) spins on SCHED_IDLE threads, one per worker, and none is
// left idle once it ends (as root its threads are put back; otherwise they
// end with their goroutines); without idle no thread of the process is.
func TestBurnerIdleRunsOnIdleThreads(t *testing.T) {
	if n := idleThreads(t); n != 0 {
		t.Skipf("%d SCHED_IDLE threads before the burner", n)
	}
	for _, idle := range []bool{false, true} {
		b := burner{idle: idle}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { b.run(ctx, 2) })
		b.set(0.4)
		if idle {
			testkit.Eventually(t, 10*time.Second, "two SCHED_IDLE threads", func() error {
				if n := idleThreads(t); n != 2 {
					return fmt.Errorf("%d idle threads", n)
				}
				return nil
			})
		} else {
			time.Sleep(100 * time.Millisecond) // the workers spin meanwhile
			if n := idleThreads(t); n != 0 {
				t.Errorf("plain burner: %d SCHED_IDLE threads, want 0", n)
			}
		}
		cancel()
		wg.Wait()
		if b.err != nil {
			t.Fatalf("idle %v: %v", idle, b.err)
		}
		if n := idleThreads(t); n != 0 {
			t.Errorf("idle %v: %d SCHED_IDLE threads after the burner ended, want 0", idle, n)
		}
	}
}
