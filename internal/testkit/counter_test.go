package testkit

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A Counter's Reached channel closes when the count gets there, not
// before, and at once for a count already passed; concurrent adds all
// count.
func TestCounter(t *testing.T) {
	t.Parallel()
	var c Counter
	early := c.Reached(0)
	select {
	case <-early:
	default:
		t.Fatal("Reached(0) of a zero Counter is not closed")
	}
	three := c.Reached(3)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { c.Add(1) })
	}
	wg.Wait()
	select {
	case <-three:
		t.Fatalf("Reached(3) closed at %d", c.Load())
	default:
	}
	c.Add(1)
	Recv(t, three, Timeout, "the third add")
	if n := c.Load(); n != 3 {
		t.Fatalf("Load = %d, want 3", n)
	}
}

// Inside a synctest bubble a wait on Reached is a durable block: the
// bubble's clock moves straight to the timer that makes the count, with
// no polls between.
func TestCounterInBubble(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var c Counter
		start := time.Now()
		time.AfterFunc(time.Hour, func() { c.Add(1) })
		Recv(t, c.Reached(1), 2*time.Hour, "the timer's add")
		if d := time.Since(start); d != time.Hour {
			t.Fatalf("waited %v of the bubble's time, want exactly 1h", d)
		}
	})
}
