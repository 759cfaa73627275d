package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ioFloorRecording is a recorded writer timeline: the first 10 s of a
// batch-isolation sweep's SQLite transactions from a cpulabels build
// (RATELANE_WRITESTATS, the WALTx lines stripped to page numbers, the
// database size and the IO figures: counts and times, no payload).
const ioFloorRecording = "testdata/io-floor-sweep.jsonl"

// TestReadIOTimelineParsesARecording: the replay reader reads the
// recorded sweep in time order from 0, with its batch and interactive
// transactions, checkpoints and WAL restarts; another phase has none;
// and a recording without the IO figures is refused, not replayed as a
// burst at time 0.
func TestReadIOTimelineParsesARecording(t *testing.T) {
	t.Parallel()
	tl, err := readIOTimeline(ioFloorRecording, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.txs) != 362 {
		t.Errorf("%d transactions, want the recording's 362", len(tl.txs))
	}
	if tl.txs[0].at != 0 || tl.span < 9*time.Second || tl.span > 10*time.Second {
		t.Errorf("first at %v, span %v; want 0 and the recording's ~10 s", tl.txs[0].at, tl.span)
	}
	if !slices.IsSortedFunc(tl.txs, func(a, b ioTx) int { return int(a.at - b.at) }) {
		t.Error("transactions not in time order")
	}
	var batch, inter, ckpts, restarts, frames int
	for _, tx := range tl.txs {
		if tx.interactive {
			inter++
		} else {
			batch++
			frames += len(tx.pages)
		}
		if tx.ckpt > 0 {
			ckpts++
		}
		if tx.restart {
			restarts++
		}
	}
	if batch != 118 || inter != 244 || ckpts != 8 || restarts != 8 || frames == 0 {
		t.Errorf("batch %d, interactive %d, checkpoints %d, restarts %d, batch frames %d; want 118, 244, 8, 8, > 0", batch, inter, ckpts, restarts, frames)
	}
	if tl.dbPages < 100 {
		t.Errorf("database %d pages, want the recording's largest NPage1", tl.dbPages)
	}
	if all, err := readIOTimeline(ioFloorRecording, ""); err != nil || len(all.txs) != len(tl.txs) {
		t.Errorf("every phase: %d transactions, %v; want the sweep's %d (the recording holds no other)", len(all.txs), err, len(tl.txs))
	}
	if _, err := readIOTimeline(ioFloorRecording, "baseline"); err == nil {
		t.Error("phase baseline: no error, want none in the recording")
	}

	// A line as a cpulabels build wrote it before the IO figures.
	old := filepath.Join(t.TempDir(), "old.jsonl")
	if err := os.WriteFile(old, []byte(`{"WAL":true,"Phase":"sweep","Class":"tx batch-only"}`+"\n"+
		`{"WALTx":true,"Phase":"sweep","Kinds":["x"],"NPage0":1,"NPage1":2,"Pages":[1,2]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readIOTimeline(old, "sweep"); err == nil || !strings.Contains(err.Error(), "IO figures") {
		t.Errorf("a recording without IO figures: %v, want it refused", err)
	}
}

// TestIOScheduleAlternatesTheArms: every arm gets rounds windows, forward
// then backward, so that no arm has only the run's early or late windows.
func TestIOScheduleAlternatesTheArms(t *testing.T) {
	t.Parallel()
	got := ioSchedule([]string{"a", "b", "c"}, 4)
	want := []string{"a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"}
	if !slices.Equal(got, want) {
		t.Errorf("schedule %v, want %v", got, want)
	}
}

// TestIOFloorSmokeGivesEveryFigure runs io-floor's smoke with the
// recorded replay: every arm had its windows and interactive commits,
// every figure is a number, and every load reached a rate above 0 (the
// files are real, on the temp dir's device; no latency is asserted).
func TestIOFloorSmokeGivesEveryFigure(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), "io-floor", Options{Smoke: true, IOFloorReplay: ioFloorRecording})
	if err != nil {
		t.Fatal(err)
	}
	arms := []string{"alone", "synthetic", "replay", "burn5000us", "burn500us"}
	plan := IOFloor(true)
	for _, arm := range arms {
		if v, _ := r.Get(arm + "_windows"); v != float64(plan.Rounds) {
			t.Errorf("%s_windows = %v, want %d", arm, v, plan.Rounds)
		}
		for _, m := range []string{"_commits", "_commits_per_second", "_p50_ms", "_p99_ms", "_p999_ms"} {
			if v, ok := r.Get(arm + m); !ok || !(v > 0) {
				t.Errorf("%s%s = %v (present %v), want > 0", arm, m, v, ok)
			}
		}
		if arm == "alone" {
			continue
		}
		for _, m := range []string{"_p50_ratio", "_p99_ratio", "_p999_ratio", "_p99_ratio_lo", "_p99_ratio_hi"} {
			if v, ok := r.Get(arm + m); !ok || !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%s%s = %v (present %v), want a ratio", arm, m, v, ok)
			}
		}
	}
	for _, m := range []string{"synthetic_batch_pages_per_second", "synthetic_batch_syncs_per_second",
		"replay_batch_pages_per_second", "replay_batch_syncs_per_second",
		"burn5000us_burn_cpu_per_second", "burn500us_burn_cpu_per_second",
		"replay_recorded_seconds", "replay_recorded_pages_per_second", "replay_recorded_syncs_per_second"} {
		if v, ok := r.Get(m); !ok || !(v > 0) {
			t.Errorf("%s = %v (present %v), want an achieved rate > 0", m, v, ok)
		}
	}
	if _, err := os.Stat("/proc/diskstats"); err == nil {
		for _, arm := range arms {
			for _, m := range []string{"_device_writes_per_second", "_device_ms_per_write", "_device_flushes_per_second", "_device_ms_per_flush"} {
				if v, ok := r.Get(arm + m); !ok || v < 0 {
					t.Errorf("%s%s = %v (present %v), want the device's figure", arm, m, v, ok)
				}
			}
		}
	}
	for _, m := range []string{"replay_checkpoints", "replay_checkpoint_pages"} {
		if _, ok := r.Get(m); !ok {
			t.Errorf("%s missing", m)
		}
	}
}

// TestIOFloorReplayCheckpointsAndRestarts replays the recording's first
// seconds straight through (one long replay window): its checkpoints
// write the database file and its WAL restarts keep the WAL file at the
// size of the frames between restarts, not the sum of every append.
func TestIOFloorReplayCheckpointsAndRestarts(t *testing.T) {
	t.Parallel()
	tl, err := readIOTimeline(ioFloorRecording, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	// The timeline up to just after its second checkpoint, played at
	// once (every transaction's time moved to 0).
	var cut []ioTx
	var ck, total int
	for _, tx := range tl.txs {
		tx.at = 0
		cut = append(cut, tx)
		if !tx.interactive {
			total += len(tx.pages)
		}
		if tx.ckpt > 0 {
			if ck++; ck == 2 {
				break
			}
		}
	}
	tl.txs, tl.span = cut, 0
	dir := t.TempDir()
	var f ioFiles
	if f.wal, err = os.Create(filepath.Join(dir, "wal")); err != nil {
		t.Fatal(err)
	}
	defer f.wal.Close()
	if f.db, err = os.Create(filepath.Join(dir, "db")); err != nil {
		t.Fatal(err)
	}
	defer f.db.Close()
	var l ioLoad
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	arm := ioArmReplay
	done := make(chan error, 1)
	go func() {
		done <- replayIO(ctx, &f, tl, func() string { return arm }, func() <-chan struct{} { return nil }, &l)
	}()
	// Wait on state: both checkpoints replayed and the timeline wrapped
	// (its first batch transaction written again).
	if err := WaitFor(ctx, func() bool {
		return l.ckpts.Load() >= 2 && l.syncs.Load() > int64(len(cut)-countInteractive(cut))
	}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l.ckptPages.Load() == 0 {
		t.Error("checkpoints copied no page")
	}
	st, err := f.db.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 {
		t.Error("database file empty after the checkpoints")
	}
	ws, err := f.wal.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if max := int64(ioWALHeader + ioWALCap*ioFrame); ws.Size() > max || ws.Size() >= int64(ioWALHeader+total*ioFrame) {
		t.Errorf("WAL file %d bytes; want it overwritten from its start after restarts (< %d, and fewer than all its batch frames' %d)", ws.Size(), max, ioWALHeader+total*ioFrame)
	}
}

// countInteractive is how many of txs held an interactive write.
func countInteractive(txs []ioTx) int {
	n := 0
	for _, tx := range txs {
		if tx.interactive {
			n++
		}
	}
	return n
}
