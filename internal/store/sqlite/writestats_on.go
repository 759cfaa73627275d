//go:build cpulabels

package sqlite

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/job"
)

// writeCaller names a write by the Store method that queued it and the
// first caller outside the store: a kind of write, never an id. Only a
// cpulabels build walks the stack.
func writeCaller() string {
	var pcs [24]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	method, outer := "", ""
	for {
		f, more := frames.Next()
		fn := f.Function
		if i := strings.LastIndex(fn, "/"); i >= 0 {
			fn = fn[i+1:]
		}
		switch {
		case strings.HasPrefix(fn, "sqlite."):
			name := strings.TrimPrefix(fn, "sqlite.(*Store).")
			if method == "" && !strings.HasPrefix(name, "write") && !strings.HasPrefix(name, "enqueue") && !strings.Contains(name, "func") && name != fn {
				method = name
			}
		case strings.HasPrefix(fn, "store.") || strings.HasPrefix(fn, "storewrap.") || strings.HasPrefix(fn, "ratelane.(*regionStore"):
		default:
			outer = fn
		}
		if outer != "" || !more {
			break
		}
	}
	if i := strings.Index(outer, ".func"); i >= 0 {
		outer = outer[:i]
	}
	return method + "<-" + outer
}

// writeStat is one kind of write's figures in one phase.
type writeStat struct {
	Phase, Lane, Kind string
	N                 int64
	HoldMs, MaxMs     float64
	Holds             []float64 `json:"-"`
	P50, P90, P99     float64
	InterBehind       int64   // interactive writes queued when it started
	InterBehindWaitMs float64 // their summed wait behind it (its hold each)
	// Long counts its writes that held the writer longer than longHold,
	// and InterBehindLong the interactive writes queued when one of
	// those ended: the interactive writes a long write kept waiting.
	Long, InterBehindLong int64
}

// longHold is the hold past which a write counts as long (writeStat.Long):
// about an interactive write's own BEGIN, run and COMMIT under a sweep
// (docs/benchmarks.md, "Session 33 (s33h2)").
const longHold = 2 * time.Millisecond

var writeStats struct {
	mu sync.Mutex
	m  map[[3]string]*writeStat
}

// noteWrite records a write's hold of the writer (d) and how many
// interactive writes were queued as it started.
func noteWrite(r *writeReq, d time.Duration, interQueued int) {
	lane := "interactive"
	if r.lane == job.LaneBatch {
		lane = "batch"
	}
	k := [3]string{cpulabel.Phase(), lane, r.kind}
	writeStats.mu.Lock()
	defer writeStats.mu.Unlock()
	if writeStats.m == nil {
		writeStats.m = map[[3]string]*writeStat{}
	}
	st := writeStats.m[k]
	if st == nil {
		st = &writeStat{Phase: k[0], Lane: k[1], Kind: k[2]}
		writeStats.m[k] = st
	}
	ms := float64(d) / 1e6
	st.N++
	st.HoldMs += ms
	st.MaxMs = max(st.MaxMs, ms)
	st.Holds = append(st.Holds, ms)
	st.InterBehind += int64(interQueued)
	st.InterBehindWaitMs += float64(interQueued) * ms
	if d > longHold {
		st.Long++
		st.InterBehindLong += int64(interQueued)
	}
}

// dumpWriteStats appends the figures to $RATELANE_WRITESTATS, one JSON
// line per kind, and forgets them. With the variable unset (or its file
// not writable) it forgets them all the same: a store closed without it
// must not leave its figures to the next store's dump in the process.
func dumpWriteStats() {
	writeStats.mu.Lock()
	defer writeStats.mu.Unlock()
	var w io.Writer = io.Discard
	if path := os.Getenv("RATELANE_WRITESTATS"); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			defer f.Close()
			w = f
		}
	}
	enc := json.NewEncoder(w)
	for _, st := range writeStats.m {
		sort.Float64s(st.Holds)
		st.P50 = st.Holds[len(st.Holds)/2]
		st.P90 = st.Holds[len(st.Holds)*90/100]
		st.P99 = st.Holds[len(st.Holds)*99/100]
		enc.Encode(st)
	}
	writeStats.m = nil
	dumpDecomps(enc)
	dumpAnatomy(enc)
	dumpWALVolumes(enc)
}

