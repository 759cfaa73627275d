package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/idlethread"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// threadSeen records, per lane, whether the handlers that ran were on an
// idle thread.
type threadSeen struct {
	mu           sync.Mutex
	idle, normal map[job.Lane]int
	errs         []error
}

func (s *threadSeen) handler(_ context.Context, j *job.Job) job.Outcome {
	idle, err := idlethread.Idle()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == nil {
		s.idle, s.normal = map[job.Lane]int{}, map[job.Lane]int{}
	}
	switch {
	case err != nil:
		s.errs = append(s.errs, err)
	case idle:
		s.idle[j.Lane]++
	default:
		s.normal[j.Lane]++
	}
	return job.Outcome{Class: job.ClassSuccess}
}

// TestBatchThreadPolicyIdle: under BatchThreadPolicy "idle" a computing
// batch kind's handlers run on SCHED_IDLE threads and the interactive
// lane's do not; the real SQLite store's engine drains both lanes; every
// piece that entered an idle thread left it (as root here) or ended its
// thread. Without the policy no handler is on an idle thread.
func TestBatchThreadPolicyIdle(t *testing.T) {
	for _, policy := range []string{"", engine.BatchThreadsIdle} {
		t.Run("policy="+policy, func(t *testing.T) {
			s := newStore(t)
			var seen threadSeen
			for range 20 {
				insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"), storetest.NewJob("acme", job.LaneInteractive, "k"))
			}
			e := start(t, engine.Config{Store: s, Workers: 4, BatchCPUs: 1, BatchThreadPolicy: policy,
				Kinds: map[string]engine.Kind{"noop": {Handler: engine.HandlerFunc(seen.handler), Computes: true}}})
			waitFinal(t, s, time.Minute) // fails the test unless all 40 finish
			seen.mu.Lock()
			defer seen.mu.Unlock()
			if len(seen.errs) > 0 {
				t.Fatalf("reading the thread's policy: %v", seen.errs)
			}
			wantIdle := 0
			if policy == engine.BatchThreadsIdle {
				wantIdle = 20
			}
			if seen.idle[job.LaneBatch] != wantIdle || seen.idle[job.LaneInteractive] != 0 || seen.normal[job.LaneInteractive] != 20 {
				t.Fatalf("policy %q: handlers on idle threads %v, on normal ones %v; want %d batch ones idle and all 20 interactive ones normal",
					policy, seen.idle, seen.normal, wantIdle)
			}
			c := e.ThreadCounts()
			if c.Entered != int64(wantIdle) {
				t.Fatalf("thread counts %+v: want %d pieces entered", c, wantIdle)
			}
		})
	}
}

// TestBatchThreadPolicyIdlePiece: a computing piece of batch-lane work
// outside a handler (a sweep stretch, a batch group's aggregation) runs on
// an idle thread while it holds its turn, and where the thread can be
// restored (root or CAP_SYS_NICE) the goroutine is back on a normal
// thread after it: the engine's long-lived goroutines go on with other
// work.
func TestBatchThreadPolicyIdlePiece(t *testing.T) {
	s := newStore(t)
	e := start(t, engine.Config{Store: s, Workers: 2, BatchCPUs: 1, BatchThreadPolicy: engine.BatchThreadsIdle,
		Kinds: map[string]engine.Kind{"noop": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome { return job.Outcome{Class: job.ClassSuccess} })}}})
	if e.ThreadCounts().Policy != "pieces" {
		t.Skipf("thread counts %+v: this process cannot restore a thread from SCHED_IDLE (not root)", e.ThreadCounts())
	}
	done := make(chan [2]bool)
	go func() {
		end := engine.StartBatchPiece(e)
		in, _ := idlethread.Idle()
		end()
		after, _ := idlethread.Idle()
		done <- [2]bool{in, after}
	}()
	if got := <-done; got != [2]bool{true, false} {
		t.Fatalf("in the piece idle %v, after it idle %v: want true, false", got[0], got[1])
	}
}

// TestBatchThreadPolicyIdleChargesCPU: a computing batch handler on an
// idle thread is charged by the pacer its thread's CPU time, not the wall
// time it spent off the CPU: three handlers that each wait 100 ms are
// charged next to nothing by their threads' clocks, which spanned at least
// 300 ms of wall time. Without the policy they are charged their wall time.
func TestBatchThreadPolicyIdleChargesCPU(t *testing.T) {
	wait := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
		time.Sleep(100 * time.Millisecond)
		return job.Outcome{Class: job.ClassSuccess}
	})
	for _, policy := range []string{"", engine.BatchThreadsIdle} {
		t.Run("policy="+policy, func(t *testing.T) {
			s := newStore(t)
			for range 3 {
				insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
			}
			e := start(t, engine.Config{Store: s, Workers: 2, BatchCPUs: 1, BatchThreadPolicy: policy,
				Kinds: map[string]engine.Kind{"noop": {Handler: wait, Computes: true}}})
			waitFinal(t, s, time.Minute)
			c := e.BudgetCounts()
			if policy == "" {
				if c.ThreadCPUSeconds != 0 || c.ChargedSeconds < 0.3 {
					t.Fatalf("normal threads: %+v, want ≥ 0.3 s charged by wall time", c)
				}
				return
			}
			if c.ThreadWallSeconds < 0.3 || c.ThreadCPUSeconds > 0.03 || c.ChargedSeconds > 0.1 {
				t.Fatalf("idle threads: %+v, want ≥ 0.3 s of wall time charged as < 0.03 s of CPU (and < 0.1 s in all)", c)
			}
		})
	}
}
