package metrics

import (
	"testing"

	"github.com/ratelane/ratelane/internal/engine"
)

var _ engine.LeaseObserver = (*Metrics)(nil)

// The lease-fault metrics count what the engine reports, and the labels
// stay bounded: an unknown op is "_other", a kind is a bounded label.
func TestLeaseFaultMetrics(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	m.LeasesRecovered(3)
	m.LeasesRecovered(2)
	if got := value(t, m.recovered); got != 5 {
		t.Fatalf("leases recovered = %v, want 5", got)
	}
	m.OutcomeRefused(engine.OpFinish)
	m.OutcomeRefused(engine.OpHeartbeat)
	m.OutcomeRefused(engine.OpHeartbeat)
	m.OutcomeRefused("payload: secret")
	if got := value(t, m.refused.WithLabelValues("heartbeat")); got != 2 {
		t.Fatalf("refused heartbeats = %v, want 2", got)
	}
	if got := value(t, m.refused.WithLabelValues(OtherLabel)); got != 1 {
		t.Fatalf("refused with an unknown op = %v, want 1 under %q", got, OtherLabel)
	}
	m.HandlerAbandoned("llm")
	m.HandlerAbandoned("llm")
	m.StuckReturned("llm")
	if got := value(t, m.stuck); got != 1 {
		t.Fatalf("stuck = %v after two abandoned and one returned, want 1", got)
	}
	if got := value(t, m.abandoned.WithLabelValues("llm")); got != 2 {
		t.Fatalf("abandoned{kind=llm} = %v, want 2", got)
	}
}
