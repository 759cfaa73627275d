//go:build cpulabels

package sqlite

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// The classes of an interactive write's time from its call to its answer,
// by what the writer did meanwhile (issue 15 item 3; docs/benchmarks.md,
// "Session 37 (s37h2)"). Waiting classes first, then the write's own work.
const (
	// wcBatchRun: the writer ran another transaction's batch-lane writes,
	// its BEGIN or its hold (a batch-only transaction's run).
	wcBatchRun = "a batch-tx run"
	// wcBatchCommit: another transaction's batch-only COMMIT (its fsync),
	// begun before the write was answered.
	wcBatchCommit = "b batch-only commit"
	// wcJoined: the write joined a transaction that held batch-lane
	// writes: the stretches of that transaction before its own run, and
	// the COMMIT that carried them with it.
	wcJoined = "c joined batch tx"
	// wcOwnCommit: its own transaction's BEGIN and COMMIT with no batch
	// write in it.
	wcOwnCommit = "d own commit"
	// wcCheckpoint: a checkpoint — a gap checkpoint, or a COMMIT (its own
	// or another's) that checkpointed.
	wcCheckpoint = "e checkpoint"
	// wcInteractive: other interactive writes — their runs, in its
	// transaction or another, and other transactions' COMMITs that held one.
	wcInteractive = "f other interactive"
	// wcOwnRun: its own run (not a wait).
	wcOwnRun = "own run"
	// wcWake: the writer was idle when the write was queued, and had not
	// begun its next stretch yet: the writer goroutine's wake-up (the Go
	// and OS schedulers).
	wcWake = "uncovered: idle writer's wake-up"
	// wcUncovered: the writer between other stretches (its loop, a
	// queue's hand-off).
	wcUncovered = "uncovered"
)

// waitClassOrder lists the classes as the dump writes them.
var waitClassOrder = []string{wcBatchRun, wcBatchCommit, wcJoined, wcOwnCommit, wcCheckpoint, wcInteractive, wcOwnRun, wcWake, wcUncovered}

// classed is one interactive write's latency split by class.
type classed struct {
	phase  string
	kind   string  // the write's caller (writeCaller)
	lat    float64 // its call to its answer, ms
	ms     map[string]float64
	nb     int   // batch-lane writes its transaction committed with it
	frames int64 // WAL frames its transaction's COMMIT appended (-1: unknown)
	// commitMs is its transaction's COMMIT's time, and sinceBatch how
	// long before that COMMIT began the last batch-only COMMIT ended
	// (-1: none yet).
	commitMs   float64
	sinceBatch time.Duration
	// overBeside: its COMMIT overlapped a checkpoint beside the writer
	// (Config.GapCheckpoint, not GapCheckpointOnWriter).
	overBeside bool
}

// waitClasses splits interactive write w's latency, up to the COMMIT of
// transaction tx (which holds nb batch-lane writes), over the writer's
// stretches recent (newest first, as far back as w's call; the newest
// is tx's COMMIT).
func waitClasses(recent []wseg, w *writeReq, tx int64, nb int) classed {
	c := classed{ms: map[string]float64{}, nb: nb}
	// Another transaction held an interactive write when its COMMIT says
	// so; its COMMIT comes before its other stretches, newest first.
	inter := map[int64]bool{}
	// Another transaction's BEGIN goes with its first write, the oldest
	// of its writes seen so far.
	firstInter := map[int64]bool{}
	var lat float64
	if len(recent) > 0 {
		lat = float64(recent[0].t1.Sub(w.at)) / 1e6
	}
	covered := 0.0
	var first time.Time // the first stretch's start after w's call
	for _, sg := range recent {
		if sg.t1.Before(w.at) {
			break
		}
		if !sg.t0.Before(w.at) {
			first = sg.t0
		}
		lo := sg.t0
		if lo.Before(w.at) {
			lo = w.at
		}
		ms := float64(sg.t1.Sub(lo)) / 1e6
		if strings.HasPrefix(sg.what, "commit with-interactive") {
			inter[sg.tx] = true
		}
		if sg.r != nil {
			firstInter[sg.tx] = sg.r.lane != job.LaneBatch
		}
		if ms <= 0 {
			continue
		}
		covered += ms
		in := inter[sg.tx]
		if sg.what == "begin" {
			in = firstInter[sg.tx]
		}
		c.ms[waitClass(sg, w, tx, nb, in)] += ms
	}
	un := lat - covered
	if w.found == writerIdle && !first.IsZero() {
		// Nothing ran from its call to the first stretch after it.
		wake := min(un, float64(first.Sub(w.at))/1e6)
		c.ms[wcWake] += wake
		un -= wake
	}
	c.ms[wcUncovered] += un
	return c
}

