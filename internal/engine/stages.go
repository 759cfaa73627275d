package engine

import (
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/job"
)

// Stages of a job's way through the engine, timed per lane (Engine.Stages)
// so that an interactive job's latency under a batch sweep can be taken
// apart: where it waited (for a lease, a goroutine, the finisher, the
// aggregation loop, the publication pool) and where it worked.
const (
	// StageQueued is from when a job became ready (the later of its
	// creation and its eligible time) to its lease.
	StageQueued = "queued"
	// StageStart is from the lease to its handler starting: the
	// goroutine's wait for a CPU, and for the batch budget (a batch job).
	StageStart = "start"
	// StageRun is the handler's run.
	StageRun = "run"
	// StageFinish is from the handler's return to its outcome written.
	StageFinish = "finish"
	// StageAggregateWait is from a parent's wake-up (a part final) to
	// its aggregation starting.
	StageAggregateWait = "aggregate_wait"
	// StageAggregate is one woken parent's aggregation: its parts read,
	// the Aggregator, the advance.
	StageAggregate = "aggregate"
	// StagePublishWait is from a validated job queued for the publication
	// pool to a publisher taking it.
	StagePublishWait = "publish_wait"
	// StagePublish is one publication: claim, Publisher, validated ->
	// published.
	StagePublish = "publish"
)

// StageNames lists the stages in the order a job passes them.
var StageNames = [...]string{StageQueued, StageStart, StageRun, StageFinish, StageAggregateWait, StageAggregate,
	StagePublishWait, StagePublish}

// StageBounds are the upper bounds, in seconds, of the stage histograms'
// buckets (the last bucket, +Inf, is implied): fine below 10 ms, where an
// idle machine's stages are, and up to the 30 s interactive budget. An
// array, so that the histograms' bucket counts follow its length.
var StageBounds = [...]float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30}

// stageHist is one lane's and stage's histogram: lock-free, a few atomic
// adds per observation.
type stageHist struct {
	counts [len(StageBounds) + 1]atomic.Uint64 // the last is +Inf
	nanos  atomic.Int64
}

// stageTimes holds every lane's and stage's histogram.
type stageTimes struct {
	h [2][len(StageNames)]stageHist // [0] interactive, [1] batch
}

func laneIndex(l job.Lane) int {
	if l == job.LaneBatch {
		return 1
	}
	return 0
}

// observe records that a job of lane spent d in stage s (an index into
// StageNames).
func (t *stageTimes) observe(l job.Lane, s int, d time.Duration) {
	if d < 0 {
		d = 0
	}
	h := &t.h[laneIndex(l)][s]
	sec := d.Seconds()
	i := 0
	for i < len(StageBounds) && sec > StageBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.nanos.Add(int64(d))
}

// Indexes into StageNames, for observe.
const (
	stQueued = iota
	stStart
	stRun
	stFinish
	stAggregateWait
	stAggregate
	stPublishWait
	stPublish
)

// Stages calls visit with each lane's and stage's histogram of the time
// jobs spent there since the engine was made: counts per bucket of
// StageBounds (not cumulative; one more for +Inf) and the sum in seconds.
// It is safe for concurrent use; each histogram is read without a lock, so
// a reading taken while jobs pass may be off by the observations in
// flight.
func (e *Engine) Stages(visit func(lane, stage string, counts []uint64, sumSeconds float64)) {
	for li, lane := range []job.Lane{job.LaneInteractive, job.LaneBatch} {
		for si, name := range StageNames {
			h := &e.stages.h[li][si]
			counts := make([]uint64, len(h.counts))
			for i := range h.counts {
				counts[i] = h.counts[i].Load()
			}
			visit(string(lane), name, counts, time.Duration(h.nanos.Load()).Seconds())
		}
	}
}

// StageSpan is one job's pass through one stage (Config.StageTrace): the
// job (for a parent's aggregation and publication, the parent), its
// parent when it is a part, its kind (empty for an aggregation or a
// publication, where the engine has only the id) and lane, the stage's
// name (StageNames) and when it began and ended. No payload.
type StageSpan struct {
	ID, Parent, Kind string
	Lane             job.Lane
	Stage            string
	Start, End       time.Time
	// Via, Asked and Woke say, for a queued stage only, how the lease
	// that ended it came about: Via is its trigger ("insert": leased in
	// the write that inserted it; "wake:<reason>": the fetch loop woken
	// by a Notify, "notify" when from outside the engine, such as an
	// insert; "poll": the loop's poll timer; "again": the loop's lease
	// right after one that took all it asked for; "start";
	// "finish:<lane>": a finish's write), Asked when that lease's
	// write (or the insert's) was called, and Woke when the fetch
	// loop's wait ended before it (zero for a lease that did not follow
	// a wait). They tell a job that waited for a wake-up or the poll
	// from one whose lease waited at the store's writer.
	Via         string
	Asked, Woke time.Time
}

// observeStage records that job id (of lane) spent [start, end) in stage s
// (an index into StageNames): in the histograms, and in Config.StageTrace
// when one is set.
func (e *Engine) observeStage(id, parent, kind string, l job.Lane, s int, start, end time.Time) {
	e.stages.observe(l, s, end.Sub(start))
	if e.cfg.StageTrace != nil {
		e.cfg.StageTrace(StageSpan{ID: id, Parent: parent, Kind: kind, Lane: l, Stage: StageNames[s], Start: start, End: end})
	}
}

// handlerLabel is the cpulabel of a handler of lane, holding a turn of the
// CPU governor (paced) or not; only a cpulabels build calls it.
func handlerLabel(l job.Lane, turn bool) string {
	switch {
	case l != job.LaneBatch:
		return cpulabel.Interactive
	case turn:
		return cpulabel.BatchPaced
	}
	return cpulabel.BatchUnpacedHand
}

// publishLabel is the cpulabel of a publication of lane.
func publishLabel(l job.Lane) string {
	if l == job.LaneBatch {
		return cpulabel.BatchUnpacedPub
	}
	return cpulabel.InteractivePub
}

// finishLabel is the cpulabel of a finish batch: the lane of its outcomes,
// or mixed.
func finishLabel(batch []result) string {
	var b, i bool
	for _, r := range batch {
		if r.job.Lane == job.LaneBatch {
			b = true
		} else {
			i = true
		}
	}
	switch {
	case b && i:
		return cpulabel.FinishMixed
	case b:
		return cpulabel.FinishBatch
	}
	return cpulabel.FinishInter
}
