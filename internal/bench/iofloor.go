package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The io-floor workload (issue 15 item 3): is the interactive commit's
// tail under the sweep the device's, or the process's? Sessions 32–33
// read the in-process COMMIT's p99 (5 → 12 ms under the sweep) as the
// disk; session 34's throwaway probe found the device does not care and
// CPU in long bursts in the same process does (docs/benchmarks.md,
// "Session 34: the merge (lead)"). io-floor makes that probe a workload:
// an "interactive" writer appends pages to a WAL-like file and fdatasyncs
// it at Poisson arrivals, timing each write+sync, in alternating windows
// of arms: alone; beside a synthetic batch writer (pages and syncs per
// second); beside a replay of a recorded sweep's SQLite I/O (WAL appends
// of the real frame counts at the real times, WAL restarts, checkpoints
// copying the real pages into a database-like file and syncing it); and
// beside CPU bursts in the same process. No SQLite and none of ratelane's
// CPU: what the replay moves is the device's (and the kernel's I/O
// path's) share of the tail; what the bursts move is the scheduler's.

// Arms of io-floor.
const (
	ioArmAlone     = "alone"
	ioArmSynthetic = "synthetic"
	ioArmReplay    = "replay"
)

// ioPage and ioFrame are SQLite's default page size and a WAL frame (its
// 24-byte header and the page); ioWALHeader is the WAL file's header.
const (
	ioPage      = 4096
	ioFrame     = 24 + ioPage
	ioWALHeader = 32
)

// ioWALWrap is the frames at which the synthetic batch writer starts its
// WAL over: SQLite's default wal_autocheckpoint, after which a checkpoint
// lets the next writer restart the WAL, so the file stays that size and
// its blocks are overwritten, not appended.
const ioWALWrap = 1000

// ioWALCap is the frames past which any write starts the WAL over: the
// interactive writer alone would otherwise grow the file without end,
// where SQLite's WAL is checkpointed and overwritten from its beginning
// (and an append that grows a file costs its sync a metadata update an
// overwrite does not).
const ioWALCap = 2 * ioWALWrap

// IOFloorPlan is the io-floor workload's shape; IOFloor gives the default.
type IOFloorPlan struct {
	// Window is one arm's window; Rounds how many windows each arm gets,
	// in the order of ioSchedule.
	Window time.Duration
	Rounds int
	// Rate is the interactive writer's mean commits per second (Poisson
	// arrivals) and Pages the pages each appends before its fdatasync:
	// the batch-isolation bench's interactive commit rate under the sweep
	// and its frames per interactive commit (session 34's probe).
	Rate  float64
	Pages int
	// BatchPages and BatchSyncs are the synthetic batch writer's pages and
	// fdatasyncs per second: the sweep's WAL rate (s33h6) and more than
	// its fsync rate (session 34's probe).
	BatchPages, BatchSyncs float64
	// BurnShare is each CPU burst arm's share of every core (one burner
	// goroutine per GOMAXPROCS spins that share of the time), and
	// BurnPieces the length of the bursts, one arm each.
	BurnShare  float64
	BurnPieces []time.Duration
}

// IOFloor is the io-floor plan: 5 s windows, 4 rounds (a minute and a
// half with five arms), or 0.3 s windows and 2 rounds with smoke.
func IOFloor(smoke bool) IOFloorPlan {
	p := IOFloorPlan{Window: 5 * time.Second, Rounds: 4, Rate: 23, Pages: 10, BatchPages: 720, BatchSyncs: 60,
		BurnShare: 0.25, BurnPieces: []time.Duration{5 * time.Millisecond, 500 * time.Microsecond}}
	if smoke {
		p.Window, p.Rounds, p.Rate = 300*time.Millisecond, 2, 60
	}
	return p
}

// ioBurnArm names the CPU burst arm of piece: "burn" and its length in
// microseconds (a metric name has no "µ").
func ioBurnArm(piece time.Duration) string {
	return "burn" + strconv.FormatInt(piece.Microseconds(), 10) + "us"
}

