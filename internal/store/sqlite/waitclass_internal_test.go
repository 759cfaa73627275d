//go:build cpulabels

package sqlite

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// TestWaitClasses (cpulabels builds): an interactive write's latency is
// split over the writer's stretches by class — a batch-only COMMIT in
// progress (b), its own BEGIN and COMMIT (d), another interactive write
// and another transaction's interactive COMMIT (f), checkpoints in a
// COMMIT or a gap (e), a batch transaction's run (a), and the batch
// transaction it joined with the COMMIT that carried it (c) — the parts
// summing to the latency.
func TestWaitClasses(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	inter := func(ms float64, found int32) *writeReq {
		return &writeReq{lane: job.LaneInteractive, at: at(ms), found: found}
	}
	w1, w2, w3, w4 := inter(0, writerCommitBatch), inter(3.8, writerRunInter), inter(13, writerHoldBatch), inter(4.5, writerRunInter)
	b := &writeReq{lane: job.LaneBatch, at: at(-6)}
	b3 := &writeReq{lane: job.LaneBatch, at: at(9)}
	seg := func(from, to float64, what string, r *writeReq, tx int64) wseg {
		return wseg{t0: at(from), t1: at(to), what: what, r: r, tx: tx}
	}
	// Oldest first, as the writer ran them.
	timeline := []wseg{
		seg(-5, -4, "begin", nil, 1),
		seg(-4, -2, "batch write AdvanceMany", b, 1),
		seg(-2, -1, "hold", nil, 1),
		seg(-1, 3, "commit batch-only plain", nil, 1),
		seg(3, 3.5, "begin", nil, 2),
		seg(3.5, 4, "interactive write Insert", w1, 2),
		seg(4, 5, "interactive write Finish", w2, 2),
		seg(5, 9, "commit with-interactive ckpt", nil, 2),
		seg(9, 10, "gap checkpoint", nil, 2),
		seg(10, 10.5, "begin", nil, 3),
		seg(10.5, 12, "batch write settleBatchItems", b3, 3),
		seg(12, 14, "hold", nil, 3),
		seg(14, 15, "interactive write Insert", w3, 3),
		seg(15, 20, "commit with-interactive plain", nil, 3),
		seg(20, 21, "begin", nil, 4),
		seg(21, 22, "interactive write Finish", w4, 4),
		seg(22, 23, "commit with-interactive plain", nil, 4),
	}
	upTo := func(n int) []wseg { // the first n stretches, newest first
		r := slices.Clone(timeline[:n])
		slices.Reverse(r)
		return r
	}
	// w5 found the writer idle 0.5 ms before the writer began its
	// transaction.
	w5 := &writeReq{lane: job.LaneInteractive, at: at(29.5), found: writerIdle}
	timeline = append(timeline,
		seg(30, 30.5, "begin", nil, 6),
		seg(30.5, 31.5, "interactive write Insert", w5, 6),
		seg(31.5, 32.5, "commit with-interactive plain", nil, 6))
	for _, c := range []struct {
		name string
		w    *writeReq
		n    int // stretches up to its COMMIT
		tx   int64
		nb   int
		drop int // a stretch (newest first) left out of the ring
		want map[string]float64
	}{
		{"arrived in a batch-only commit", w1, 8, 2, 0, 0,
			map[string]float64{wcBatchCommit: 3, wcOwnCommit: 0.5, wcOwnRun: 0.5, wcInteractive: 1, wcCheckpoint: 4}},
		{"joined a held batch transaction", w3, 14, 3, 1, 0,
			map[string]float64{wcJoined: 1 + 5, wcOwnRun: 1}},
		{"behind others", w4, 17, 4, 0, 0,
			map[string]float64{wcInteractive: 0.5 + 1 + 5, wcCheckpoint: 4 + 1, wcBatchRun: 0.5 + 1.5 + 2, wcOwnCommit: 1 + 1, wcOwnRun: 1}},
		{"another write of its transaction", w2, 8, 2, 0, 0,
			map[string]float64{wcInteractive: 0.2, wcOwnRun: 1, wcCheckpoint: 4}},
		{"uncovered", w2, 8, 2, 0, 2,
			map[string]float64{wcOwnRun: 1, wcCheckpoint: 4, wcUncovered: 0.2}},
		{"found the writer idle", w5, 20, 6, 0, 0,
			map[string]float64{wcWake: 0.5, wcOwnCommit: 0.5 + 1, wcOwnRun: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			recent := upTo(c.n)
			if c.drop > 0 { // a stretch the ring lost: nothing covers it
				recent = slices.Delete(recent, c.drop, c.drop+1)
			}
			got := waitClasses(recent, c.w, c.tx, c.nb)
			sum := 0.0
			for class, ms := range got.ms {
				sum += ms
				if math.Abs(ms-c.want[class]) > 1e-9 {
					t.Errorf("%s: %.3f ms, want %.3f (all: %v)", class, ms, c.want[class], got.ms)
				}
			}
			for class, ms := range c.want {
				if _, ok := got.ms[class]; !ok && ms != 0 {
					t.Errorf("%s: none, want %.3f ms", class, ms)
				}
			}
			if lat := float64(recent[0].t1.Sub(c.w.at)) / 1e6; math.Abs(sum-lat) > 1e-9 {
				t.Errorf("parts sum to %.3f ms, the latency is %.3f", sum, lat)
			}
		})
	}
}