// stepStart is when a step of a write that noteStep times started.
func stepStart() time.Time { return time.Now() }

// noteStep records a step of a write (kind "STEP "+step) in lane, started
// at t0: how much of the writer's hold it was.
func noteStep(lane job.Lane, step string, t0 time.Time) {
	noteWrite(&writeReq{lane: lane, kind: "STEP " + step}, time.Since(t0), 0)
}

// noteCommit records a COMMIT's hold by whether its transaction holds an
// interactive write and how many batch-lane writes it holds.
func noteCommit(batch []ran, hasInteractive bool, d time.Duration) {
	nb := 0
	for _, w := range batch {
		if w.r.lane == job.LaneBatch {
			nb++
		}
	}
	b := countRange(nb)
	lane := job.LaneBatch
	if hasInteractive {
		lane = job.LaneInteractive
	}
	noteWrite(&writeReq{lane: lane, kind: "COMMIT batch-writes=" + b}, d, 0)
	for _, w := range batch {
		if w.r.lane != job.LaneBatch {
			noteWrite(&writeReq{lane: w.r.lane, kind: "LATENCY batch-writes-in-tx=" + b}, time.Since(w.r.at), 0)
			noteWrite(&writeReq{lane: w.r.lane, kind: "ARRIVED writer=" + stateNames[w.r.found] + " LATENCY"}, time.Since(w.r.at), 0)
		}
	}
}

// stateNames name the writerStates.
var stateNames = [...]string{
	writerIdle:        "idle",
	writerRunInter:    "running-interactive-tx",
	writerCommitInter: "committing-interactive-tx",
	writerRunBatch:    "running-batch-tx",
	writerCommitBatch: "committing-batch-tx",
	writerHoldBatch:   "holding-batch-tx",
}

// noteArrival records an interactive write's wait for the writer (its
// call to its start) by what the writer was doing when it was queued.
func noteArrival(r *writeReq) {
	noteWrite(&writeReq{lane: r.lane, kind: "ARRIVED writer=" + stateNames[r.found] + " WAIT"}, time.Since(r.at), 0)
	noteWrite(&writeReq{lane: r.lane, kind: "ARRIVED-BY-KIND writer=" + stateNames[r.found] + " " + r.kind}, time.Since(r.at), 0)
}

// noteHold records one hold of a batch-lane transaction (held) by how
// it ended: a write joined it (r), or no write did before the
// interactive work ended or the bound passed.
func noteHold(r *writeReq, bound bool, d time.Duration) {
	how := "HOLD ended-by=interactive-idle"
	lane := job.LaneBatch
	switch {
	case r == nil && bound:
		how = "HOLD ended-by=bound"
	case r == nil:
	case r.lane == job.LaneBatch:
		how = "HOLD ended-by=batch-write"
	default:
		how = "HOLD ended-by=interactive-write"
	}
	noteWrite(&writeReq{lane: lane, kind: how}, d, 0)
}

// countRange names the range of write counts n falls in.
func countRange(n int) string {
	switch {
	case n >= 64:
		return "64+"
	case n >= 16:
		return "16-63"
	case n >= 4:
		return "4-15"
	case n >= 1:
		return "1-3"
	}
	return "0"
}

// wseg is one stretch of the writer's time, as a cpulabels build records
// it (noteSeg): a write's run, a BEGIN, a COMMIT, a hold.
type wseg struct {
	t0, t1 time.Time
	what   string
	r      *writeReq // the write run, or nil
	tx     int64     // the transaction it belongs to
}