// ioSchedule is the order of the windows: the arms forward, then
// backward, Rounds times (A B C C B A A B C ...), so every arm has
// windows early and late and sees the machine over the same stretch of
// time as the others (batch-floor's off on on off, for more arms).
func ioSchedule(arms []string, rounds int) []string {
	var out []string
	for r := range rounds {
		for i := range arms {
			if r%2 == 0 {
				out = append(out, arms[i])
			} else {
				out = append(out, arms[len(arms)-1-i])
			}
		}
	}
	return out
}

// ioTx is one recorded transaction of a sweep's SQLite writer, as the
// replay needs it.
type ioTx struct {
	at          time.Duration // its COMMIT's end, from the timeline's first
	pages       []uint32      // the page of each WAL frame it appended
	interactive bool          // it held an interactive write
	ckpt        int64         // frames a checkpoint in it copied
	restart     bool          // it wrote from the WAL's beginning
}

// ioTimeline is a recorded writer timeline (readIOTimeline).
type ioTimeline struct {
	txs     []ioTx
	span    time.Duration // from the first transaction to the last
	dbPages int64         // the database's largest size, in pages
}

// readIOTimeline reads the transactions of phase (all phases when "")
// from a cpulabels build's RATELANE_WRITESTATS file: its WALTx lines,
// each with its pages and its IO figures (end time, lane, checkpoint,
// WAL restart). Other lines are skipped. A file recorded before the IO
// figures existed, or with no transaction in phase, is an error.
func readIOTimeline(path, phase string) (ioTimeline, error) {
	f, err := os.Open(path)
	if err != nil {
		return ioTimeline{}, err
	}
	defer f.Close()
	var tl ioTimeline
	var first int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		var l struct {
			WALTx  bool
			Phase  string
			NPage1 int64
			Pages  []uint32
			IO     *struct {
				EndNs       int64
				Interactive bool
				Ckpt        int64
				Restart     bool
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return ioTimeline{}, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if !l.WALTx || (phase != "" && l.Phase != phase) {
			continue
		}
		if l.IO == nil || l.IO.EndNs == 0 {
			return ioTimeline{}, fmt.Errorf("%s:%d: a transaction without its IO figures (recorded before session 35?)", path, n)
		}
		if len(tl.txs) == 0 {
			first = l.IO.EndNs
		}
		tl.txs = append(tl.txs, ioTx{at: time.Duration(l.IO.EndNs - first), pages: l.Pages, interactive: l.IO.Interactive, ckpt: l.IO.Ckpt, restart: l.IO.Restart})
		tl.dbPages = max(tl.dbPages, l.NPage1)
	}
	if err := sc.Err(); err != nil {
		return ioTimeline{}, err
	}
	if len(tl.txs) == 0 {
		return ioTimeline{}, fmt.Errorf("%s: no transaction in phase %q", path, phase)
	}
	// Several stores' or dumps' lines may interleave: replay in time order.
	slices.SortStableFunc(tl.txs, func(a, b ioTx) int { return cmp.Compare(a.at, b.at) })
	if m := tl.txs[0].at; m < 0 {
		for i := range tl.txs {
			tl.txs[i].at -= m
		}
	}
	tl.span = tl.txs[len(tl.txs)-1].at
	return tl, nil
}

// ioFiles are io-floor's two files: a WAL-like file the interactive and
// batch writers append frames to, and a database-like file checkpoints
// copy pages into. pos is the WAL's next frame, shared by the writers as
// SQLite's writers share one WAL (its lock is left out: what this asks is
// the device's share, not the writer's queue).
type ioFiles struct {
	wal, db *os.File
	buf     []byte // frames of noise, the most any one write appends
	mu      sync.Mutex
	pos     int64
}

// reserve takes n frames at the WAL's end (from its beginning when
// restart, or past ioWALCap) and returns the first one's offset.
func (f *ioFiles) reserve(n int, restart bool) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if restart || f.pos+int64(n) > ioWALCap {
		f.pos = 0
	}
	at := f.pos
	f.pos += int64(n)
	return ioWALHeader + at*ioFrame
}