// TestWaitClassStats (cpulabels builds): the dump's per-class figures —
// writes with any of a class, the class each waited longest in, the mean
// and p99 per write, and for c the batch writes and frames carried.
func TestWaitClassStats(t *testing.T) {
	cs := []classed{
		{phase: "sweep", lat: 4, ms: map[string]float64{wcOwnCommit: 1, wcOwnRun: 3}, sinceBatch: -1},
		{phase: "sweep", lat: 10, ms: map[string]float64{wcBatchCommit: 6, wcOwnCommit: 2, wcOwnRun: 2}, sinceBatch: -1},
		{phase: "sweep", lat: 12, ms: map[string]float64{wcJoined: 8, wcOwnRun: 4}, nb: 5, frames: 40, commitMs: 7, sinceBatch: -1},
		{phase: "sweep", lat: 3, ms: map[string]float64{wcOwnCommit: 2, wcOwnRun: 1}, frames: 3, commitMs: 2, sinceBatch: 500 * time.Microsecond},
		{phase: "sweep", lat: 5, ms: map[string]float64{wcOwnCommit: 4, wcOwnRun: 1}, frames: 5, commitMs: 4, sinceBatch: 200 * time.Microsecond},
	}
	var buf bytes.Buffer
	dumpWaitClasses(json.NewEncoder(&buf), cs)
	got := map[string]waitClassStat{}
	own := map[string]ownCommitStat{}
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		var l waitClassStat
		var o ownCommitStat
		json.Unmarshal(raw, &l)
		json.Unmarshal(raw, &o)
		switch {
		case l.Set == "all" && l.WaitClass != "":
			got[l.Class] = l
		case o.Set == "all" && o.OwnCommit != "":
			own[o.SinceBatchCommit] = o
		}
	}
	// The own commits: the joined write (nb 5) is left out; the first
	// write had no batch-only COMMIT before its own.
	if o := own["<1ms"]; o.Writes != 2 || o.CommitMeanMs != 3 || o.FramesMean != 4 || o.CommitP99Ms != 4 {
		t.Errorf("own commits < 1 ms after a batch-only one: %+v", o)
	}
	if o := own[">=100ms or none"]; o.Writes != 2 {
		t.Errorf("own commits with no batch-only one before: %+v", o)
	}
	if len(own) != 2 {
		t.Errorf("own-commit lines %v, want 2", own)
	}
	if d := got[wcOwnCommit]; d.With != 4 || d.Dominant != 3 || d.MeanMs != 9.0/5 || d.P99Ms != 4 || d.Writes != 5 {
		t.Errorf("d: %+v", d)
	}
	if b := got[wcBatchCommit]; b.With != 1 || b.Dominant != 1 || b.MeanMs != 6.0/5 || b.MaxMs != 6 {
		t.Errorf("b: %+v", b)
	}
	if c := got[wcJoined]; c.With != 1 || c.Dominant != 1 || c.BatchWrites != 5 || c.Frames != 40 {
		t.Errorf("c: %+v", c)
	}
	if o := got[wcOwnRun]; o.Dominant != 0 || o.With != 5 {
		t.Errorf("own run: %+v", o)
	}
	if l := got[wcOwnCommit].LatMeanMs; math.Abs(l-34.0/5) > 1e-9 {
		t.Errorf("latency mean %.3f, want %.3f", l, 34.0/5)
	}
}
