package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestScheduleTicks(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ScheduleTicks("eu", 2, 0, 1)
	m.ScheduleTicks("eu", 1, 5, 0)
	for outcome, want := range map[string]float64{TickEnqueued: 3, TickSkipped: 5, TickLost: 1} {
		if got := testutil.ToFloat64(m.ticks.WithLabelValues("eu", outcome)); got != want {
			t.Errorf("%s = %v, want %v", outcome, got, want)
		}
	}
}