// appendFrames writes n frames from off, growing the noise buffer when a
// write is longer than any before.
func (f *ioFiles) appendFrames(off int64, n int) error {
	f.mu.Lock()
	if len(f.buf) < n*ioFrame {
		b := make([]byte, n*ioFrame)
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		f.buf = b
	}
	buf := f.buf[:n*ioFrame]
	f.mu.Unlock()
	_, err := f.wal.WriteAt(buf, off)
	return err
}

// diskReading is the device's counts (diskReader): writes completed and
// the milliseconds spent on them, flushes completed and theirs.
type diskReading struct{ writes, writeMs, flushes, flushMs int64 }

// sub is r less an earlier reading a.
func (r diskReading) sub(a diskReading) diskReading {
	return diskReading{r.writes - a.writes, r.writeMs - a.writeMs, r.flushes - a.flushes, r.flushMs - a.flushMs}
}

// ioSample is one interactive commit: its write+sync time, how late it
// started against its Poisson arrival, its window's arm and its start.
type ioSample struct {
	lat, late time.Duration
	arm       string
	at        time.Time
}

// ioLoad is what one arm's load did in its windows: the batch (synthetic
// or replayed) pages and syncs, checkpoints and their pages, and CPU
// spun by the burst arms.
type ioLoad struct {
	pages, syncs, ckpts, ckptPages atomic.Int64
	spun                           atomic.Int64 // ns
}

