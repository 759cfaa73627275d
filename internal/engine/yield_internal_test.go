package engine

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// TestYieldGateOffCostsNothing: with the gate off (BatchYieldMax zero, the
// default) and the budget off, entering and leaving the engine's count of
// interactive work, which every interactive job does, takes no lock and
// allocates nothing; with the gate on, the count and the gate's view
// follow the work in flight.
func TestYieldGateOffCostsNothing(t *testing.T) {
	off := newInFlight(newYieldGate(0).listener(), newBatchBudget(-1, -1, nil).listener())
	if n := testing.AllocsPerRun(100, func() { off.enter()() }); n != 0 {
		t.Errorf("enter and leave with the gate and the budget off: %v allocations, want 0", n)
	}
	if n := off.count(); n != 0 {
		t.Errorf("off: %d in flight counted, want 0", n)
	}
	g := newYieldGate(DefaultBatchYieldMax)
	on := newInFlight(g.listener())
	leave := on.enter()
	if n := on.count(); n != 1 || !g.busy {
		t.Fatalf("gate on, after enter: %d in flight, gate busy %v; want 1, true", n, g.busy)
	}
	leave()
	leave() // a second call is a no-op
	if n := on.count(); n != 0 || g.busy {
		t.Fatalf("gate on, after leave: %d in flight, gate busy %v; want 0, false", n, g.busy)
	}
}

// TestInFlightTellsBothPolicies: one count, two listeners. The yield
// gate's idle channel and the budget's view change only when interactive
// work rises from none and falls back to none, together.
func TestInFlightTellsBothPolicies(t *testing.T) {
	g, b := newYieldGate(DefaultBatchYieldMax), newBatchBudget(1, 0, nil)
	c := newInFlight(g.listener(), b.listener())
	first := c.enter()
	second := c.enter()
	idle := g.idle
	first()
	select {
	case <-idle:
		t.Fatal("the gate went idle with one piece of interactive work still in flight")
	default:
	}
	if !b.interactive || !g.busy {
		t.Fatalf("one piece left: budget sees interactive %v, gate busy %v; want both true", b.interactive, g.busy)
	}
	turn := b.turn
	second()
	select {
	case <-idle:
	default:
		t.Fatal("the gate's idle channel was not closed when the last interactive work left")
	}
	select {
	case <-turn:
	default:
		t.Fatal("the budget's held pieces were not woken when the last interactive work left")
	}
	if b.interactive || g.busy || c.count() != 0 {
		t.Fatalf("none left: budget sees interactive %v, gate busy %v, count %d; want false, false, 0", b.interactive, g.busy, c.count())
	}
}

// TestQueuedWorkUntilALeaseSeesIt: interactive inserts the engine would
// lease now are one piece of interactive work in flight until a lease
// that began after the last of them has run; an insert during a lease
// keeps it for the next; a job not ready (scheduled later, or not the
// engine's) marks nothing.
func TestQueuedWorkUntilALeaseSeesIt(t *testing.T) {
	c := newInFlight(newYieldGate(DefaultBatchYieldMax).listener())
	q := &queuedWork{enter: c.enter}
	now := time.Now()
	ready := func(j *job.Job) bool { return j.Kind == "mine" && !j.EligibleAt.After(now) }
	later := &job.Job{Kind: "mine", EligibleAt: now.Add(time.Minute)}
	other := &job.Job{Kind: "theirs", EligibleAt: now}
	q.inserted([]*job.Job{later, other}, ready)
	if n := c.count(); n != 0 {
		t.Fatalf("jobs not ready: %d in flight, want 0", n)
	}
	mine := &job.Job{Kind: "mine", EligibleAt: now}
	q.inserted([]*job.Job{mine}, ready)
	q.inserted([]*job.Job{mine}, ready)
	if n := c.count(); n != 1 {
		t.Fatalf("two inserts: %d in flight, want 1 (one piece)", n)
	}
	seen := q.leasing()
	q.inserted([]*job.Job{mine}, ready) // during the lease
	seen()
	if n := c.count(); n != 1 {
		t.Fatalf("after a lease that began before the last insert: %d in flight, want 1", n)
	}
	seen = q.leasing()
	seen()
	if n := c.count(); n != 0 {
		t.Fatalf("after a lease that began after every insert: %d in flight, want 0", n)
	}
	seen = q.leasing()
	seen() // nothing queued: nothing to leave
	if n := c.count(); n != 0 {
		t.Fatalf("a lease with nothing queued: %d in flight, want 0", n)
	}
}

// TestBatchYieldMaxDefault: zero takes the default (one constant to change
// to turn the gate on by default); negative turns the gate off whatever
// the default; positive is kept.
func TestBatchYieldMaxDefault(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, batchYieldMaxDefault},
		{-1, -1},
		{DefaultBatchYieldMax, DefaultBatchYieldMax},
	} {
		if got := (Config{BatchYieldMax: tc.in}).WithDefaults().BatchYieldMax; got != tc.want {
			t.Errorf("BatchYieldMax %v: %v after WithDefaults, want %v", tc.in, got, tc.want)
		}
	}
	if newYieldGate(-1).listener() != nil {
		t.Error("a negative BatchYieldMax left the gate on")
	}
}