// segRing is the writer's last segRingSize stretches of time, per store.
type segRing struct {
	ring [segRingSize]wseg
	n    int64
	tx   int64 // the transaction running (counted at each BEGIN)
	// batchEnd is when the last batch-only COMMIT ended.
	batchEnd time.Time
	// dbMod and dbSize are the main database file's at the last COMMIT:
	// in WAL mode only a checkpoint writes that file.
	dbMod  time.Time
	dbSize int64
	// besideOn is set while a checkpoint beside the writer
	// (Config.GapCheckpoint, not GapCheckpointOnWriter) runs, and besideEnd is when the last
	// one ended: a COMMIT that overlaps one is not counted as
	// checkpointing (the main file changed under it) but as overlapping.
	besideOn  bool
	besideEnd time.Time
	// wal is the wal-index header read at the running transaction's
	// BEGIN: the frames its COMMIT appends are read against it.
	wal walHdr
}

// walHdr is the part of the wal-index header the WAL volume figures
// need: frames in the WAL, how many a checkpoint copied, and the salt
// that changes when a write restarts the WAL from its beginning.
type walHdr struct {
	mx, backfilled int64
	nPage          int64 // the database's size in pages after the last commit
	salt           uint64
	ok             bool
}

// readWALHdr reads s's wal-index header (the writer goroutine only).
func readWALHdr(s *Store) walHdr {
	if _, ok := s.walBacklog(); !ok || s.shm == nil {
		return walHdr{}
	}
	var b [100]byte
	if _, err := s.shm.ReadAt(b[:], 0); err != nil {
		return walHdr{}
	}
	mx, bf, ok := readWALIndex(s.shm)
	return walHdr{mx: mx, backfilled: bf, nPage: int64(binary.NativeEndian.Uint32(b[20:])), salt: binary.NativeEndian.Uint64(b[32:]), ok: ok}
}

// walVol is the WAL volume of one kind of transaction in one phase.
type walVol struct {
	Phase, Class string
	Txs, Writes  int64
	Frames       int64 // appended to the WAL by their COMMITs
	Ckpt         int64 // frames a checkpoint in their COMMITs copied
}

var walVols struct {
	mu sync.Mutex
	m  map[[2]string]*walVol
	// pages counts the frames by page number, per phase and class, for
	// a map of the WAL's volume onto tables and indexes (dbstat, on the
	// copy of the database dumpWALVolumes leaves beside the stats).
	pages map[[2]string]map[uint32]int64
	wal   map[*Store]*os.File
	path  string // the database of the last store seen
	// txs lists each transaction's pages in commit order, with the
	// database's size in pages before and after it: a page past NPage0
	// is new to the file (it grew it).
	txs []walTx
}

// walTx is one transaction's pages as its COMMIT appended them.
type walTx struct {
	WALTx          bool
	Phase          string
	Kinds          []string
	NPage0, NPage1 int64
	Pages          []uint32
	// Leaves describes each frame that is a table leaf as the COMMIT
	// wrote it ("" for any other page): its cells, its first and last
	// rowid and its free bytes, "cells:first:last:free"; any other page
	// as "t" and its first byte (its b-tree page type when it is one);
	// page 1 as "p1:pages:trunk:free" (its file header's fields).
	Leaves []string `json:",omitempty"`
	// IO is what a replay of the transaction's I/O needs beside its
	// pages (`ratelane bench io-floor --replay`): when its COMMIT ended,
	// whether it held an interactive write, the frames a checkpoint in
	// it copied and whether it restarted the WAL from its beginning.
	IO walTxIO
}

// walTxIO is a walTx's timing and checkpoint figures (walTx.IO).
type walTxIO struct {
	EndNs       int64 // the COMMIT's end, Unix nanoseconds
	Interactive bool  // the transaction held an interactive write
	Ckpt        int64 // frames backfilled into the database by it
	Restart     bool  // its first frame went to the WAL's beginning
	Mx          int64 // the WAL's frames after it
}