// runIOFloor runs io-floor (see the comment at the top of this file).
func runIOFloor(ctx context.Context, e *env) (Result, error) {
	plan := IOFloor(e.opts.Smoke)
	if e.opts.IOFloorRate > 0 {
		plan.Rate = e.opts.IOFloorRate
	}
	if e.opts.IOFloorPages > 0 {
		plan.Pages = e.opts.IOFloorPages
	}
	if e.opts.IOFloorBatchPages > 0 {
		plan.BatchPages = e.opts.IOFloorBatchPages
	}
	if e.opts.IOFloorBatchSyncs > 0 {
		plan.BatchSyncs = e.opts.IOFloorBatchSyncs
	}
	if e.opts.IOFloorBurnShare > 0 {
		plan.BurnShare = min(1, e.opts.IOFloorBurnShare)
	}
	if e.opts.IOFloorBurnPieces != nil {
		plan.BurnPieces = e.opts.IOFloorBurnPieces
	}
	arms := []string{ioArmAlone, ioArmSynthetic}
	var tl ioTimeline
	if e.opts.IOFloorReplay != "" {
		phase := cmp.Or(e.opts.IOFloorReplayPhase, "sweep")
		if phase == "all" {
			phase = "" // readIOTimeline's every phase
		}
		var err error
		if tl, err = readIOTimeline(e.opts.IOFloorReplay, phase); err != nil {
			return Result{}, fmt.Errorf("replay: %w", err)
		}
		arms = append(arms, ioArmReplay)
	}
	burnOf := map[string]time.Duration{}
	for _, p := range plan.BurnPieces {
		a := ioBurnArm(p)
		burnOf[a] = p
		arms = append(arms, a)
	}
	// The files live beside the bench's SQLite store (e.dir): the device
	// the store's WAL would be on.
	dir, err := os.MkdirTemp(e.dir, "io-floor-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	var files ioFiles
	if files.wal, err = os.Create(filepath.Join(dir, "io.db-wal")); err != nil {
		return Result{}, err
	}
	defer files.wal.Close()
	if files.db, err = os.Create(filepath.Join(dir, "io.db")); err != nil {
		return Result{}, err
	}
	defer files.db.Close()
	// A database-like file as large as the recorded one, written once, so
	// that checkpoints overwrite allocated blocks as they would in a real
	// database rather than fill holes in a sparse file.
	if err := fillFile(files.db, tl.dbPages*ioPage); err != nil {
		return Result{}, err
	}

	loads := map[string]*ioLoad{}
	for _, a := range arms {
		loads[a] = &ioLoad{}
	}
	var (
		armNow atomic.Pointer[string]
		wg     sync.WaitGroup
		errMu  sync.Mutex
		runErr error
	)
	setErr := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		runErr = cmp.Or(runErr, err)
	}
	current := func() string {
		if p := armNow.Load(); p != nil {
			return *p
		}
		return ""
	}
	// arm switches are broadcast by closing and replacing switched.
	var swMu sync.Mutex
	switched := make(chan struct{})
	waitSwitch := func() <-chan struct{} {
		swMu.Lock()
		defer swMu.Unlock()
		return switched
	}
	setArm := func(a string) {
		armNow.Store(&a)
		swMu.Lock()
		close(switched)
		switched = make(chan struct{})
		swMu.Unlock()
	}
	lctx, stopLoads := context.WithCancel(ctx)
	defer stopLoads()

	// The synthetic batch writer: BatchPages/BatchSyncs pages appended and
	// synced BatchSyncs times a second, in its arm's windows only.
	wg.Add(1)
	go func() {
		defer wg.Done()
		n := max(1, int(math.Round(plan.BatchPages/plan.BatchSyncs)))
		if err := paceInArm(lctx, ioArmSynthetic, current, waitSwitch, time.Duration(float64(time.Second)/plan.BatchSyncs), func() error {
			off := files.reserve(n, false)
			if off >= ioWALHeader+ioWALWrap*ioFrame {
				off = files.reserve(n, true)
			}
			if err := files.appendFrames(off, n); err != nil {
				return err
			}
			if err := fdatasync(files.wal); err != nil {
				return err
			}
			l := loads[ioArmSynthetic]
			l.pages.Add(int64(n))
			l.syncs.Add(1)
			return nil
		}); err != nil {
			setErr(fmt.Errorf("synthetic batch writer: %w", err))
		}
	}()
	if len(tl.txs) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := replayIO(lctx, &files, tl, current, waitSwitch, loads[ioArmReplay]); err != nil {
				setErr(fmt.Errorf("replay: %w", err))
			}
		}()
	}
	for a, piece := range burnOf {
		for range runtime.GOMAXPROCS(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				burstInArm(lctx, a, current, waitSwitch, piece, plan.BurnShare, &loads[a].spun)
			}()
		}
	}

	// The interactive writer, on this goroutine: Poisson arrivals, each a
	// write of Pages frames and an fdatasync, timed. A commit counts for
	// the window it started in; the warm-up window counts for none.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 35))
	var samples []ioSample
	walls := map[string]time.Duration{}
	windows := map[string]int{}
	disks := map[string]diskReading{}
	readDisk := diskReader(dir)
	diskNow := func() (diskReading, bool) {
		if readDisk == nil {
			return diskReading{}, false
		}
		return readDisk()
	}
	schedule := append([]string{""}, ioSchedule(arms, plan.Rounds)...) // "": warm-up
	next := time.Now()
	for _, arm := range schedule {
		setArm(arm)
		start := time.Now()
		d0, diskOK := diskNow()
		end := start.Add(plan.Window)
		for {
			next = next.Add(time.Duration(rng.ExpFloat64() / plan.Rate * float64(time.Second)))
			if next.After(end) {
				break
			}
			if err := sleepUntil(ctx, next); err != nil {
				return Result{}, err
			}
			t0 := time.Now()
			if err := files.appendFrames(files.reserve(plan.Pages, false), plan.Pages); err != nil {
				return Result{}, fmt.Errorf("interactive write: %w", err)
			}
			if err := fdatasync(files.wal); err != nil {
				return Result{}, fmt.Errorf("interactive sync: %w", err)
			}
			if arm != "" {
				samples = append(samples, ioSample{lat: time.Since(t0), late: t0.Sub(next), arm: arm, at: t0})
			}
		}
		if err := sleepUntil(ctx, end); err != nil {
			return Result{}, err
		}
		if arm != "" {
			walls[arm] += time.Since(start)
			windows[arm]++
			if d1, ok := diskNow(); ok && diskOK {
				d := d1.sub(d0)
				t := disks[arm]
				disks[arm] = diskReading{t.writes + d.writes, t.writeMs + d.writeMs, t.flushes + d.flushes, t.flushMs + d.flushMs}
			}
		}
	}
	setArm("")
	stopLoads()
	wg.Wait()
	if runErr != nil {
		return Result{}, runErr
	}
	return ioFloorResult(plan, arms, samples, walls, windows, disks, loads, tl), nil
}

