package engine

import "testing"

// TestYieldGateOffCostsNothing: with the gate off (BatchYieldMax zero, the
// default) entering and leaving it, which every interactive job does,
// takes no lock and allocates nothing; on, it counts the work in flight.
func TestYieldGateOffCostsNothing(t *testing.T) {
	off := newYieldGate(0)
	if n := testing.AllocsPerRun(100, func() { off.enter()() }); n != 0 {
		t.Errorf("enter and leave on an off gate: %v allocations, want 0", n)
	}
	if off.inFlight != 0 {
		t.Errorf("off gate counts %d in flight, want 0", off.inFlight)
	}
	on := newYieldGate(DefaultBatchYieldMax)
	leave := on.enter()
	if on.inFlight != 1 {
		t.Fatalf("on gate counts %d in flight after enter, want 1", on.inFlight)
	}
	leave()
	leave() // a second call is a no-op
	if on.inFlight != 0 {
		t.Fatalf("on gate counts %d in flight after leave, want 0", on.inFlight)
	}
}
