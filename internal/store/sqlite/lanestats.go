package sqlite

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// laneStats are the writer's figures per lane (store.LaneWrites): atomic,
// so WriteCounts reads them while the writer runs.
type laneStats struct {
	// mu orders a write's enqueue (and its read of the other lane's
	// ended) with the writer's count of finished writes, so that a
	// write's Behind counts exactly the other lane's writes that finished
	// while it was queued or running.
	mu                 sync.Mutex
	interactive, batch laneCounts
}

// laneCounts are one lane's figures.
type laneCounts struct {
	// ended counts the lane's writes the writer finished running (each
	// write's Behind is the other lane's ended over its wait).
	ended  atomic.Int64
	wait   hist
	behind hist
}

func (l *laneStats) of(lane job.Lane) *laneCounts {
	if lane == job.LaneBatch {
		return &l.batch
	}
	return &l.interactive
}

// otherEnded is the other lane's count of finished writes, read when a
// write of lane is called.
func (l *laneStats) otherEnded(lane job.Lane) int64 {
	if lane == job.LaneBatch {
		return l.interactive.ended.Load()
	}
	return l.batch.ended.Load()
}

// started records r's wait: the writer is about to run it.
func (l *laneStats) started(r *writeReq) {
	l.of(r.lane).wait.observe(store.WaitBounds, time.Since(r.at).Seconds())
}

// ended records that the writer finished running r.
func (l *laneStats) ended(r *writeReq) {
	l.mu.Lock()
	l.of(r.lane).ended.Add(1)
	l.mu.Unlock()
}

// done records, as r is answered, how many writes of the other lane the
// writer ran between r's call and its commit.
func (l *laneStats) done(r *writeReq) {
	l.of(r.lane).behind.observe(store.BehindBounds, float64(l.otherEnded(r.lane)-r.ended))
}

// read returns both lanes' histograms.
func (l *laneStats) read() map[job.Lane]store.LaneWrites {
	return map[job.Lane]store.LaneWrites{
		job.LaneInteractive: {Wait: l.interactive.wait.read(store.WaitBounds), Behind: l.interactive.behind.read(store.BehindBounds)},
		job.LaneBatch:       {Wait: l.batch.wait.read(store.WaitBounds), Behind: l.batch.behind.read(store.BehindBounds)},
	}
}

// hist is a histogram over bounds fixed by its caller (store.WaitBounds or
// store.BehindBounds), with one more bucket for observations above them.
type hist struct {
	buckets [16]atomic.Uint64 // per bucket, not cumulative
	sumBits atomic.Uint64     // float64 bits; only the writer goroutine adds
}

func (h *hist) observe(bounds []float64, v float64) {
	i := 0
	for i < len(bounds) && v > bounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sumBits.Store(math.Float64bits(math.Float64frombits(h.sumBits.Load()) + v))
}

func (h *hist) read(bounds []float64) store.Histogram {
	out := store.Histogram{Bounds: bounds, Buckets: make([]uint64, len(bounds))}
	var cum uint64
	for i := range bounds {
		cum += h.buckets[i].Load()
		out.Buckets[i] = cum
	}
	out.Count = cum + h.buckets[len(bounds)].Load()
	out.Sum = math.Float64frombits(h.sumBits.Load())
	return out
}