// ioFloorResult turns io-floor's samples and loads into its figures.
func ioFloorResult(plan IOFloorPlan, arms []string, samples []ioSample, walls map[string]time.Duration, windows map[string]int, disks map[string]diskReading, loads map[string]*ioLoad, tl ioTimeline) Result {
	lats := map[string][]time.Duration{}
	lates := map[string][]time.Duration{}
	ats := map[string][]time.Time{}
	for _, s := range samples {
		lats[s.arm] = append(lats[s.arm], s.lat)
		lates[s.arm] = append(lates[s.arm], s.late)
		ats[s.arm] = append(ats[s.arm], s.at)
	}
	var r Result
	r.add("interactive_rate_asked", plan.Rate, "commits/s asked of the interactive writer (Poisson)")
	r.add("interactive_pages", float64(plan.Pages), "pages per interactive commit")
	r.add("window_seconds", plan.Window.Seconds(), "s, one arm's window")
	r.add("synthetic_pages_asked", plan.BatchPages, "pages/s asked of the synthetic batch writer")
	r.add("synthetic_syncs_asked", plan.BatchSyncs, "fdatasyncs/s asked of the synthetic batch writer")
	r.add("burn_share_asked", plan.BurnShare, "share of each core the burst arms spin")
	if len(tl.txs) > 0 {
		var pages, batchTxs, ckpts int64
		for _, tx := range tl.txs {
			if !tx.interactive {
				pages += int64(len(tx.pages))
				batchTxs++
			}
			if tx.ckpt > 0 {
				ckpts++
			}
		}
		secs := max(tl.span.Seconds(), 1e-9)
		r.add("replay_recorded_seconds", tl.span.Seconds(), "s of recorded writer timeline, replayed in a loop")
		r.add("replay_recorded_pages_per_second", float64(pages)/secs, "batch WAL frames/s in the recording")
		r.add("replay_recorded_syncs_per_second", float64(batchTxs)/secs, "batch commits (each an fdatasync) /s in the recording")
		r.add("replay_recorded_checkpoints", float64(ckpts), "checkpoints in the recording")
	}
	// Blocks before any Percentile, which sorts its slice in place.
	blocks := map[string][][]time.Duration{}
	for _, arm := range arms {
		blocks[arm] = blocksOf(lats[arm], ats[arm], reviewBlock)
	}
	alone := lats[ioArmAlone]
	for k, arm := range arms {
		xs := lats[arm]
		wall := max(walls[arm].Seconds(), 1e-9)
		r.add(arm+"_windows", float64(windows[arm]), "windows of this arm")
		r.add(arm+"_commits", float64(len(xs)), "interactive commits in its windows")
		r.add(arm+"_commits_per_second", float64(len(xs))/wall, "interactive commits/s achieved")
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", 0.50}, {"p99", 0.99}, {"p999", 0.999}} {
			v := Percentile(xs, q.q)
			r.add(arm+"_"+q.name+"_ms", v, "ms, interactive write+fdatasync")
			if arm != ioArmAlone {
				r.add(arm+"_"+q.name+"_ratio", v/Percentile(alone, q.q), "÷ alone")
			}
		}
		r.add(arm+"_late_p99_ms", Percentile(lates[arm], 0.99), "ms, p99 of an interactive commit's start behind its arrival")
		if arm != ioArmAlone {
			lo, hi := blockRatioInterval(blocks[ioArmAlone], blocks[arm], 0.99, 0.9, bootstrapResamples, uint64(35+k))
			r.add(arm+"_p99_ratio_lo", lo, "90 % block bootstrap (2 s blocks)")
			r.add(arm+"_p99_ratio_hi", hi, "90 % block bootstrap (2 s blocks)")
		}
		if d, ok := disks[arm]; ok {
			// The kernel's view of the device (Linux): what the arm's
			// windows asked of it, whoever else wrote meanwhile.
			r.add(arm+"_device_writes_per_second", float64(d.writes)/wall, "writes/s the device completed (/proc/diskstats, every process's)")
			r.add(arm+"_device_ms_per_write", float64(d.writeMs)/float64(max(1, d.writes)), "ms the device spent per write completed")
			r.add(arm+"_device_flushes_per_second", float64(d.flushes)/wall, "flushes/s the device completed")
			r.add(arm+"_device_ms_per_flush", float64(d.flushMs)/float64(max(1, d.flushes)), "ms the device spent per flush")
		}
		l := loads[arm]
		switch {
		case arm == ioArmSynthetic || arm == ioArmReplay:
			r.add(arm+"_batch_pages_per_second", float64(l.pages.Load())/wall, "batch WAL frames/s achieved")
			r.add(arm+"_batch_syncs_per_second", float64(l.syncs.Load())/wall, "batch fdatasyncs/s achieved")
			if arm == ioArmReplay {
				r.add(arm+"_checkpoints", float64(l.ckpts.Load()), "checkpoints replayed")
				r.add(arm+"_checkpoint_pages", float64(l.ckptPages.Load()), "pages copied into the database file")
			}
		case arm != ioArmAlone:
			r.add(arm+"_burn_cpu_per_second", float64(l.spun.Load())/1e9/wall, "CPU s/s the bursts spun (wall time spinning)")
		}
	}
	return r
}

