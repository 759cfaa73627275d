package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestLaneNodePredictsTheOtherLaneUnserved: an engine serving one lane
// (Config.Lanes) makes its writer count the kinds it runs as served in
// that lane only; a job of the other lane is predicted as for a kind
// nothing serves here (another node may): at least the lane's oldest
// ready job's age, marked Unserved. Its own lane is predicted as served.
func TestLaneNodePredictsTheOtherLaneUnserved(t *testing.T) {
	s := newStore(t)
	old := storetest.NewJob("acme", job.LaneBatch, "k")
	old.Kind = "work"
	insertNow(t, s, old)
	clock := time.Now().Add(time.Hour)
	e, err := engine.New(engine.Config{Store: s, Region: "us", Lanes: []job.Lane{job.LaneInteractive},
		Kinds: map[string]engine.Kind{"work": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome { return job.Outcome{Class: job.ClassSuccess} })}},
		Now:   func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	w := e.Jobs()
	if !w.ServesIn("work", job.LaneInteractive, clock) || w.ServesIn("work", job.LaneBatch, clock) || !w.Serves("work", clock) {
		t.Fatalf("ServesIn(interactive, batch) = %v, %v; Serves = %v; want true, false, true",
			w.ServesIn("work", job.LaneInteractive, clock), w.ServesIn("work", job.LaneBatch, clock), w.Serves("work", clock))
	}
	// What a job's waiting_for reads: the handler here runs only the
	// interactive lane's jobs of the kind.
	if !w.OtherLaneOnly("work", job.LaneBatch) || w.OtherLaneOnly("work", job.LaneInteractive) {
		t.Fatalf("OtherLaneOnly(batch, interactive) = %v, %v; want true, false", w.OtherLaneOnly("work", job.LaneBatch), w.OtherLaneOnly("work", job.LaneInteractive))
	}
	ctx := context.Background()
	batch, err := w.PredictWait(ctx, engine.PredictParams{Kind: "work", Lane: job.LaneBatch, Keys: []string{"k"}})
	if err != nil {
		t.Fatal(err)
	}
	if !batch.Unserved || batch.Wait < 59*time.Minute {
		t.Fatalf("batch-lane prediction on an interactive-only node = %+v, want Unserved and at least the hour its oldest job waited", batch)
	}
	inter, err := w.PredictWait(ctx, engine.PredictParams{Kind: "work", Lane: job.LaneInteractive, Keys: []string{"k"}})
	if err != nil {
		t.Fatal(err)
	}
	if inter.Unserved || inter.Wait > time.Minute {
		t.Fatalf("interactive prediction on an interactive-only node = %+v, want served and no wait", inter)
	}
}

// TestLanesValidated: an unknown lane is refused.
func TestLanesValidated(t *testing.T) {
	_, err := engine.New(engine.Config{Store: newStore(t), Region: "us", Lanes: []job.Lane{"bulk"}})
	if err == nil {
		t.Fatal("engine.New accepted lane \"bulk\"")
	}
}
