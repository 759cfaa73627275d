package idlethread

import "testing"

// TestEnterLeave: Enter puts the calling goroutine's thread in SCHED_IDLE
// and Leave takes it out where the kernel allows (as root); where it does
// not, the goroutine stays locked to the idle thread, and this test's
// goroutine ends, taking the thread with it.
func TestEnterLeave(t *testing.T) {
	done := make(chan [2]bool)
	go func() {
		th, err := Enter()
		if err != nil {
			t.Errorf("Enter: %v", err)
			close(done)
			return
		}
		in, _ := Idle()
		back := th.Leave()
		after, _ := Idle()
		if back == after {
			t.Errorf("Leave reported restored %v, yet the thread is idle %v", back, after)
		}
		done <- [2]bool{in, back}
	}()
	got := <-done
	if !got[0] {
		t.Fatal("after Enter the thread is not SCHED_IDLE")
	}
	if !got[1] {
		t.Log("this process cannot leave SCHED_IDLE (not root): the thread ended with its goroutine")
	}
}