// walFrameLeaves describes frames [from, to) of s's WAL that hold table
// b-tree leaves (type 13): cells, first and last rowid, free bytes; of
// any other frame, its first byte.
// Called under walVols.mu, after walFramePages opened the WAL.
func walFrameLeaves(s *Store, from, to int64) []string {
	f := walVols.wal[s]
	if f == nil {
		return nil
	}
	out := make([]string, 0, to-from)
	pg := make([]byte, 4096)
	var hdr [4]byte
	for i := from; i < to; i++ {
		off := 32 + i*walFrameSize
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return out
		}
		if _, err := f.ReadAt(pg, off+24); err != nil {
			return out
		}
		h := 0
		if binary.BigEndian.Uint32(hdr[:]) == 1 {
			// Page 1: the file header's size in pages, first freelist
			// trunk page and free pages.
			out = append(out, "p1:"+strconv.Itoa(int(binary.BigEndian.Uint32(pg[28:])))+":"+
				strconv.Itoa(int(binary.BigEndian.Uint32(pg[32:])))+":"+strconv.Itoa(int(binary.BigEndian.Uint32(pg[36:]))))
			continue
		}
		if pg[h] != 13 {
			out = append(out, "t"+strconv.Itoa(int(pg[h])))
			continue
		}
		n := int(binary.BigEndian.Uint16(pg[h+3:]))
		content := int(binary.BigEndian.Uint16(pg[h+5:]))
		if content == 0 {
			content = 65536
		}
		free := content - (h + 8 + 2*n) + int(pg[h+7])
		for fb := int(binary.BigEndian.Uint16(pg[h+1:])); fb != 0 && fb+4 <= len(pg); {
			free += int(binary.BigEndian.Uint16(pg[fb+2:]))
			fb = int(binary.BigEndian.Uint16(pg[fb:]))
		}
		rowid := func(k int) uint64 {
			cp := int(binary.BigEndian.Uint16(pg[h+8+2*k:]))
			j := cp
			for pg[j]&0x80 != 0 { // the payload size varint
				j++
			}
			j++
			var v uint64
			for k := 0; k < 9; k++ {
				x := pg[j+k]
				if k == 8 {
					v = v<<8 | uint64(x)
					break
				}
				v = v<<7 | uint64(x&0x7f)
				if x < 0x80 {
					break
				}
			}
			return v
		}
		var first, last uint64
		if n > 0 {
			first, last = rowid(0), rowid(n-1)
		}
		out = append(out, strconv.Itoa(n)+":"+strconv.FormatUint(first, 10)+":"+strconv.FormatUint(last, 10)+":"+strconv.Itoa(free))
	}
	return out
}

// walFramePages returns the page numbers of frames [from, to) of s's WAL
// (each frame's header begins with its page number, big-endian, after
// the WAL's 32-byte header). Called under walVols.mu.
func walFramePages(s *Store, from, to int64) []uint32 {
	f := walVols.wal[s]
	if f == nil {
		var err error
		if f, err = os.Open(s.cfg.Path + "-wal"); err != nil {
			return nil
		}
		if walVols.wal == nil {
			walVols.wal = map[*Store]*os.File{}
		}
		walVols.wal[s] = f
	}
	return readWALPages(f, from, to)
}

