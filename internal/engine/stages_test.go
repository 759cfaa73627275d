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
