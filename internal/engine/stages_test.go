package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
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
// The engine is stopped before the histograms are read: the Observer that
// runOneJob waits on hears of the finish inside the store write, before
// the finisher records the finish stage, so a reading taken right then
// could miss it (it did on a loaded 2-core machine). Stop returns once the
// finisher has exited, so every observation is in.
func TestStagesTimeAJob(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	base := time.Now().Add(time.Minute)
	clock := testkit.NewClock(base)
	e, _ := runOneJob(t, s, clock.Now, engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
		clock.Add(3 * time.Millisecond)
		return job.Outcome{Class: job.ClassSuccess}
	}))
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

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
