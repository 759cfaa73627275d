package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// finishedTransitions is an Observer that passes on every written
// transition.
type finishedTransitions chan store.Transition

func (f finishedTransitions) Finished(_ *job.Job, _ job.Outcome, t store.Transition) { f <- t }
func (f finishedTransitions) Leased(int)                                             {}

// TestFinishCarriesAnswered checks that the engine carries the time a
// handler returned to the finish it writes (store.KeyEffect.Answered),
// where a window logs the start, and that it is earlier than the finish's
// own time: windows then free a start's slot one finish-queue delay
// sooner. The clock moves 1 ms on every reading, so the handler's return
// and the finish read different times.
func TestFinishCarriesAnswered(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	base := time.Now().Add(time.Minute)
	var ticks atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	_, tr := runOneJob(t, s, now, engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome { return job.Outcome{Class: job.ClassSuccess} }))
	if a := tr.Keys.Answered; a.IsZero() || !a.Before(tr.Keys.Now) {
		t.Fatalf("finish at %v carried Answered %v; want the handler's return, before the finish", tr.Keys.Now.Sub(base), a.Sub(base))
	}
}

// runOneJob starts an engine on s with clock now and a kind "noop" served
// by h, inserts one interactive job of it, and returns the engine (stopped
// when the test ends) and the job's written finish.
func runOneJob(t *testing.T, s store.Store, now func() time.Time, h engine.Handler) (*engine.Engine, store.Transition) {
	t.Helper()
	done := make(finishedTransitions, 1)
	e, err := engine.New(engine.Config{Store: s, Region: "us", Now: now, Observer: done, Kinds: map[string]engine.Kind{"noop": {Handler: h}}})
	if err != nil {
		t.Fatal(err)
	}
	insertNow(t, s, storetest.NewJob("acme", job.LaneInteractive, "k"))
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return e, testkit.Recv(t, done, testkit.Timeout, "the finish")
}