// awaitArm blocks until arm is the current one, and returns the channel
// the next switch closes; false once ctx has ended (checked first: an
// arm still current when its load is cancelled must not be re-entered
// for ever). A switch to the
// same arm (two windows of one arm in a row) closes it too: a loop
// running in the arm takes switched() afresh on every turn, or a closed
// channel would cut every one of its waits short.
func awaitArm(ctx context.Context, arm string, current func() string, switched func() <-chan struct{}) (<-chan struct{}, bool) {
	for ctx.Err() == nil {
		sw := switched()
		if current() == arm {
			return sw, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-sw:
		}
	}
	return nil, false
}

// paceInArm calls fn every period while arm is the current one, and
// sleeps until the next switch otherwise, until ctx ends.
func paceInArm(ctx context.Context, arm string, current func() string, switched func() <-chan struct{}, period time.Duration, fn func() error) error {
	for {
		sw, ok := awaitArm(ctx, arm, current, switched)
		if !ok {
			return nil
		}
		next := time.Now()
		for ; ctx.Err() == nil && current() == arm; sw = switched() {
			if err := fn(); err != nil {
				return err
			}
			next = next.Add(period)
			select {
			case <-ctx.Done():
			case <-sw:
			case <-time.After(time.Until(next)):
			}
		}
	}
}

// burstInArm spins for piece, then sleeps so that it spins share of the
// time, while arm is the current one: CPU held in bursts of piece by one
// goroutine of the process, as a sweep's long run slices would.
func burstInArm(ctx context.Context, arm string, current func() string, switched func() <-chan struct{}, piece time.Duration, share float64, spun *atomic.Int64) {
	rest := time.Duration(float64(piece) * (1 - share) / share)
	for {
		sw, ok := awaitArm(ctx, arm, current, switched)
		if !ok {
			return
		}
		// Start at a random point of the cycle, so the goroutines'
		// bursts do not all begin together.
		select {
		case <-ctx.Done():
		case <-sw:
		case <-time.After(time.Duration(rand.Int64N(int64(piece + rest)))):
		}
		for ; ctx.Err() == nil && current() == arm; sw = switched() {
			t0 := time.Now()
			for time.Since(t0) < piece {
				// spin: the CPU is the point
			}
			spun.Add(int64(time.Since(t0)))
			select {
			case <-ctx.Done():
			case <-sw:
			case <-time.After(rest):
			}
		}
	}
}

