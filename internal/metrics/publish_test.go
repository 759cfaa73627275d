package metrics

import (
	"testing"

	"github.com/ratelane/ratelane/internal/engine"
)

var _ engine.PublishObserver = (*Metrics)(nil)

// The publication metrics count what the engine's pool reports under the
// engine's own result names, and an unknown result is "_other".
func TestPublicationMetrics(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	for _, r := range []string{engine.PublishPublished, engine.PublishPublished, engine.PublishFailed, engine.PublishHeld, engine.PublishLost, "payload: secret"} {
		m.Publication("review", r)
	}
	for result, want := range map[string]float64{"published": 2, "failed": 1, "held": 1, "lost": 1, OtherLabel: 1} {
		if got := value(t, m.published.WithLabelValues("review", result)); got != want {
			t.Errorf("publications{kind=review,result=%s} = %v, want %v", result, got, want)
		}
	}
	m.PublicationsQueued(1)
	m.PublicationsQueued(1)
	m.PublicationsQueued(-1)
	if got := value(t, m.pubQueued); got != 1 {
		t.Fatalf("queued = %v after two queued and one done, want 1", got)
	}
}
