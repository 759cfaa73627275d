package bench

import (
	"context"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBatchFloorBurnsInItsWindowsOnly runs the batch-floor smoke with a
// burner child and burner goroutines: reviews are counted in both kinds
// of window, and the burner child takes CPU while it is on and next to
// none while it is off (Linux: the child's CPU is read from /proc).
func TestBatchFloorBurnsInItsWindowsOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("a smoke floor (about 10 s)")
	}
	r, err := Run(context.Background(), "batch-floor", Options{Smoke: true, Sim: SimChild, BurnChild: 0.4, BurnBench: 0.2, Duration: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"baseline_reviews", "burn_reviews"} {
		if v, _ := r.Get(name); v < 5 {
			t.Errorf("%s = %v, want the reviews of 4 windows of 0.75 s at 10/s", name, v)
		}
	}
	for _, name := range []string{"burn_p99_ratio", "burn_p50_ratio", "pooled_in_sweep_p99_ratio"} {
		if v, ok := r.Get(name); !ok || !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v (present %v)", name, v, ok)
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return
	}
	on, _ := r.Get("burn_burn_child_cpu_per_second")
	off, _ := r.Get("baseline_burn_child_cpu_per_second")
	// /proc counts in 10 ms ticks; a loaded machine gives the burner less
	// than it asks, but not next to nothing.
	if !(on > 0.1) || !(off < 0.05) {
		t.Errorf("burner child CPU s/s on %v, off %v; want > 0.1 on (0.4 asked) and ~0 off", on, off)
	}
	bon, _ := r.Get("burn_bench_cpu_per_second")
	boff, _ := r.Get("baseline_bench_cpu_per_second")
	if !(bon > boff) {
		t.Errorf("bench CPU s/s on %v, off %v; want more with its burner on", bon, boff)
	}
}

// TestBurnerChildSetsItsRateAndEnds: the burner child's protocol, served
// in-process: it says it burns, takes rates line by line, ends when its
// input does, and refuses a rate that is not a number.
func TestBurnerChildSetsItsRateAndEnds(t *testing.T) {
	t.Parallel()
	c, err := startBurnerChild()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.set(0.5); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := c.set(0); err != nil {
		t.Fatal(err)
	}
	if err := c.close(5 * time.Second); err != nil {
		t.Errorf("child exit: %v", err)
	}
	if !c.cmd.ProcessState.Exited() {
		t.Errorf("burner child did not exit by itself: %v", c.cmd.ProcessState)
	}
	if err := serveBurner(strings.NewReader("0.1\nlots\n"), io.Discard); err == nil {
		t.Error("a rate of \"lots\" was taken")
	}
}

// TestBurnerSpinsInPieces: with a piece set below burnPeriod the burner
// spins at most a piece before it yields its P (runtime.Gosched), so a
// goroutine woken meanwhile waits about a piece, not a whole spin of up
// to burnPeriod; without one it spins up to burnPeriod and never yields.
// The plan is checked, not timed: a timed version (a sleeper's overshoot
// beside the burner on one P) failed under CI's load with -race.
func TestBurnerSpinsInPieces(t *testing.T) {
	cases := []struct {
		piece, debt time.Duration
		want        time.Duration
		yield       bool
	}{
		{piece: 0, debt: time.Second, want: burnPeriod, yield: false},
		{piece: 0, debt: 300 * time.Microsecond, want: 300 * time.Microsecond, yield: false},
		{piece: 100 * time.Microsecond, debt: time.Second, want: 100 * time.Microsecond, yield: true},
		{piece: 100 * time.Microsecond, debt: 40 * time.Microsecond, want: 40 * time.Microsecond, yield: true},
		{piece: burnPeriod, debt: time.Second, want: burnPeriod, yield: false},
		{piece: 2 * burnPeriod, debt: time.Second, want: burnPeriod, yield: false},
		{piece: -time.Millisecond, debt: time.Second, want: burnPeriod, yield: false},
	}
	for _, c := range cases {
		b := burner{piece: c.piece}
		if d, y := b.spin(c.debt); d != c.want || y != c.yield {
			t.Errorf("piece %v, debt %v: spin %v, yield %v; want %v, %v", c.piece, c.debt, d, y, c.want, c.yield)
		}
	}
}