// replayIO replays tl's batch transactions' I/O while the replay arm is
// the current one, the timeline's clock running only then and wrapping
// at its end: each transaction's frames appended at the WAL's position
// (from its beginning when it restarted the WAL) and fdatasynced (a
// synchronous=FULL commit); when it checkpointed, the WAL synced, the
// distinct pages of the WAL since its restart written at their offsets
// in the database file, and that file synced, as SQLite's checkpoint
// does. Interactive transactions are the interactive writer's to make;
// their pages still count for the checkpoints.
func replayIO(ctx context.Context, f *ioFiles, tl ioTimeline, current func() string, switched func() <-chan struct{}, l *ioLoad) error {
	var (
		clock   time.Duration // the timeline's time played so far
		i       int
		inWAL   []uint32 // pages in the WAL since its restart
		pagebuf = make([]byte, ioPage)
	)
	for i := range pagebuf {
		pagebuf[i] = byte(rand.Uint32())
	}
	for {
		sw, ok := awaitArm(ctx, ioArmReplay, current, switched)
		if !ok {
			return nil
		}
		from := time.Now().Add(-clock) // wall time of the timeline's clock 0
		for ; ctx.Err() == nil && current() == ioArmReplay; sw = switched() {
			if i == len(tl.txs) { // wrap: the timeline again, the WAL from its start
				i, clock, from = 0, 0, time.Now()
				inWAL = inWAL[:0]
				f.reserve(0, true)
			}
			tx := tl.txs[i]
			if d := time.Until(from.Add(tx.at)); d > 0 {
				select {
				case <-ctx.Done():
				case <-sw:
				case <-time.After(d):
				}
				clock = time.Since(from)
				continue
			}
			i++
			clock = tx.at
			if tx.restart {
				inWAL = inWAL[:0]
			}
			inWAL = append(inWAL, tx.pages...)
			if !tx.interactive && len(tx.pages) > 0 {
				if err := f.appendFrames(f.reserve(len(tx.pages), tx.restart), len(tx.pages)); err != nil {
					return err
				}
				if err := fdatasync(f.wal); err != nil {
					return err
				}
				l.pages.Add(int64(len(tx.pages)))
				l.syncs.Add(1)
			} else if tx.restart {
				f.reserve(0, true)
			}
			if tx.ckpt > 0 {
				n, err := checkpointIO(f, inWAL, pagebuf)
				if err != nil {
					return err
				}
				l.ckpts.Add(1)
				l.ckptPages.Add(int64(n))
			}
		}
	}
}

// checkpointIO does a checkpoint's I/O: the WAL synced, each distinct
// page of pages written at its offset in the database file (in page
// order, as SQLite's checkpoint sorts them), the database synced. It
// returns the pages written.
func checkpointIO(f *ioFiles, pages []uint32, buf []byte) (int, error) {
	if err := fdatasync(f.wal); err != nil {
		return 0, err
	}
	distinct := slices.Clone(pages)
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	for _, pg := range distinct {
		if pg == 0 {
			continue
		}
		if _, err := f.db.WriteAt(buf, int64(pg-1)*ioPage); err != nil {
			return 0, err
		}
	}
	if err := fdatasync(f.db); err != nil {
		return 0, err
	}
	return len(distinct), nil
}

// fillFile writes size bytes of noise to f and syncs it.
func fillFile(f *os.File, size int64) error {
	if size <= 0 {
		return nil
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(rand.Uint32())
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			return err
		}
	}
	return fdatasync(f)
}
