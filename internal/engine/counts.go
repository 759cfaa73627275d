package engine

import (
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// MaxCountedKeys bounds the limit keys one writer keeps start counts for.
// Past it, keys not counted for countedKeyIdle are forgotten; if all are
// recent, a new key is not counted (KeyCounts reports ok false) rather than
// letting a producer with a key per customer grow the map without bound.
const MaxCountedKeys = 10000

// countedKeyIdle is how long a counted key may go without a start before
// it may be forgotten to make room.
const countedKeyIdle = 10 * time.Minute

// Counts are a writer's totals since it was made: what its region's
// starts and 429s were on this node, by lane. They count every lease and
// written outcome through the writer, the engine's own workers' and
// external workers' over HTTP alike, but not other nodes'. A rate is the
// difference of two reads over the time between them.
type Counts struct {
	// Starts are jobs leased, by lane.
	Starts map[job.Lane]int64
	// RateLimited are attempts written as rate limited (a 429), by lane.
	RateLimited map[job.Lane]int64
}

// KeyCounts are one limit key's totals through a writer since it first
// counted the key.
type KeyCounts struct {
	// Starts are jobs leased that name the key.
	Starts int64
	// Cost is their summed cost (at least 1 each): the units they took
	// from the key's allowance, unless the key is per start (one unit a
	// start, whatever the cost: Starts is then the units). The writer does
	// not know a key's configuration; its reader does.
	Cost int64
	// RateLimited are attempts written as rate limited whose 429 applied to
	// the key (its scope, or every key of the job when it named none).
	RateLimited int64
	// Since is when the writer first counted the key.
	Since time.Time
}

// keyCount is KeyCounts plus when the key last moved.
type keyCount struct {
	KeyCounts
	last time.Time
}

// Counts returns the writer's totals by lane. It is safe for concurrent use.
func (w *Jobs) Counts() Counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := Counts{Starts: make(map[job.Lane]int64, len(job.Lanes)), RateLimited: make(map[job.Lane]int64, len(job.Lanes))}
	for _, l := range job.Lanes {
		c.Starts[l] = w.laneStarts[l]
		c.RateLimited[l] = w.laneLimited[l]
	}
	return c
}

// KeyCounts returns key's totals through this writer; ok is false when the
// writer has not counted it (no start of it here yet, forgotten, or past
// MaxCountedKeys).
func (w *Jobs) KeyCounts(key string) (c KeyCounts, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kc := w.keyCounts[key]
	if kc == nil {
		return KeyCounts{}, false
	}
	return kc.KeyCounts, true
}

// countLeased counts leased jobs; w.mu is held.
func (w *Jobs) countLeased(jobs []*job.Job, now time.Time) {
	if w.laneStarts == nil {
		w.laneStarts, w.laneLimited, w.keyCounts = map[job.Lane]int64{}, map[job.Lane]int64{}, map[string]*keyCount{}
	}
	for _, j := range jobs {
		w.laneStarts[j.Lane]++
		for _, k := range j.LimitKeys {
			if kc := w.keyCount(k, now); kc != nil {
				kc.Starts++
				kc.Cost += max(j.Cost, 1)
			}
		}
	}
}

// countRateLimited counts one written rate-limited attempt; w.mu is held.
func (w *Jobs) countRateLimited(j *job.Job, o job.Outcome, now time.Time) {
	if w.laneStarts == nil {
		w.laneStarts, w.laneLimited, w.keyCounts = map[job.Lane]int64{}, map[job.Lane]int64{}, map[string]*keyCount{}
	}
	w.laneLimited[j.Lane]++
	keys := j.LimitKeys
	if o.Scope != "" {
		keys = []string{o.Scope}
	}
	for _, k := range keys {
		if kc := w.keyCount(k, now); kc != nil {
			kc.RateLimited++
		}
	}
}

// keyCount returns key's counter, making one when there is room; w.mu is
// held.
func (w *Jobs) keyCount(key string, now time.Time) *keyCount {
	kc := w.keyCounts[key]
	if kc == nil {
		if len(w.keyCounts) >= MaxCountedKeys {
			for k, c := range w.keyCounts {
				if now.Sub(c.last) > countedKeyIdle {
					delete(w.keyCounts, k)
				}
			}
			if len(w.keyCounts) >= MaxCountedKeys {
				return nil
			}
		}
		kc = &keyCount{KeyCounts: KeyCounts{Since: now}}
		w.keyCounts[key] = kc
	}
	kc.last = now
	return kc
}
