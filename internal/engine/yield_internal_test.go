package engine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestYieldGateOffCostsNothing: with the gate off (BatchYieldMax zero, the
// default), the budget's bound off and the pacer off, entering and leaving
// the engine's count of interactive work, which every interactive job
// does, takes no lock and allocates nothing; with the gate on, the count
// and the gate's view follow the work in flight.
func TestYieldGateOffCostsNothing(t *testing.T) {
	off := newInFlight(newYieldGate(0).listener())
	newBatchBudget(-1, -1, newBatchPacer(-1, off), off)
	if n := testing.AllocsPerRun(100, func() { off.enter(); off.leave() }); n != 0 {
		t.Errorf("enter and leave with the gate and the budget off: %v allocations, want 0", n)
	}
	if n := off.count(); n != 0 {
		t.Errorf("off: %d in flight counted, want 0", n)
	}
	if off.stamp || off.budget != nil || len(off.listeners) != 0 {
		t.Errorf("off: stamp %v, budget %v, %d listeners; want nothing engaged", off.stamp, off.budget, len(off.listeners))
	}
	g := newYieldGate(DefaultBatchYieldMax)
	on := newInFlight(g.listener())
	on.enter()
	if n := on.count(); n != 1 || !g.busy {
		t.Fatalf("gate on, after enter: %d in flight, gate busy %v; want 1, true", n, g.busy)
	}
	on.leave()
	if n := on.count(); n != 0 || g.busy {
		t.Fatalf("gate on, after leave: %d in flight, gate busy %v; want 0, false", n, g.busy)
	}
}

// TestInFlightLeaveWithoutEnterPanics: the count never goes below zero
// silently (a batch lane bounded by a negative count would never be).
func TestInFlightLeaveWithoutEnterPanics(t *testing.T) {
	c := newInFlight()
	c.enter()
	c.leave()
	defer func() {
		if recover() == nil {
			t.Error("a leave without its enter did not panic")
		}
	}()
	c.leave()
}

// TestInFlightTellsEveryPolicy: one count, three readers. The yield
// gate's idle channel changes only when interactive work rises from none
// and falls back to none; the budget bounds batch pieces while any is in
// flight and wakes its waiting pieces when none is; the pacer's window
// starts when the last leaves.
func TestInFlightTellsEveryPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newYieldGate(DefaultBatchYieldMax)
		c := newInFlight(g.listener())
		p := newBatchPacer(0.5, c)
		b := newBatchBudget(1, 0, p, c)
		c.enter()
		c.enter()
		idle := g.idleChan() // as a piece held now would wait on
		c.leave()
		select {
		case <-idle:
			t.Fatal("the gate went idle with one piece of interactive work still in flight")
		default:
		}
		if !b.interactive.busy() || !g.busy || !p.about(time.Now()) {
			t.Fatalf("one piece left: budget sees interactive %v, gate busy %v, pacer about %v; want all true",
				b.interactive.busy(), g.busy, p.about(time.Now()))
		}
		// Another piece holds the budget's one turn while interactive work
		// is in flight (BatchPieces 1, no width): this one waits, and only
		// the fall to none lets it go.
		b.running = 1
		got := make(chan struct{})
		go func() {
			b.wait(context.Background(), pieceCPU)
			close(got)
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a batch piece took a turn past the bound while interactive work was in flight")
		default:
		}
		time.Sleep(time.Millisecond)
		c.leave()
		synctest.Wait()
		select {
		case <-idle:
		default:
			t.Fatal("the gate's idle channel was not closed when the last interactive work left")
		}
		select {
		case <-got:
		default:
			t.Fatal("the budget's held piece was not woken when the last interactive work left")
		}
		if b.interactive.busy() || g.busy || c.count() != 0 {
			t.Fatalf("none left: budget sees interactive %v, gate busy %v, count %d; want false, false, 0", b.interactive.busy(), g.busy, c.count())
		}
		if !p.about(time.Now()) {
			t.Error("the pacer forgot interactive work that left just now")
		}
		time.Sleep(BatchPaceWindow - time.Nanosecond)
		if !p.about(time.Now()) {
			t.Error("the pacer forgot interactive work that left within its window")
		}
		time.Sleep(time.Nanosecond)
		if p.about(time.Now()) {
			t.Error("the pacer still counts interactive work that left a window ago")
		}
	})
}

// TestQueuedWorkUntilALeaseSeesIt: interactive inserts the engine would
// lease now are one piece of interactive work in flight until a lease
// that began after the last of them has run; an insert during a lease
// keeps it for the next; a job not ready (scheduled later, or not the
// engine's) or answered from an idempotency key marks nothing.
func TestQueuedWorkUntilALeaseSeesIt(t *testing.T) {
	c := newInFlight(newYieldGate(DefaultBatchYieldMax).listener())
	now := time.Now()
	q := &queuedWork{interactive: c, ready: func(j *job.Job) bool { return j.Kind == "mine" && !j.EligibleAt.After(now) }}
	later := &job.Job{Kind: "mine", EligibleAt: now.Add(time.Minute)}
	other := &job.Job{Kind: "theirs", EligibleAt: now}
	mine := &job.Job{Kind: "mine", EligibleAt: now}
	q.inserted([]store.InsertResult{{Job: later}, {Job: other}, {Job: mine, Existing: true}})
	if n := c.count(); n != 0 {
		t.Fatalf("jobs not ready or not added: %d in flight, want 0", n)
	}
	q.inserted([]store.InsertResult{{Job: mine}})
	q.inserted([]store.InsertResult{{Job: mine}})
	if n := c.count(); n != 1 {
		t.Fatalf("two inserts: %d in flight, want 1 (one piece)", n)
	}
	gen := q.leasing()
	q.inserted([]store.InsertResult{{Job: mine}}) // during the lease
	q.seen(gen)
	if n := c.count(); n != 1 {
		t.Fatalf("after a lease that began before the last insert: %d in flight, want 1", n)
	}
	q.seen(q.leasing())
	if n := c.count(); n != 0 {
		t.Fatalf("after a lease that began after every insert: %d in flight, want 0", n)
	}
	q.seen(q.leasing()) // nothing queued: nothing to leave
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

// TestBatchCPUShareDefault: zero takes the default, 0.1 (the pacer on);
// -1, or any other share outside (0, 1), turns the pacer off and leaves
// the engine's count unstamped.
func TestBatchCPUShareDefault(t *testing.T) {
	if got := (Config{}).WithDefaults().BatchCPUShare; got != 0.1 {
		t.Errorf("BatchCPUShare 0: %v after WithDefaults, want 0.1", got)
	}
	for _, share := range []float64{-1, -0.5, 1, 1.5} {
		c := newInFlight()
		if p := newBatchPacer((Config{BatchCPUShare: share}).WithDefaults().BatchCPUShare, c); p != nil || c.stamp {
			t.Errorf("BatchCPUShare %v: pacer %v, stamping %v; want off", share, p, c.stamp)
		}
	}
}
