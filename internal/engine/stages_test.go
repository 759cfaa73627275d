package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// TestStagesTimeAJob checks that a job's way through the engine is timed
// in its lane's stages (Engine.Stages, ratelane_engine_stage_seconds):
// one interactive job leased, run and finished is counted once in each of
// queued, start, run and finish, in the bucket its duration falls in (the
// handler moves a standing clock by 3 ms, so its run lands in the bucket
// above the 2 ms bound), and nothing is counted in the batch
// lane.
//
// The histograms are read as soon as the Observer that runOneJob waits on
// hears of the finish, with the engine still running: the finisher records
// the finish stage once the outcome is written and before the Observer is
// told (Jobs.report's written), so the reading counts it however slow the
// machine. (Before session 19 the Observer came first and the test had to
// stop the engine; a reading taken right at the signal missed the finish
// on a loaded 2-core machine.)
func TestStagesTimeAJob(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	base := time.Now().Add(time.Minute)
	clock := testkit.NewClock(base)
	e, _ := runOneJob(t, s, clock.Now, engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
		clock.Add(3 * time.Millisecond)
		return job.Outcome{Class: job.ClassSuccess}
	}))

	got := map[string][]uint64{}
	e.Stages(func(lane, stage string, counts []uint64, _ float64) {
		if len(counts) != len(engine.StageBounds)+1 {
			t.Fatalf("%s/%s: %d buckets, want %d", lane, stage, len(counts), len(engine.StageBounds)+1)
		}
		got[lane+"/"+stage] = counts
	})
	total := func(c []uint64) (n uint64) {
		for _, v := range c {
			n += v
		}
		return n
	}
	for _, st := range []string{engine.StageQueued, engine.StageStart, engine.StageRun, engine.StageFinish} {
		if n := total(got["interactive/"+st]); n != 1 {
			t.Errorf("interactive/%s counted %d jobs, want 1", st, n)
		}
		if n := total(got["batch/"+st]); n != 0 {
			t.Errorf("batch/%s counted %d jobs, want 0", st, n)
		}
	}
	// The run took 3 ms of the clock: the bucket above 2 ms, up to 5 ms.
	if run := got["interactive/"+engine.StageRun]; run[3] != 1 {
		t.Errorf("interactive/run buckets %v; want the 3 ms run in the (2 ms, 5 ms] bucket", run)
	}
}

// TestStageTraceSpansAJob checks Config.StageTrace: one interactive job
// leased, run and finished is reported as four spans of its id, in the
// stages' order, each beginning where the one before ended, and its run
// span is the 3 ms the handler moved the standing clock by.
func TestStageTraceSpansAJob(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	clock := testkit.NewClock(time.Now().Add(time.Minute))
	var mu sync.Mutex
	var spans []engine.StageSpan
	done := make(finishedTransitions, 1)
	e, err := engine.New(engine.Config{Store: s, Region: "us", Now: clock.Now, Observer: done,
		StageTrace: func(sp engine.StageSpan) { mu.Lock(); spans = append(spans, sp); mu.Unlock() },
		Kinds: map[string]engine.Kind{"noop": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			clock.Add(3 * time.Millisecond)
			return job.Outcome{Class: job.ClassSuccess}
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	j := storetest.NewJob("acme", job.LaneInteractive, "k")
	insertNow(t, s, j)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	testkit.Recv(t, done, testkit.Timeout, "the finish")
	mu.Lock()
	defer mu.Unlock()
	want := []string{engine.StageQueued, engine.StageStart, engine.StageRun, engine.StageFinish}
	if len(spans) != len(want) {
		t.Fatalf("%d spans %+v; want %v", len(spans), spans, want)
	}
	for i, sp := range spans {
		if sp.Stage != want[i] || sp.ID != j.ID || sp.Kind != "noop" || sp.Lane != job.LaneInteractive {
			t.Errorf("span %d: %s of %s (%s, %s); want %s of %s (noop, interactive)", i, sp.Stage, sp.ID, sp.Kind, sp.Lane, want[i], j.ID)
		}
		if i > 0 && !sp.Start.Equal(spans[i-1].End) {
			t.Errorf("span %s begins at %v, the one before ended at %v", sp.Stage, sp.Start, spans[i-1].End)
		}
	}
	if d := spans[2].End.Sub(spans[2].Start); d != 3*time.Millisecond {
		t.Errorf("the run span is %v; want the handler's 3 ms", d)
	}
}
