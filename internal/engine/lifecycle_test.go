package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
)

func newIdle(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Store: newStore(t), Region: "us", Kinds: map[string]engine.Kind{
		"noop": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome { return job.Outcome{Class: job.ClassSuccess} })},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Stop before Start returns at once (it used to panic on a nil cancel
// function), a second Stop is a no-op, and a stopped engine does not start.
func TestStopBeforeStartAndTwice(t *testing.T) {
	t.Parallel()
	e := newIdle(t)
	if err := e.Stop(context.Background()); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := e.Start(context.Background()); !errors.Is(err, engine.ErrStopped) {
		t.Fatalf("start after stop: %v, want ErrStopped", err)
	}
}

// A started engine stops once; the second Stop returns without waiting
// again, and Start twice is refused.
func TestStartStopTwice(t *testing.T) {
	t.Parallel()
	e := newIdle(t)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err == nil {
		t.Fatal("second start succeeded")
	}
	for i := range 2 {
		if err := e.Stop(context.Background()); err != nil {
			t.Fatalf("stop %d: %v", i+1, err)
		}
	}
}