// noteWALVolume records the frames a COMMIT appended (from g.wal, read at
// BEGIN, to now) by phase and transaction class (batch-only or with an
// interactive write), and, for a transaction of one write, by its kind;
// a transaction of several writes gives each batch write kind its share.
// It returns the frames (-1 when the wal-index could not be read).
func noteWALVolume(s *Store, g *segRing, batch []ran, hasInteractive bool) (frames int64) {
	a, b := g.wal, readWALHdr(s)
	if !a.ok || !b.ok {
		return -1
	}
	frames, ck := b.mx-a.mx, b.backfilled-a.backfilled
	if b.salt != a.salt { // the WAL restarted: its frames are all this tx's
		frames, ck = b.mx, b.backfilled
	}
	if ck < 0 {
		ck = 0
	}
	phase := cpulabel.Phase()
	class := "tx batch-only"
	if hasInteractive {
		class = "tx with-interactive"
	}
	walVols.mu.Lock()
	defer walVols.mu.Unlock()
	if walVols.m == nil {
		walVols.m = map[[2]string]*walVol{}
	}
	add := func(class string, txs, writes, frames, ck int64) {
		k := [2]string{phase, class}
		v := walVols.m[k]
		if v == nil {
			v = &walVol{Phase: phase, Class: class}
			walVols.m[k] = v
		}
		v.Txs += txs
		v.Writes += writes
		v.Frames += frames
		v.Ckpt += ck
	}
	add(class, 1, int64(len(batch)), frames, ck)
	walVols.path = s.cfg.Path
	if walVols.pages == nil {
		walVols.pages = map[[2]string]map[uint32]int64{}
	}
	pk := [2]string{phase, class}
	if len(batch) == 1 {
		pk[1] = "solo " + batch[0].r.kind
	}
	if walVols.pages[pk] == nil {
		walVols.pages[pk] = map[uint32]int64{}
	}
	pages := walFramePages(s, b.mx-frames, b.mx)
	for _, pg := range pages {
		walVols.pages[pk][pg]++
	}
	kinds := make([]string, len(batch))
	for i, w := range batch {
		kinds[i] = w.r.kind
	}
	walVols.txs = append(walVols.txs, walTx{Phase: phase, Kinds: kinds, NPage0: a.nPage, NPage1: b.nPage, Pages: pages, Leaves: walFrameLeaves(s, b.mx-frames, b.mx),
		IO: walTxIO{EndNs: time.Now().UnixNano(), Interactive: hasInteractive, Ckpt: ck, Restart: b.salt != a.salt, Mx: b.mx}})
	if len(batch) == 1 {
		add("solo "+batch[0].r.kind, 1, 1, frames, ck)
		return frames
	}
	// Shares of a shared transaction: equal per write (a rough split).
	for _, w := range batch {
		add("shared "+w.r.kind, 0, 1, frames/int64(len(batch)), 0)
	}
	return frames
}

// dumpWALVolumes appends the WAL volume figures and forgets them.
func dumpWALVolumes(enc *json.Encoder) {
	walVols.mu.Lock()
	defer walVols.mu.Unlock()
	for _, v := range walVols.m {
		enc.Encode(struct {
			WAL bool
			*walVol
		}{true, v})
	}
	walVols.m = nil
	for k, m := range walVols.pages {
		enc.Encode(struct {
			WALPages     bool
			Phase, Class string
			Pages        map[uint32]int64
		}{true, k[0], k[1], m})
	}
	walVols.pages = nil
	for i := range walVols.txs {
		walVols.txs[i].WALTx = true
		enc.Encode(&walVols.txs[i])
	}
	walVols.txs = nil
	// A copy of the database for dbstat's page-to-table map.
	if out := os.Getenv("RATELANE_WRITESTATS"); out != "" && walVols.path != "" {
		for _, suf := range []string{"", "-wal", "-shm"} {
			if b, err := os.ReadFile(walVols.path + suf); err == nil {
				os.WriteFile(out+".db"+suf, b, 0o600)
			}
		}
	}
}

const segRingSize = 1 << 15

// decomp is one interactive write's latency (its call to its commit's
// end) split by what the writer did meanwhile.
type decomp struct {
	phase string
	lat   float64
	parts map[string]float64
}

var segs struct {
	mu      sync.Mutex
	rings   map[*Store]*segRing
	decomps []decomp
	classed []classed
}

func ringOf(s *Store) *segRing {
	if segs.rings == nil {
		segs.rings = map[*Store]*segRing{}
	}
	g := segs.rings[s]
	if g == nil {
		g = &segRing{}
		if fi, err := os.Stat(s.cfg.Path); err == nil {
			g.dbMod, g.dbSize = fi.ModTime(), fi.Size()
		}
		segs.rings[s] = g
	}
	return g
}

