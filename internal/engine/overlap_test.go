package engine_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// shortPieces is a handler whose batch-lane jobs compute in 5 pieces of
// 2 ms with engine.Yield between them (a sweep's stretches), and whose
// interactive jobs take 10 ms (a review in flight).
func shortPieces(batch *concurrency) engine.HandlerFunc {
	return func(ctx context.Context, j *job.Job) job.Outcome {
		if j.Lane != job.LaneBatch {
			time.Sleep(10 * time.Millisecond)
			return job.Outcome{Class: job.ClassSuccess}
		}
		batch.enter()
		for range 5 {
			time.Sleep(2 * time.Millisecond)
			engine.Yield(ctx)
		}
		batch.leave()
		return job.Outcome{Class: job.ClassSuccess}
	}
}

// overlapUnderSparseInteractive runs 400 batch jobs of shortPieces beside
// one 10-ms interactive job every 50.7 ms (in flight a fifth of the time,
// as the bench's reviews are a few per cent of it) for two simulated
// seconds with yieldMax as Config.BatchYieldMax (the pacer at a quarter,
// set: the measure below is of that share, not of the default), and returns the engine's overlap totals over them and the
// batch jobs done. The period is no multiple of the batch lane's 8-ms
// cycle (a 2-ms piece, a 6-ms rest), so that the arrivals meet every phase
// of it: on a 50-ms grid they met only a few, which ones set by the order
// of goroutines at a tie in simulated time, and the measure hid a change
// in the lane's pacing behind that luck (session 40).
func overlapUnderSparseInteractive(t *testing.T, yieldMax time.Duration) (engine.OverlapCounts, int64) {
	t.Helper()
	var batch concurrency
	s := newStore(t)
	for range 400 {
		insertNow(t, s, storetest.NewJob("acme", job.LaneBatch, "k"))
	}
	e := start(t, engine.Config{Store: s, Workers: 8, BatchCPUs: 1, BatchCPUShare: 0.25, BatchYieldMax: yieldMax,
		Kinds: map[string]engine.Kind{"noop": {Handler: shortPieces(&batch), Computes: true}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := interactiveEvery(ctx, s, e, 50*time.Millisecond+700*time.Microsecond)
	time.Sleep(100 * time.Millisecond) // the first batch piece has run
	before := e.OverlapCounts()
	time.Sleep(2 * time.Second)
	after := e.OverlapCounts()
	cancel()
	<-done
	return engine.OverlapCounts{InteractiveSeconds: after.InteractiveSeconds - before.InteractiveSeconds,
		BatchSeconds: after.BatchSeconds - before.BatchSeconds, BothSeconds: after.BothSeconds - before.BothSeconds}, batch.done.Load()
}

// TestBatchComputingOverlapsInteractiveLessWithTheGate: with the pacer
// alone (yield gate off) a quarter of the lane's computing is spread
// uniformly over wall time, and a review in flight meets it about a
// quarter of the time; with the gate on (DefaultBatchYieldMax), a
// computing piece does not start while interactive work is in flight,
// and only the rest of a piece that was running when a review arrived
// overlaps it. Fails with the gate placed before the turn, or without
// the held time credited to the pacer's rest. In simulated time.
func TestBatchComputingOverlapsInteractiveLessWithTheGate(t *testing.T) {
	t.Parallel()
	var off, on engine.OverlapCounts
	var offDone, onDone int64
	synctest.Test(t, func(t *testing.T) { off, offDone = overlapUnderSparseInteractive(t, -1) })
	synctest.Test(t, func(t *testing.T) { on, onDone = overlapUnderSparseInteractive(t, engine.DefaultBatchYieldMax) })
	share := func(c engine.OverlapCounts) float64 { return c.BothSeconds / c.InteractiveSeconds }
	t.Logf("gate off: %+v share %.3f, %d batch jobs; gate on: %+v share %.3f, %d batch jobs", off, share(off), offDone, on, share(on), onDone)
	if off.InteractiveSeconds < 0.3 || on.InteractiveSeconds < 0.3 {
		t.Fatalf("interactive in flight %.3f s (gate off) and %.3f s (gate on) of 2 s, want about 0.4", off.InteractiveSeconds, on.InteractiveSeconds)
	}
	if s := share(off); s < 0.12 {
		t.Errorf("gate off: batch computing overlapped %.3f of interactive flight, want about a quarter (the pacer's share)", s)
	}
	if s := share(on); s > 0.08 {
		t.Errorf("gate on: batch computing overlapped %.3f of interactive flight, want under 0.08 (pieces held while a review is in flight)", s)
	}
	if onDone < offDone/2 {
		t.Errorf("gate on: %d batch jobs done in 2 s against %d with the gate off, want at least half", onDone, offDone)
	}
}

// TestBatchLaneProgressesUnderContinuousInteractiveWithTheGate: with the
// yield gate on (DefaultBatchYieldMax) and interactive work in flight all the time
// (a 10-ms job every 5 ms), each computing batch piece is held at most
// DefaultBatchYieldMax, so the batch lane still completes 10-ms jobs
// (about one per bound, rest and piece: 7 a second), and the holds end
// by the bound. Without the bound it would complete none. In simulated
// time.
func TestBatchLaneProgressesUnderContinuousInteractiveWithTheGate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var batch, inter concurrency
		e, stop := underInteractive(t, engine.Config{BatchCPUs: 1, BatchYieldMax: engine.DefaultBatchYieldMax}, 100, &batch, &inter)
		time.Sleep(2 * time.Second)
		done, y := batch.done.Load(), e.YieldCounts()
		stop()
		t.Logf("continuous interactive: %d batch jobs in 2 s, gate %+v, %d interactive jobs", done, y, inter.done.Load())
		if done < 8 {
			t.Errorf("the batch lane completed %d 10-ms jobs in 2 s of continuous interactive work, want at least 8 (one per %v bound and rest)", done, engine.DefaultBatchYieldMax)
		}
		if y.Bounded == 0 {
			t.Errorf("gate counts %+v: no piece released by the bound under continuous interactive work", y)
		}
	})
}