// waitClass is the class of stretch sg in interactive write w's latency:
// w is answered by transaction tx, which holds nb batch-lane writes;
// inter says whether sg's transaction held an interactive write (for a
// BEGIN: whether it began with one).
func waitClass(sg wseg, w *writeReq, tx int64, nb int, inter bool) string {
	commit := strings.HasPrefix(sg.what, "commit")
	switch {
	case sg.what == "gap checkpoint" || commit && strings.HasSuffix(sg.what, " ckpt"):
		return wcCheckpoint
	case sg.r == w:
		return wcOwnRun
	case sg.r != nil && sg.r.lane != job.LaneBatch:
		return wcInteractive
	case sg.tx == tx && nb > 0:
		// Its transaction began with batch-lane writes (none joins one
		// that holds an interactive write): it joined them.
		return wcJoined
	case sg.tx == tx:
		return wcOwnCommit
	case commit && inter:
		return wcInteractive
	case commit:
		return wcBatchCommit
	case sg.what == "begin" && inter:
		return wcInteractive
	}
	return wcBatchRun // another transaction's batch-lane write, hold or BEGIN
}

// waitClassStat is one line of the classes' dump: in phase, over the
// interactive writes of set ("all", "slowest 5%"), class's time.
type waitClassStat struct {
	WaitClass, Set, Class string
	Writes                int     // writes in the set
	With                  int     // of them, how many had any of class
	Dominant              int     // of them, how many waited longest in class (own run excluded)
	MeanMs                float64 // per write of the set
	P99Ms                 float64 // over the set's writes (zero included)
	MaxMs                 float64
	LatMeanMs             float64 // the set's mean latency
	// For class c: the batch-lane writes and WAL frames the joined
	// transactions' COMMITs carried, summed over the writes With.
	BatchWrites, Frames int64 `json:",omitempty"`
}

// dumpWaitClasses appends the class figures of cs to enc.
func dumpWaitClasses(enc *json.Encoder, cs []classed) {
	by := map[string][]classed{}
	for _, c := range cs {
		by[c.phase] = append(by[c.phase], c)
	}
	for phase, all := range by {
		sort.Slice(all, func(i, j int) bool { return all[i].lat < all[j].lat })
		for _, set := range []struct {
			name string
			cs   []classed
		}{{"all", all}, {"slowest 5%", all[len(all)*95/100:]}, {"over 10 ms", over10(all, "")},
			{"insert over 10 ms", over10(all, "insertLease")}} {
			for _, l := range waitClassStats(set.cs) {
				l.WaitClass, l.Set = phase, set.name
				enc.Encode(l)
			}
			for _, l := range ownCommitStats(set.cs) {
				l.OwnCommit, l.Set = phase, set.name
				enc.Encode(l)
			}
		}
	}
}

// over10 is the writes of cs (sorted by latency) that took over 10 ms
// from call to answer, and whose caller names kind (any: ""): the
// interactive writes that make a review's queued stage over 10 ms when
// the write is the insert that leased it (StageSpan.Via "insert";
// docs/benchmarks.md, "Session 44 (s44h1)").
func over10(cs []classed, kind string) []classed {
	i := sort.Search(len(cs), func(i int) bool { return cs[i].lat > 10 })
	var out []classed
	for _, c := range cs[i:] {
		if strings.Contains(c.kind, kind) {
			out = append(out, c)
		}
	}
	return out
}