// noteSeg records a stretch of the writer's time from t0 to now.
func noteSeg(s *Store, what string, r *writeReq, t0 time.Time) {
	now := time.Now()
	segs.mu.Lock()
	defer segs.mu.Unlock()
	g := ringOf(s)
	if what == "begin" {
		g.tx++
		g.wal = readWALHdr(s)
	}
	g.ring[g.n%segRingSize] = wseg{t0: t0, t1: now, what: what, r: r, tx: g.tx}
	g.n++
}

// noteRun records a write's run as a stretch of the writer's time.
func noteRun(s *Store, r *writeReq, t0 time.Time) {
	lane := "interactive"
	if r.lane == job.LaneBatch {
		lane = "batch"
	}
	noteSeg(s, lane+" write "+r.kind, r, t0)
}

// noteTxCommit records a COMMIT that began at c0, whether it checkpointed
// (the main file changed since the last COMMIT), and splits the latency of
// each interactive write it answers by what the writer did from the
// write's call to now.
func noteTxCommit(s *Store, batch []ran, hasInteractive bool, c0 time.Time) {
	now := time.Now()
	d := now.Sub(c0)
	segs.mu.Lock()
	g := ringOf(s)
	ckpt := "plain"
	overBeside := g.besideOn || g.besideEnd.After(c0)
	if fi, err := os.Stat(s.cfg.Path); err == nil {
		if !fi.ModTime().Equal(g.dbMod) || fi.Size() != g.dbSize {
			ckpt = "ckpt"
		}
		g.dbMod, g.dbSize = fi.ModTime(), fi.Size()
	}
	if overBeside {
		ckpt = "beside-overlap"
	}
	what := "commit batch-only " + ckpt
	if hasInteractive {
		what = "commit with-interactive " + ckpt
	}
	g.ring[g.n%segRingSize] = wseg{t0: c0, t1: now, what: what, tx: g.tx}
	g.n++
	frames := noteWALVolume(s, g, batch, hasInteractive)
	phase := cpulabel.Phase()
	nb := 0
	for _, w := range batch {
		if w.r.lane == job.LaneBatch {
			nb++
		}
	}
	var recent []wseg // the ring's stretches, newest first, back to the oldest write's call
	oldest := now
	for _, w := range batch {
		if w.r.lane != job.LaneBatch && w.r.at.Before(oldest) {
			oldest = w.r.at
		}
	}
	for i := g.n - 1; i >= 0 && i > g.n-segRingSize; i-- {
		sg := g.ring[i%segRingSize]
		if sg.t1.Before(oldest) {
			break
		}
		recent = append(recent, sg)
	}
	for _, w := range batch {
		if w.r.lane == job.LaneBatch {
			continue
		}
		dc := decomp{phase: phase, lat: float64(now.Sub(w.r.at)) / 1e6, parts: map[string]float64{}}
		covered := 0.0
		for _, sg := range recent {
			if sg.t1.Before(w.r.at) {
				break
			}
			lo := sg.t0
			if lo.Before(w.r.at) {
				lo = w.r.at
			}
			ms := float64(sg.t1.Sub(lo)) / 1e6
			if ms <= 0 {
				continue
			}
			label := sg.what
			switch {
			case sg.r == w.r:
				label = "own run"
			case sg.tx == g.tx && strings.HasPrefix(sg.what, "commit"):
				label = "own " + sg.what
			case sg.tx == g.tx && sg.what == "begin":
				label = "own begin"
			case sg.tx == g.tx:
				label = "same tx: " + sg.what
			}
			dc.parts[label] += ms
			covered += ms
		}
		dc.parts["uncovered"] += dc.lat - covered
		segs.decomps = append(segs.decomps, dc)
		wc := waitClasses(recent, w.r, g.tx, nb)
		wc.phase, wc.kind, wc.lat, wc.frames = phase, w.r.kind, dc.lat, frames
		wc.commitMs = float64(d) / 1e6
		wc.overBeside = overBeside
		wc.sinceBatch = -1
		if !g.batchEnd.IsZero() {
			wc.sinceBatch = c0.Sub(g.batchEnd)
		}
		segs.classed = append(segs.classed, wc)
	}
	if !hasInteractive {
		g.batchEnd = now
	}
	segs.mu.Unlock()
	lane := job.LaneBatch
	if hasInteractive {
		lane = job.LaneInteractive
	}
	noteWrite(&writeReq{lane: lane, kind: "CKPT " + what}, d, 0)
}

// decompStat is one line of the decomposition's dump: in phase, over the
// interactive writes of set ("all", or "slowest 5%" by latency), the
// time spent beside label.
type decompStat struct {
	Decomp, Set, Label string
	Writes             int     // writes in the set
	With               int     // of them, how many had any of label
	Ms                 float64 // summed
	PerWriteMs         float64
	LatP50, LatP99     float64
}

// dumpDecomps appends the decompositions to f's encoder and forgets them.
func dumpDecomps(enc *json.Encoder) {
	segs.mu.Lock()
	defer segs.mu.Unlock()
	by := map[string][]decomp{}
	for _, d := range segs.decomps {
		by[d.phase] = append(by[d.phase], d)
	}
	for phase, ds := range by {
		sort.Slice(ds, func(i, j int) bool { return ds[i].lat < ds[j].lat })
		p50, p99 := ds[len(ds)/2].lat, ds[len(ds)*99/100].lat
		for _, set := range []struct {
			name string
			ds   []decomp
		}{{"all", ds}, {"slowest 5%", ds[len(ds)*95/100:]}, {"slowest 1%", ds[len(ds)*99/100:]}} {
			sum := map[string]float64{}
			with := map[string]int{}
			for _, d := range set.ds {
				for l, ms := range d.parts {
					sum[l] += ms
					if ms > 0 {
						with[l]++
					}
				}
			}
			for l, ms := range sum {
				enc.Encode(decompStat{Decomp: phase, Set: set.name, Label: l, Writes: len(set.ds), With: with[l],
					Ms: ms, PerWriteMs: ms / float64(len(set.ds)), LatP50: p50, LatP99: p99})
			}
		}
	}
	segs.decomps = nil
	dumpWaitClasses(enc, segs.classed)
	segs.classed = nil
}

// noteGapCheckpoint records a gap checkpoint (Store.gapCheckpoint) begun
// at t0, and takes the main file's new mtime and size as the last
// COMMIT's, so that the next COMMIT is not counted as checkpointing.
func noteGapCheckpoint(s *Store, t0 time.Time) {
	noteSeg(s, "gap checkpoint", nil, t0)
	segs.mu.Lock()
	g := ringOf(s)
	if fi, err := os.Stat(s.cfg.Path); err == nil {
		g.dbMod, g.dbSize = fi.ModTime(), fi.Size()
	}
	segs.mu.Unlock()
	noteWrite(&writeReq{lane: job.LaneBatch, kind: "CKPT gap checkpoint"}, time.Since(t0), 0)
}

// noteBesideBegin records that a checkpoint beside the writer
// (Store.checkpointOnce) began.
func noteBesideBegin(s *Store) {
	segs.mu.Lock()
	ringOf(s).besideOn = true
	segs.mu.Unlock()
}

// noteBesideEnd records a checkpoint beside the writer begun at t0: not a
// stretch of the writer's time (no write waits for it), but the main
// file's new mtime and size are taken as the last COMMIT's, and the
// COMMITs that overlapped it are marked so (noteTxCommit).
func noteBesideEnd(s *Store, t0 time.Time) {
	segs.mu.Lock()
	g := ringOf(s)
	g.besideOn, g.besideEnd = false, time.Now()
	if fi, err := os.Stat(s.cfg.Path); err == nil {
		g.dbMod, g.dbSize = fi.ModTime(), fi.Size()
	}
	segs.mu.Unlock()
	noteWrite(&writeReq{lane: job.LaneBatch, kind: "CKPT beside checkpoint"}, time.Since(t0), 0)
}