// waitClassStats sums cs by class, in waitClassOrder.
func waitClassStats(cs []classed) []waitClassStat {
	var out []waitClassStat
	if len(cs) == 0 {
		return out
	}
	lat := 0.0
	for _, c := range cs {
		lat += c.lat
	}
	for _, class := range waitClassOrder {
		st := waitClassStat{Class: class, Writes: len(cs), LatMeanMs: lat / float64(len(cs))}
		v := make([]float64, 0, len(cs))
		for _, c := range cs {
			ms := c.ms[class]
			v = append(v, ms)
			st.MeanMs += ms
			st.MaxMs = max(st.MaxMs, ms)
			if ms > 0 {
				st.With++
				if class == wcJoined {
					st.BatchWrites += int64(c.nb)
					st.Frames += max(c.frames, 0)
				}
			}
			if class != wcOwnRun && dominant(c) == class {
				st.Dominant++
			}
		}
		st.MeanMs /= float64(len(cs))
		sort.Float64s(v)
		st.P99Ms = v[len(v)*99/100]
		out = append(out, st)
	}
	return out
}

// dominant is the class c waited longest in (its own run aside).
func dominant(c classed) string {
	best, bestMs := "", 0.0
	for _, class := range waitClassOrder {
		if class != wcOwnRun && c.ms[class] > bestMs {
			best, bestMs = class, c.ms[class]
		}
	}
	return best
}

// ownCommitStat is one line of the own-commit dump: in phase, over the
// interactive writes of set whose transaction held no batch-lane write
// (class d), those whose COMMIT began SinceBatchCommit after the last
// batch-only COMMIT ended: their COMMIT's time and WAL frames.
type ownCommitStat struct {
	OwnCommit, Set, SinceBatchCommit string
	Writes                           int
	CommitMeanMs, CommitP99Ms        float64
	FramesMean                       float64
}

// besideBucket is the ownCommitStat.SinceBatchCommit of the own COMMITs
// that overlapped a checkpoint beside the writer, whatever the time since
// the last batch-only COMMIT (they are in no other bucket).
const besideBucket = "overlapping a beside checkpoint"

// sinceBucket names the range of the time since the last batch-only
// COMMIT (ownCommitStat.SinceBatchCommit); negative: none.
func sinceBucket(d time.Duration) string {
	switch {
	case d < 0 || d >= 100*time.Millisecond:
		return ">=100ms or none"
	case d < time.Millisecond:
		return "<1ms"
	case d < 10*time.Millisecond:
		return "1-10ms"
	}
	return "10-100ms"
}

// ownCommitStats sums the class-d writes of cs (no batch-lane write in
// their transaction) by how soon after a batch-only COMMIT their own
// COMMIT began.
func ownCommitStats(cs []classed) []ownCommitStat {
	var out []ownCommitStat
	for _, b := range []string{"<1ms", "1-10ms", "10-100ms", ">=100ms or none", besideBucket} {
		st := ownCommitStat{SinceBatchCommit: b}
		var v []float64
		frames := 0.0
		for _, c := range cs {
			if c.nb > 0 || (c.overBeside && b != besideBucket) || (!c.overBeside && (b == besideBucket || sinceBucket(c.sinceBatch) != b)) {
				continue
			}
			v = append(v, c.commitMs)
			st.CommitMeanMs += c.commitMs
			frames += float64(max(c.frames, 0))
		}
		if len(v) == 0 {
			continue
		}
		st.Writes = len(v)
		st.CommitMeanMs /= float64(len(v))
		st.FramesMean = frames / float64(len(v))
		sort.Float64s(v)
		st.CommitP99Ms = v[len(v)*99/100]
		out = append(out, st)
	}
	return out
}
